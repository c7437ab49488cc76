/**
 * The one gRPC transport of the package: a channel per credential (reused by
 * every node and execution of this n8n process), bearer-token metadata and a
 * deadline on every unary call. Unary calls wait for the channel to be ready
 * and retry UNAVAILABLE (and the CANCELLED of a stopping sidecar) with
 * jittered backoff inside that deadline, so a sidecar restart under a running
 * workflow costs a delay, not an error.
 *
 * This module and the generated code under ./gen are the only code that
 * imports @grpc/grpc-js; the build bundles them into dist/shared/transport.js
 * so the installed package has no runtime dependencies.
 */
import {
	Channel,
	ChannelCredentials,
	Client,
	connectivityState,
	Metadata,
	type CallOptions,
	type ClientReadableStream,
	type ServiceError,
} from '@grpc/grpc-js';
import { createHash } from 'crypto';
import { sleep } from 'n8n-workflow';

import {
	CheckpointServiceClient,
	SaveCheckpointsRequest,
	type SaveCheckpointsResponse,
} from './gen/durable/v1/checkpoint';
import {
	ClaimRequest,
	CompleteRequest,
	IdempotencyServiceClient,
	ReleaseRequest,
	type ClaimResponse,
	type CompleteResponse,
	type ReleaseResponse,
} from './gen/durable/v1/idempotency';
import {
	CancelInstanceRequest,
	CompleteInstanceRequest,
	FailInstanceRequest,
	InstanceServiceClient,
	ListInstancesRequest,
	ScheduleWakeUpRequest,
	StartOrResumeRequest,
	WatchResumableRequest,
	type CancelInstanceResponse,
	type CompleteInstanceResponse,
	type FailInstanceResponse,
	type ListInstancesResponse,
	type ScheduleWakeUpResponse,
	type StartOrResumeResponse,
	type DeepPartial,
	type WatchResumableResponse,
} from './gen/durable/v1/instance';
import {
	AwaitEventRequest,
	EventServiceClient,
	RecoveryServiceClient,
	ResumeInstanceRequest,
	RetryInstanceRequest,
	SignalInstanceRequest,
	type AwaitEventResponse,
	type ResumeInstanceResponse,
	type RetryInstanceResponse,
	type SignalInstanceResponse,
} from './gen/durable/v1/events';
import {
	SyncVersionFromN8nRequest,
	VersionServiceClient,
	type SyncVersionFromN8nResponse,
} from './gen/durable/v1/version';

export { InstanceStatus, RunState } from './gen/durable/v1/common';
export type { Checkpoint, Event, Instance, RetryPolicy } from './gen/durable/v1/common';
export { AwaitOutcome, SignalOutcome } from './gen/durable/v1/events';
export type { AwaitEventResponse, SignalInstanceResponse } from './gen/durable/v1/events';
export { ClaimOutcome, KeyStatus } from './gen/durable/v1/idempotency';
export type { IdempotencyKey, ClaimItem, ClaimResult } from './gen/durable/v1/idempotency';
export { ResumeReason, StartOutcome } from './gen/durable/v1/instance';
export type {
	ResumableInstance,
	StartOrResumeResponse,
	WatchResumableResponse,
} from './gen/durable/v1/instance';
export { StateMode } from './gen/durable/v1/checkpoint';
export type { KeyCompletion, SaveCheckpointItem } from './gen/durable/v1/checkpoint';
export type { Version } from './gen/durable/v1/version';

/** What a node needs from the "Durable Sidecar API" credential. */
export interface SidecarConnection {
	host: string;
	port: number;
	tls: boolean;
	/** PEM CA bundle; empty means the system roots. */
	caCertificate: string;
	token: string;
	/** Deadline of each unary call, in seconds. */
	deadlineSeconds: number;
}

export const DEFAULT_DEADLINE_SECONDS = 30;

