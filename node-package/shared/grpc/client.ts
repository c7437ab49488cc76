/**
 * The client of one sidecar connection: the generated service clients on its
 * one channel, and one method per RPC the nodes make, each a retried unary
 * call within the credential's deadline (callUnary), plus the WatchResumable
 * stream and the health check.
 */
import { Client, type CallOptions, type ClientReadableStream, type Metadata } from '@grpc/grpc-js';

import { CallServiceClient } from '../gen/durable/v1/call';
import {
	CheckpointServiceClient,
	CheckpointServiceService,
	SaveCheckpointsRequest,
	type SaveCheckpointsResponse,
} from '../gen/durable/v1/checkpoint';
import {
	AwaitEventRequest,
	EventServiceClient,
	EventServiceService,
	RecoveryServiceClient,
	RecoveryServiceService,
	ResumeInstanceRequest,
	RetryInstanceRequest,
	SignalInstanceRequest,
	type AwaitEventResponse,
	type ResumeInstanceResponse,
	type RetryInstanceResponse,
	type SignalInstanceResponse,
} from '../gen/durable/v1/events';
import {
	FileServiceClient,
	FileServiceService,
	ListCheckpointFilesRequest,
	ListKeyFilesRequest,
	StatFilesRequest,
	type ListCheckpointFilesResponse,
	type ListKeyFilesResponse,
	type StatFilesResponse,
	type UploadFileResponse,
} from '../gen/durable/v1/files';
import {
	ClaimRequest,
	CompleteRequest,
	IdempotencyServiceClient,
	IdempotencyServiceService,
	ReleaseRequest,
	type ClaimResponse,
	type CompleteResponse,
	type ReleaseResponse,
} from '../gen/durable/v1/idempotency';
import {
	CancelInstanceRequest,
	CompleteInstanceRequest,
	FailInstanceRequest,
	InstanceServiceClient,
	InstanceServiceService,
	ListInstancesRequest,
	ScheduleWakeUpRequest,
	StartOrResumeRequest,
	WatchResumableRequest,
	type CancelInstanceResponse,
	type CompleteInstanceResponse,
	type DeepPartial,
	type FailInstanceResponse,
	type ListInstancesResponse,
	type ScheduleWakeUpResponse,
	type StartOrResumeResponse,
	type WatchResumableResponse,
} from '../gen/durable/v1/instance';
import {
	AcquireSlotRequest,
	DebounceRequest,
	LimitServiceService,
	ReleaseSlotRequest,
	ThrottleRequest,
	type AcquireSlotResponse,
	type DebounceResponse,
	type ReleaseSlotResponse,
	type ThrottleResponse,
} from '../gen/durable/v1/limits';
import {
	HeartbeatRequest,
	OpenSessionRequest,
	SessionServiceClient,
	SessionServiceService,
	WatchSessionRequest,
} from '../gen/durable/v1/session';
import {
	SyncVersionFromN8nRequest,
	VersionServiceClient,
	VersionServiceService,
	type SyncVersionFromN8nResponse,
} from '../gen/durable/v1/version';
import { CallStream } from './call-stream';
import { SidecarChannel } from './channel';
import { addressesOf, type SidecarConnection } from './connection';
import { downloadFile, transferSeconds, uploadFile, type ContentSource } from './files';
import { checkHealth, type ServingStatus } from './health';
import { processIdentity } from './identity';
import { isSessionRefusal, SESSION_METADATA, SessionKeeper } from './session';
import { callUnary, type UnaryMethod } from './unary';

/** A generated request message type: builds the request from what the caller gave. */
interface RequestCodec<Req> {
	fromPartial(object: DeepPartial<Req>): Req;
}

/** The execution id, or the first item's execution id or key holder, a request names ('' for none). */
export function ownerOf(request: unknown): string {
	const r = request as {
		executionId?: unknown;
		items?: Array<{ executionId?: unknown; holder?: unknown } | undefined>;
	};
	const first = Array.isArray(r.items) ? r.items[0] : undefined;
	const owner = r.executionId ?? first?.executionId ?? first?.holder ?? '';
	return typeof owner === 'string' ? owner : '';
}