/** Reads the credential's fields with defaults; throws on a value no call could use. */
export function connectionFromCredentials(data: Record<string, unknown>): SidecarConnection {
	const host = String(data.host ?? '').trim();
	const port = Number(data.port ?? 0);
	const deadline = Number(data.deadlineSeconds ?? DEFAULT_DEADLINE_SECONDS);
	if (!host) {
		throw new Error('The Durable Sidecar API credential has no host');
	}
	if (!Number.isInteger(port) || port < 1 || port > 65535) {
		throw new Error(
			`The Durable Sidecar API credential's port must be 1 to 65535, got ${String(data.port)}`,
		);
	}
	targetOf({ host, port }); // a malformed address list fails here, with the credential named
	return {
		host,
		port,
		tls: data.tls === true,
		caCertificate: data.tls === true ? String(data.caCertificate ?? '').trim() : '',
		token: String(data.token ?? '').trim(),
		deadlineSeconds:
			Number.isFinite(deadline) && deadline > 0 ? deadline : DEFAULT_DEADLINE_SECONDS,
	};
}

/** 4 or 6 for an IPv4 or IPv6 literal, 0 otherwise (node:net is off limits in a community node). */
function ipFamily(host: string): 0 | 4 | 6 {
	if (/^(\d{1,3})(\.\d{1,3}){3}$/.test(host) && host.split('.').every((o) => Number(o) <= 255))
		return 4;
	// An IPv6 literal has at least two colons ("10.0.0.5:50051" is an IPv4 address and a port).
	if (host.split(':').length > 2 && /^[0-9a-fA-F:.]+(%[\w.-]+)?$/.test(host)) return 6;
	return 0;
}

/** One sidecar address of the credential's Host field. */
export interface SidecarAddress {
	host: string;
	port: number;
}

/**
 * The sidecar addresses of a Host field: one host name or IP address, or a
 * comma-separated list of IP addresses, each with an optional own port
 * ("10.0.0.5, 10.0.0.6:50052", "[fd00::5]:50051"); the Port field is the default.
 */
export function addressesOf(conn: Pick<SidecarConnection, 'host' | 'port'>): SidecarAddress[] {
	const entries = conn.host
		.split(',')
		.map((e) => e.trim())
		.filter((e) => e !== '');
	const addresses = entries.map((entry): SidecarAddress => {
		const bracketed = /^\[([^\]]+)\](?::(\d+))?$/.exec(entry);
		if (bracketed)
			return { host: bracketed[1], port: bracketed[2] ? Number(bracketed[2]) : conn.port };
		if (ipFamily(entry) === 6) return { host: entry, port: conn.port }; // a bare IPv6 literal has no port
		const withPort = /^([^:]+):(\d+)$/.exec(entry);
		if (withPort) return { host: withPort[1], port: Number(withPort[2]) };
		if (entry.includes(':')) {
			throw new Error(`The Durable Sidecar API credential's host "${entry}" is not an address`);
		}
		return { host: entry, port: conn.port };
	});
	for (const a of addresses) {
		if (!Number.isInteger(a.port) || a.port < 1 || a.port > 65535) {
			throw new Error(
				`The Durable Sidecar API credential's port must be 1 to 65535, got ${a.port} in "${conn.host}"`,
			);
		}
	}
	if (addresses.length > 1 && !addresses.every((a) => ipFamily(a.host) !== 0)) {
		throw new Error(
			"The Durable Sidecar API credential's host lists several sidecars: list their IP addresses " +
				'(e.g. "10.0.0.5, 10.0.0.6"), or give one DNS name that resolves to every sidecar',
		);
	}
	return addresses;
}

function hostPort(a: SidecarAddress): string {
	return `${a.host.includes(':') ? `[${a.host}]` : a.host}:${a.port}`;
}

/**
 * The target in gRPC's name syntax: host:port for one sidecar (IPv6 literals
 * bracketed); for several, grpc-js's static multi-address target
 * (ipv4:a:p,b:p or ipv6:[a]:p,[b]:p), which the channel balances round-robin.
 */
export function targetOf(conn: Pick<SidecarConnection, 'host' | 'port'>): string {
	const addresses = addressesOf(conn);
	if (addresses.length === 1) return hostPort(addresses[0]);
	const families = new Set(addresses.map((a) => ipFamily(a.host)));
	if (families.size > 1) {
		throw new Error(
			"The Durable Sidecar API credential's host mixes IPv4 and IPv6 addresses; list one family",
		);
	}
	return `${families.has(6) ? 'ipv6' : 'ipv4'}:${addresses.map(hostPort).join(',')}`;
}

/**
 * Several sidecars: round_robin spreads calls over every connected sidecar and
 * leaves out those that refuse connections or went away (a stopped or
 * restarting sidecar, whose GOAWAY closes its connection); a call that gets
 * UNAVAILABLE from one (its database down) is retried, and the retry goes to
 * the next. grpc-js has no client-side grpc.health.v1 checking (gRFC A17), so
 * the connection state is the health signal. One sidecar: grpc-js's default.
 */
function serviceConfigOf(conn: Pick<SidecarConnection, 'host' | 'port'>): Record<string, string> {
	if (addressesOf(conn).length === 1) return {};
	return { 'grpc.service_config': JSON.stringify({ loadBalancingConfig: [{ round_robin: {} }] }) };
}

/** grpc.health.v1.HealthCheckResponse.ServingStatus */
export enum ServingStatus {
	UNKNOWN = 0,
	SERVING = 1,
	NOT_SERVING = 2,
	SERVICE_UNKNOWN = 3,
}

/**
 * grpc.health.v1 is two one-field messages: encoded by hand rather than
 * generated, because its .proto is not part of our contract.
 */
function encodeHealthRequest(service: string): Buffer {
	const name = Buffer.from(service, 'utf8');
	if (name.length === 0) return Buffer.alloc(0);
	if (name.length > 127) throw new Error('health service name too long');
	return Buffer.concat([Buffer.from([0x0a, name.length]), name]);
}

function decodeHealthResponse(buf: Buffer): ServingStatus {
	// Field 1 (status), wire type 0 (varint); absent means UNKNOWN.
	for (let i = 0; i < buf.length - 1; i++) {
		if (buf[i] === 0x08) return buf[i + 1] as ServingStatus;
	}
	return ServingStatus.UNKNOWN;
}

/** gRPC status codes the retry loop looks at (wire values, as in errors.ts). */
const CANCELLED = 1;
const UNAVAILABLE = 14;
const DEADLINE_EXCEEDED = 4;
/** Backoff between retries of an UNAVAILABLE call: 100 ms doubling to 2 s, jittered. */
const RETRY_INITIAL_MS = 100;
const RETRY_MAX_MS = 2_000;

/**
 * The deadline of a call passed while the sidecar could not be reached (the
 * channel never got ready, or every attempt was UNAVAILABLE). Shaped like a
 * grpc-js ServiceError with code UNAVAILABLE, so the one mapping in errors.ts
 * turns it into the NodeApiError that fails the execution.
 */
export class SidecarUnreachableError extends Error {
	readonly code = UNAVAILABLE;
	readonly details: string;

	constructor(
		readonly target: string,
		readonly unreachableWithinSeconds: number,
	) {
		const text = `could not reach the durable sidecar at ${target} within ${unreachableWithinSeconds} s`;
		super(text);
		this.name = 'SidecarUnreachableError';
		this.details = text;
	}
}

function statusCodeOf(error: unknown): number | undefined {
	const code = (error as { code?: unknown } | null)?.code;
	return typeof code === 'number' ? code : undefined;
}

/** Equal jitter: half the backoff fixed, half random, so restarted clients do not retry in step. */
function jittered(backoffMs: number): number {
	return backoffMs / 2 + Math.random() * (backoffMs / 2);
}

type UnaryMethod<Req, Res> = (
	request: Req,
	metadata: Metadata,
	options: Partial<CallOptions>,
	callback: (error: ServiceError | null, response: Res) => void,
) => unknown;

/** One sidecar endpoint: the service clients share a single channel. */
export class SidecarClient {
	readonly instances: InstanceServiceClient;
	readonly checkpoints: CheckpointServiceClient;
	readonly idempotency: IdempotencyServiceClient;
	readonly versions: VersionServiceClient;
	readonly events: EventServiceClient;
	readonly recovery: RecoveryServiceClient;
	private readonly generic: Client;
	private readonly channel: Channel;
	/** When the channel last failed to connect (ms since the epoch; 0: never). */
	private lastConnectFailureAt = 0;