/** One sidecar endpoint: the service clients share a single channel. */
export class SidecarClient {
	readonly instances: InstanceServiceClient;
	readonly checkpoints: CheckpointServiceClient;
	readonly idempotency: IdempotencyServiceClient;
	readonly versions: VersionServiceClient;
	readonly events: EventServiceClient;
	readonly recovery: RecoveryServiceClient;
	readonly sessions: SessionServiceClient;
	readonly files: FileServiceClient;
	/** This process's session with the sidecar: its leases live as long as the process (session.ts). */
	readonly session: SessionKeeper;
	private readonly generic: Client;
	private readonly channel: SidecarChannel;
	/**
	 * The connection's open call stream (call-stream.ts); none with several
	 * sidecars, where each call goes unary so that round_robin spreads them and
	 * a retry reaches the next sidecar.
	 */
	private readonly stream: CallStream | undefined;

	constructor(readonly connection: SidecarConnection) {
		this.channel = new SidecarChannel(connection);
		const { target, credentials } = this.channel;
		const shared = { channelOverride: this.channel.channel };
		this.instances = new InstanceServiceClient(target, credentials, shared);
		this.checkpoints = new CheckpointServiceClient(target, credentials, shared);
		this.idempotency = new IdempotencyServiceClient(target, credentials, shared);
		this.versions = new VersionServiceClient(target, credentials, shared);
		this.events = new EventServiceClient(target, credentials, shared);
		this.recovery = new RecoveryServiceClient(target, credentials, shared);
		this.sessions = new SessionServiceClient(target, credentials, shared);
		this.files = new FileServiceClient(target, credentials, shared);
		this.generic = new Client(target, credentials, shared);
		this.stream =
			addressesOf(connection).length === 1
				? new CallStream(new CallServiceClient(target, credentials, shared), () => this.metadata())
				: undefined;
		const sessions = this.sessions;
		this.session = new SessionKeeper(
			{
				open: (request) =>
					this.call(SessionServiceService.openSession, OpenSessionRequest, request),
				beat: (sessionId, releasedOwners, runningOwners) =>
					this.call(
						SessionServiceService.heartbeat,
						HeartbeatRequest,
						{ sessionId, releasedOwners, runningOwners },
						5,
					),
				watch: (sessionId, onEnded, onClosed) => {
					const stream = sessions.watchSession(
						WatchSessionRequest.fromPartial({ sessionId }),
						this.metadata(),
						{},
					);
					stream.on('data', (message: { ended: boolean }) => {
						if (message.ended) onEnded();
					});
					stream.on('error', () => onClosed());
					stream.on('end', () => onClosed());
					return stream;
				},
			},
			processIdentity(),
		);
	}

	/** Bearer token metadata for an authenticated call. */
	metadata(): Metadata {
		return this.channel.metadata();
	}

	/** Call options with the credential's deadline (or an explicit one, in seconds). */
	options(deadlineSeconds?: number): Partial<CallOptions> {
		const seconds = deadlineSeconds ?? this.connection.deadlineSeconds;
		return { deadline: new Date(Date.now() + seconds * 1000) };
	}

	/**
	 * `method` of `service` with the request built from `request`, within the
	 * credential's deadline (or an explicit one, in seconds).
	 */
	private call<Req, Res>(
		method: UnaryMethod<Req, Res>,
		codec: RequestCodec<Req>,
		request: DeepPartial<Req>,
		deadlineSeconds?: number,
	): Promise<Res> {
		const seconds = deadlineSeconds ?? this.connection.deadlineSeconds;
		const message = codec.fromPartial(request);
		return callUnary(this.channel, this.generic, method, message, seconds, '', this.stream);
	}