	constructor(readonly connection: SidecarConnection) {
		const target = targetOf(connection);
		const creds = connection.tls
			? ChannelCredentials.createSsl(
					connection.caCertificate ? Buffer.from(connection.caCertificate, 'utf8') : null,
				)
			: ChannelCredentials.createInsecure();
		this.channel = new Channel(target, creds, {
			// Checkpoint states may be large; the sidecar's own limit applies.
			'grpc.max_receive_message_length': 64 * 1024 * 1024,
			'grpc.max_send_message_length': 64 * 1024 * 1024,
			// Calls wait for the channel (waitForReady): after a sidecar restart the
			// channel must notice within a couple of seconds, not after 10.
			'grpc.initial_reconnect_backoff_ms': 100,
			'grpc.max_reconnect_backoff_ms': 2_000,
			...serviceConfigOf(connection),
		});
		const shared = { channelOverride: this.channel };
		this.instances = new InstanceServiceClient(target, creds, shared);
		this.checkpoints = new CheckpointServiceClient(target, creds, shared);
		this.idempotency = new IdempotencyServiceClient(target, creds, shared);
		this.versions = new VersionServiceClient(target, creds, shared);
		this.events = new EventServiceClient(target, creds, shared);
		this.recovery = new RecoveryServiceClient(target, creds, shared);
		this.generic = new Client(target, creds, shared);
		this.followConnectivity();
	}

	/** Bearer token metadata for an authenticated call. */
	metadata(): Metadata {
		const md = new Metadata();
		if (this.connection.token) md.set('authorization', `Bearer ${this.connection.token}`);
		return md;
	}

	/** Call options with the credential's deadline (or an explicit one, in seconds). */
	options(deadlineSeconds?: number): Partial<CallOptions> {
		const seconds = deadlineSeconds ?? this.connection.deadlineSeconds;
		return { deadline: new Date(Date.now() + seconds * 1000) };
	}

	/**
	 * One unary RPC within one overall deadline (the credential's, or an explicit
	 * one in seconds). The call waits for the channel to be ready instead of
	 * failing at once while the sidecar restarts, and an UNAVAILABLE or
	 * CANCELLED answer (a connection dropped mid-call, a sidecar shutting down
	 * with the call in flight) is retried with
	 * jittered exponential backoff until the deadline. Every RPC the nodes make
	 * is repeat-safe by contract, and the request is sent unchanged each time.
	 * When the deadline passes while the sidecar cannot be reached, the error is
	 * a SidecarUnreachableError naming host:port and the time waited.
	 */
	private unary<Req, Res>(
		service: Client,
		method: UnaryMethod<Req, Res>,
		request: Req,
		deadlineSeconds?: number,
	): Promise<Res> {
		const seconds = deadlineSeconds ?? this.connection.deadlineSeconds;
		const startedAt = Date.now();
		const deadline = startedAt + seconds * 1000;
		const failingAtStart =
			this.channel.getConnectivityState(false) === connectivityState.TRANSIENT_FAILURE;
		const unreachable = () => new SidecarUnreachableError(targetOf(this.connection), seconds);
		let backoffMs = RETRY_INITIAL_MS;
		let retried = false;
		return new Promise<Res>((resolve, reject) => {
			const attempt = () => {
				const metadata = this.metadata();
				metadata.setOptions({ waitForReady: true });
				method.call(service, request, metadata, { deadline }, (error, response) => {
					if (!error) {
						resolve(response);
						return;
					}
					const code = statusCodeOf(error);
					// This client never cancels a call, so CANCELLED comes from the server:
					// a sidecar stopping (SIGTERM) cancels the calls in flight. Retried like
					// UNAVAILABLE; the answer then comes from the sidecar that takes over.
					if (code === UNAVAILABLE || code === CANCELLED) {
						const waitMs = jittered(backoffMs);
						backoffMs = Math.min(backoffMs * 2, RETRY_MAX_MS);
						if (Date.now() + waitMs < deadline) {
							retried = true;
							void sleep(waitMs).then(attempt);
						} else if (this.channel.getConnectivityState(false) === connectivityState.READY) {
							// Reached, but it keeps answering UNAVAILABLE (e.g. its database is down).
							reject(error);
						} else {
							reject(unreachable());
						}
						return;
					}
					const neverReached =
						(retried || failingAtStart || this.lastConnectFailureAt >= startedAt) &&
						this.channel.getConnectivityState(false) !== connectivityState.READY;
					reject(code === DEADLINE_EXCEEDED && neverReached ? unreachable() : error);
				});
			};
			attempt();
		});
	}

	/**
	 * Follows the channel's state for its whole life and notes when it last
	 * failed to connect (TRANSIENT_FAILURE): a call that runs out of time after
	 * such a failure could not reach the sidecar, unlike one whose deadline was
	 * merely too short for a channel that was still connecting. No deadline, so
	 * no timer keeps the process alive; closing the channel ends the watch.
	 */
	private followConnectivity(): void {
		const state = this.channel.getConnectivityState(false);
		if (state === connectivityState.TRANSIENT_FAILURE) this.lastConnectFailureAt = Date.now();
		if (state === connectivityState.SHUTDOWN) return;
		try {
			this.channel.watchConnectivityState(state, Infinity, () => this.followConnectivity());
		} catch {
			// The channel was closed meanwhile.
		}
	}

	startOrResume(request: DeepPartial<StartOrResumeRequest>): Promise<StartOrResumeResponse> {
		return this.unary(
			this.instances,
			this.instances.startOrResume,
			StartOrResumeRequest.fromPartial(request),
		);
	}

	completeInstance(
		request: DeepPartial<CompleteInstanceRequest>,
	): Promise<CompleteInstanceResponse> {
		return this.unary(
			this.instances,
			this.instances.completeInstance,
			CompleteInstanceRequest.fromPartial(request),
		);
	}

	failInstance(request: DeepPartial<FailInstanceRequest>): Promise<FailInstanceResponse> {
		return this.unary(
			this.instances,
			this.instances.failInstance,
			FailInstanceRequest.fromPartial(request),
		);
	}

	cancelInstance(request: DeepPartial<CancelInstanceRequest>): Promise<CancelInstanceResponse> {
		return this.unary(
			this.instances,
			this.instances.cancelInstance,
			CancelInstanceRequest.fromPartial(request),
		);
	}

	awaitEvent(request: DeepPartial<AwaitEventRequest>): Promise<AwaitEventResponse> {
		return this.unary(this.events, this.events.awaitEvent, AwaitEventRequest.fromPartial(request));
	}

	signalInstance(request: DeepPartial<SignalInstanceRequest>): Promise<SignalInstanceResponse> {
		return this.unary(
			this.events,
			this.events.signalInstance,
			SignalInstanceRequest.fromPartial(request),
		);
	}

	retryInstance(request: DeepPartial<RetryInstanceRequest>): Promise<RetryInstanceResponse> {
		return this.unary(
			this.recovery,
			this.recovery.retryInstance,
			RetryInstanceRequest.fromPartial(request),
		);
	}

	resumeInstance(request: DeepPartial<ResumeInstanceRequest>): Promise<ResumeInstanceResponse> {
		return this.unary(
			this.recovery,
			this.recovery.resumeInstance,
			ResumeInstanceRequest.fromPartial(request),
		);
	}

	scheduleWakeUp(request: DeepPartial<ScheduleWakeUpRequest>): Promise<ScheduleWakeUpResponse> {
		return this.unary(
			this.instances,
			this.instances.scheduleWakeUp,
			ScheduleWakeUpRequest.fromPartial(request),
		);
	}

	listInstances(
		request: DeepPartial<ListInstancesRequest>,
		deadlineSeconds?: number,
	): Promise<ListInstancesResponse> {
		return this.unary(
			this.instances,
			this.instances.listInstances,
			ListInstancesRequest.fromPartial(request),
			deadlineSeconds,
		);
	}

	saveCheckpoints(request: DeepPartial<SaveCheckpointsRequest>): Promise<SaveCheckpointsResponse> {
		return this.unary(
			this.checkpoints,
			this.checkpoints.saveCheckpoints,
			SaveCheckpointsRequest.fromPartial(request),
		);
	}

	claim(request: DeepPartial<ClaimRequest>): Promise<ClaimResponse> {
		return this.unary(this.idempotency, this.idempotency.claim, ClaimRequest.fromPartial(request));
	}