	/**
	 * As `call`, in the session of the request's owner (the execution id or key
	 * holder it names; the current session for none). A call refused because the session it just
	 * chose had ended (this process was declared dead and lives on) is sent
	 * once more in a new session; a call of an execution that began in the
	 * ended session is refused for good: that execution was resumed elsewhere.
	 */
	private async unary<Req, Res>(
		method: UnaryMethod<Req, Res>,
		codec: RequestCodec<Req>,
		request: DeepPartial<Req>,
		deadlineSeconds?: number,
	): Promise<Res> {
		const seconds = deadlineSeconds ?? this.connection.deadlineSeconds;
		const message = codec.fromPartial(request);
		const owner = ownerOf(request);
		const chosen = await this.session.choose(owner);
		const send = (session: string) =>
			callUnary(this.channel, this.generic, method, message, seconds, session, this.stream);
		return await send(chosen.id).catch(async (error: unknown) => {
			if (!chosen.fresh || !isSessionRefusal(error)) return await Promise.reject(error);
			return await send(await this.session.renew(owner, chosen.id));
		});
	}

	startOrResume(request: DeepPartial<StartOrResumeRequest>): Promise<StartOrResumeResponse> {
		return this.unary(InstanceServiceService.startOrResume, StartOrResumeRequest, request);
	}

	completeInstance(
		request: DeepPartial<CompleteInstanceRequest>,
	): Promise<CompleteInstanceResponse> {
		return this.unary(InstanceServiceService.completeInstance, CompleteInstanceRequest, request);
	}

	failInstance(request: DeepPartial<FailInstanceRequest>): Promise<FailInstanceResponse> {
		return this.unary(InstanceServiceService.failInstance, FailInstanceRequest, request);
	}

	cancelInstance(request: DeepPartial<CancelInstanceRequest>): Promise<CancelInstanceResponse> {
		return this.unary(InstanceServiceService.cancelInstance, CancelInstanceRequest, request);
	}

	awaitEvent(request: DeepPartial<AwaitEventRequest>): Promise<AwaitEventResponse> {
		return this.unary(EventServiceService.awaitEvent, AwaitEventRequest, request);
	}

	signalInstance(request: DeepPartial<SignalInstanceRequest>): Promise<SignalInstanceResponse> {
		return this.unary(EventServiceService.signalInstance, SignalInstanceRequest, request);
	}

	/** The credential's deadline plus the time the call may wait for a place in the sidecar. */
	acquireSlot(request: DeepPartial<AcquireSlotRequest>): Promise<AcquireSlotResponse> {
		const waits = Math.max(0, Number(request.maxWaitMs ?? 0)) / 1000;
		return this.unary(
			LimitServiceService.acquireSlot,
			AcquireSlotRequest,
			request,
			this.connection.deadlineSeconds + waits,
		);
	}

	releaseSlot(request: DeepPartial<ReleaseSlotRequest>): Promise<ReleaseSlotResponse> {
		return this.unary(LimitServiceService.releaseSlot, ReleaseSlotRequest, request);
	}

	throttle(request: DeepPartial<ThrottleRequest>): Promise<ThrottleResponse> {
		return this.unary(LimitServiceService.throttle, ThrottleRequest, request);
	}

	debounce(request: DeepPartial<DebounceRequest>): Promise<DebounceResponse> {
		return this.unary(LimitServiceService.debounce, DebounceRequest, request);
	}

	retryInstance(request: DeepPartial<RetryInstanceRequest>): Promise<RetryInstanceResponse> {
		return this.unary(RecoveryServiceService.retryInstance, RetryInstanceRequest, request);
	}

	resumeInstance(request: DeepPartial<ResumeInstanceRequest>): Promise<ResumeInstanceResponse> {
		return this.unary(RecoveryServiceService.resumeInstance, ResumeInstanceRequest, request);
	}

	scheduleWakeUp(request: DeepPartial<ScheduleWakeUpRequest>): Promise<ScheduleWakeUpResponse> {
		return this.unary(InstanceServiceService.scheduleWakeUp, ScheduleWakeUpRequest, request);
	}

	listInstances(
		request: DeepPartial<ListInstancesRequest>,
		deadlineSeconds?: number,
	): Promise<ListInstancesResponse> {
		return this.call(
			InstanceServiceService.listInstances,
			ListInstancesRequest,
			request,
			deadlineSeconds,
		);
	}