	completeKey(request: DeepPartial<CompleteRequest>): Promise<CompleteResponse> {
		return this.unary(
			this.idempotency,
			this.idempotency.complete,
			CompleteRequest.fromPartial(request),
		);
	}

	releaseKey(request: DeepPartial<ReleaseRequest>): Promise<ReleaseResponse> {
		return this.unary(
			this.idempotency,
			this.idempotency.release,
			ReleaseRequest.fromPartial(request),
		);
	}

	syncVersionFromN8n(
		request: DeepPartial<SyncVersionFromN8nRequest>,
	): Promise<SyncVersionFromN8nResponse> {
		return this.unary(
			this.versions,
			this.versions.syncVersionFromN8N,
			SyncVersionFromN8nRequest.fromPartial(request),
		);
	}

	/**
	 * Opens the WatchResumable server stream. It has no deadline of its own: it
	 * lives until the caller cancels it; the Resume Trigger watches the
	 * sidecar's heartbeats instead and reconnects when they stop.
	 */
	watchResumable(
		request: DeepPartial<WatchResumableRequest>,
	): ClientReadableStream<WatchResumableResponse> {
		return this.instances.watchResumable(
			WatchResumableRequest.fromPartial(request),
			this.metadata(),
			{},
		);
	}

	/** grpc.health.v1.Health/Check without a token (the sidecar needs none for it). */
	healthCheck(service = '', deadlineSeconds?: number): Promise<ServingStatus> {
		return new Promise<ServingStatus>((resolve, reject) => {
			this.generic.makeUnaryRequest<string, ServingStatus>(
				'/grpc.health.v1.Health/Check',
				encodeHealthRequest,
				decodeHealthResponse,
				service,
				new Metadata(),
				this.options(deadlineSeconds),
				(error, response) => {
					if (error) reject(error);
					else resolve(response ?? ServingStatus.UNKNOWN);
				},
			);
		});
	}

	close(): void {
		this.instances.close();
		this.checkpoints.close();
		this.idempotency.close();
		this.versions.close();
		this.events.close();
		this.recovery.close();
		this.generic.close();
		this.channel.close();
	}
}

const clients = new Map<string, SidecarClient>();

function cacheKey(conn: SidecarConnection): string {
	// The token is part of the key so that editing a credential never reuses a
	// client built with the old one; hashed so it is not kept as plain text.
	return createHash('sha256')
		.update(
			JSON.stringify([
				conn.host,
				conn.port,
				conn.tls,
				conn.caCertificate,
				conn.token,
				conn.deadlineSeconds,
			]),
		)
		.digest('hex');
}

/** The process-wide client for a credential: built once, then reused. */
export function getSidecarClient(conn: SidecarConnection): SidecarClient {
	const key = cacheKey(conn);
	let client = clients.get(key);
	if (!client) {
		client = new SidecarClient(conn);
		clients.set(key, client);
	}
	return client;
}

/** Bumped by closeAllSidecarClients, so clients remembered per credential object are not reused after it. */
let generation = 0;
const byCredentialData = new WeakMap<object, { generation: number; client: SidecarClient }>();

/**
 * getSidecarClient(connectionFromCredentials(data)), remembered per
 * credential data object: the nodes reuse one decrypted credential object for
 * a few seconds (credential-cache.ts), and building the connection and hashing
 * the cache key on every node run was a tenth of a millisecond of n8n CPU per
 * durable node (profiled in n8n 2.41).
 */
export function sidecarClientFor(data: Record<string, unknown>): SidecarClient {
	const hit = byCredentialData.get(data);
	if (hit && hit.generation === generation) return hit.client;
	const client = getSidecarClient(connectionFromCredentials(data));
	byCredentialData.set(data, { generation, client });
	return client;
}

/** A throwaway client (credential tests), closed by the caller. */
export function newSidecarClient(conn: SidecarConnection): SidecarClient {
	return new SidecarClient(conn);
}

/** Closes every cached client (tests, and n8n shutting the process down). */
export function closeAllSidecarClients(): void {
	for (const client of clients.values()) client.close();
	clients.clear();
	generation++;
}

export type { ServiceError, ClientReadableStream };