	saveCheckpoints(request: DeepPartial<SaveCheckpointsRequest>): Promise<SaveCheckpointsResponse> {
		return this.unary(CheckpointServiceService.saveCheckpoints, SaveCheckpointsRequest, request);
	}

	claim(request: DeepPartial<ClaimRequest>): Promise<ClaimResponse> {
		return this.unary(IdempotencyServiceService.claim, ClaimRequest, request);
	}

	completeKey(request: DeepPartial<CompleteRequest>): Promise<CompleteResponse> {
		return this.unary(IdempotencyServiceService.complete, CompleteRequest, request);
	}

	releaseKey(request: DeepPartial<ReleaseRequest>): Promise<ReleaseResponse> {
		return this.unary(IdempotencyServiceService.release, ReleaseRequest, request);
	}

	syncVersionFromN8n(
		request: DeepPartial<SyncVersionFromN8nRequest>,
	): Promise<SyncVersionFromN8nResponse> {
		return this.call(VersionServiceService.syncVersionFromN8N, SyncVersionFromN8nRequest, request);
	}

	statFiles(request: DeepPartial<StatFilesRequest>): Promise<StatFilesResponse> {
		return this.call(FileServiceService.statFiles, StatFilesRequest, request);
	}

	listCheckpointFiles(
		request: DeepPartial<ListCheckpointFilesRequest>,
	): Promise<ListCheckpointFilesResponse> {
		return this.call(FileServiceService.listCheckpointFiles, ListCheckpointFilesRequest, request);
	}

	listKeyFiles(request: DeepPartial<ListKeyFilesRequest>): Promise<ListKeyFilesResponse> {
		return this.call(FileServiceService.listKeyFiles, ListKeyFilesRequest, request);
	}

	/** Uploads one content (its bytes from `source`, read again if the upload starts over). */
	uploadFile(
		sha256: string,
		sizeBytes: number,
		source: ContentSource,
	): Promise<UploadFileResponse> {
		const seconds = transferSeconds(this.connection.deadlineSeconds, sizeBytes);
		return uploadFile(this.files, () => this.metadata(), seconds, sha256, sizeBytes, source);
	}

	/** One content's bytes as a stream (its size in `sizeBytes`). */
	downloadFile(sha256: string, sizeBytes: number): ReturnType<typeof downloadFile> {
		const seconds = transferSeconds(this.connection.deadlineSeconds, sizeBytes);
		return downloadFile(this.files, this.metadata(), seconds, sha256);
	}

	/**
	 * Opens the WatchResumable server stream. It has no deadline of its own: it
	 * lives until the caller cancels it; the Resume Trigger watches the
	 * sidecar's heartbeats instead and reconnects when they stop.
	 */
	watchResumable(
		request: DeepPartial<WatchResumableRequest>,
	): ClientReadableStream<WatchResumableResponse> {
		const metadata = this.metadata();
		if (this.session.id) metadata.set(SESSION_METADATA, this.session.id);
		return this.instances.watchResumable(WatchResumableRequest.fromPartial(request), metadata, {});
	}

	/**
	 * The WatchResumable stream in this process's session (opened first when
	 * needed), so the claims it hands out end with the process: a claim whose
	 * process died before its execution took the instance over is free at once.
	 */
	async watchResumableInSession(
		request: DeepPartial<WatchResumableRequest>,
	): Promise<ClientReadableStream<WatchResumableResponse>> {
		await this.session.choose('');
		return this.watchResumable(request);
	}

	/** grpc.health.v1.Health/Check without a token (the sidecar needs none for it). */
	healthCheck(service = '', deadlineSeconds?: number): Promise<ServingStatus> {
		return checkHealth(this.generic, service, this.options(deadlineSeconds));
	}

	close(): void {
		this.instances.close();
		this.checkpoints.close();
		this.idempotency.close();
		this.versions.close();
		this.events.close();
		this.recovery.close();
		this.sessions.close();
		this.files.close();
		this.generic.close();
		this.session.stop();
		this.stream?.close();
		this.channel.close();
	}
}
