/** The Resume Trigger's watcher: the stream of resumable instances, reconnected with backoff, and the item each one emits. */
import {
	NodeOperationError,
	sleep,
	type IDataObject,
	type INodeExecutionData,
	type ITriggerFunctions,
} from 'n8n-workflow';
import { randomUUID } from 'crypto';

import { GrpcStatus, hintFor, isGrpcFailure } from '../../shared/errors';
import { CREDENTIAL_NAME, DURABLE_FIELD, eventJson } from '../../shared/node-helpers';
import {
	connectionFromCredentials,
	getSidecarClient,
	ResumeReason,
	targetOf,
	type ResumableInstance,
	type SidecarClient,
} from '../../shared/transport';

/** Reconnect backoff after the stream broke: doubles from 1 s up to 30 s, with jitter. */
const BACKOFF_INITIAL_MS = 1000;
const BACKOFF_MAX_MS = 30_000;

/** Codes no reconnect can fix: the workflow is reported failed instead of retried in silence. */
const FATAL = new Set<number>([
	GrpcStatus.UNAUTHENTICATED,
	GrpcStatus.PERMISSION_DENIED,
	GrpcStatus.INVALID_ARGUMENT,
	GrpcStatus.UNIMPLEMENTED,
]);

export interface WatchSettings {
	workflowId: string;
	claimant: string;
	pollIntervalMs: number;
	claimLeaseSeconds: number;
	maxInstances: number;
	/** No message (not even a heartbeat) for this long means the stream is dead. */
	silenceMs: number;
}

/** durable.reason on the emitted item, per hand-out reason. */
const REASONS: Record<number, string> = {
	[ResumeReason.RESUME_REASON_STALLED]: 'stalled',
	[ResumeReason.RESUME_REASON_WAKE_UP]: 'wakeUp',
	[ResumeReason.RESUME_REASON_EVENT]: 'event',
	[ResumeReason.RESUME_REASON_TIMEOUT]: 'timeout',
	[ResumeReason.RESUME_REASON_RETRY]: 'retry',
	[ResumeReason.RESUME_REASON_REDRIVE]: 'redrive',
};

/** The item emitted for one claimed instance; the Resume Point reads durable.claimToken from it. */
export function resumableItem(
	resumable: ResumableInstance,
	settings: WatchSettings,
): INodeExecutionData {
	const inst = resumable.instance;
	const durable: IDataObject = {
		source: 'resumeTrigger',
		claimToken: resumable.claimToken,
		workflowId: inst?.workflowId ?? settings.workflowId,
		instanceKey: inst?.instanceKey ?? '',
		reason: REASONS[resumable.reason] ?? 'stalled',
		lastStep: inst?.lastStep ?? '',
		lastSequence: inst?.lastSequence ?? 0,
		resumeCount: inst?.resumeCount ?? 0,
		boundVersion: inst?.boundVersion ?? 0,
		versionLabel: inst?.versionLabel ?? '',
		wakeAt: inst?.wakeAt ? inst.wakeAt.toISOString() : null,
		claimLeaseSeconds: settings.claimLeaseSeconds,
		claimant: settings.claimant,
		attempt: inst?.attempt ?? 0,
	};
	// The awaited event (reason "event"); the Resume Point reads it again from the sidecar.
	if (resumable.event) durable.event = eventJson(resumable.event);
	return { json: { [DURABLE_FIELD]: durable } };
}

/**
 * Holds WatchResumable open and hands every claimed instance to `onInstance`,
 * reconnecting with backoff until stopped. One object per activation.
 */
export class ResumableWatcher {
	private stopped = false;
	private wake: () => void = () => {};
	private readonly stoppedSignal: Promise<void>;
	private current: ReturnType<SidecarClient['watchResumable']> | undefined;
	private loop: Promise<void> | undefined;
	/** Number of streams opened (for tests and logs). */
	connections = 0;

	constructor(
		private readonly client: SidecarClient,
		private readonly settings: WatchSettings,
		private readonly onInstance: (resumable: ResumableInstance) => void,
		private readonly onFatal: (error: Error) => void,
		private readonly log: (
			level: 'debug' | 'info' | 'warn',
			message: string,
			meta?: IDataObject,
		) => void,
	) {
		this.stoppedSignal = new Promise<void>((resolve) => {
			this.wake = resolve;
		});
	}

	start(): void {
		this.loop ??= this.run();
	}

	/** Cancels the stream and waits for the loop to end. */
	async stop(): Promise<void> {
		this.stopped = true;
		this.current?.cancel();
		this.wake();
		await this.loop;
	}

	private async pause(ms: number): Promise<void> {
		await Promise.race([sleep(ms), this.stoppedSignal]);
	}

	private async run(): Promise<void> {
		let backoff = BACKOFF_INITIAL_MS;
		while (!this.stopped) {
			const { received, error } = await this.watchOnce();
			if (this.stopped) break;
			if (received) backoff = BACKOFF_INITIAL_MS;
			if (error && isGrpcFailure(error) && FATAL.has(error.code)) {
				const target = targetOf(this.client.connection);
				this.onFatal(
					new Error(
						`Resume Trigger: the sidecar at ${target} refused the watch: ${error.details}. ${hintFor(error.code, error.details, target, this.client.connection.deadlineSeconds)}`,
					),
				);
				return;
			}
			const delay = Math.round(backoff * (0.5 + Math.random() / 2));
			this.log('warn', `Resume Trigger: stream to the sidecar ended; reconnecting in ${delay} ms`, {
				error: error
					? isGrpcFailure(error)
						? `${GrpcStatus[error.code] ?? error.code}: ${error.details}`
						: error.message
					: 'ended',
			});
			await this.pause(delay);
			backoff = Math.min(backoff * 2, BACKOFF_MAX_MS);
		}
	}

	/** One stream's life: resolves when it ends, fails or falls silent. */
	private async watchOnce(): Promise<{ received: boolean; error?: Error }> {
		// The claims are made in this process's session: they end with it (an unreachable sidecar
		// fails the stream below, as before).
		await this.client.session.choose('').catch(() => undefined);
		return await new Promise((resolve) => {
			let received = false;
			let done = false;
			let lastSeen = Date.now();
			const finish = (error?: Error) => {
				if (done) return;
				done = true;
				this.current = undefined;
				resolve({ received, error });
			};
			const call = this.client.watchResumable({
				workflowIds: [this.settings.workflowId],
				claimant: this.settings.claimant,
				maxInstances: this.settings.maxInstances,
				leaseSeconds: this.settings.claimLeaseSeconds,
				pollIntervalMs: this.settings.pollIntervalMs,
			});
			this.current = call;
			this.connections++;
			call.on('data', (message: { instances: ResumableInstance[] }) => {
				lastSeen = Date.now();
				if (!received) this.log('debug', 'Resume Trigger: watching the sidecar');
				received = true;
				for (const resumable of message.instances) this.onInstance(resumable);
			});
			call.on('error', (error: Error) => finish(error));
			call.on('end', () => finish());
			// Heartbeats arrive every poll interval; silence means a dead connection.
			void (async () => {
				while (!done && !this.stopped) {
					await this.pause(Math.min(1000, this.settings.silenceMs));
					if (!done && Date.now() - lastSeen > this.settings.silenceMs) {
						this.log('warn', 'Resume Trigger: no heartbeat from the sidecar; reconnecting');
						call.cancel();
					}
				}
			})();
		});
	}
}

/** The trigger's client, from its credential; a broken credential says so. */
export async function triggerClient(ctx: ITriggerFunctions): Promise<SidecarClient> {
	try {
		return getSidecarClient(connectionFromCredentials(await ctx.getCredentials(CREDENTIAL_NAME)));
	} catch (error) {
		throw new NodeOperationError(ctx.getNode(), error as Error, {
			description: 'Fix the Durable Sidecar API credential.',
		});
	}
}

/** What the watcher of this trigger watches for, and how often. */
export function watchSettingsOf(ctx: ITriggerFunctions, workflowId: string): WatchSettings {
	const pollSeconds = Number(ctx.getNodeParameter('pollIntervalSeconds', 5));
	const pollIntervalMs = Math.min(600_000, Math.max(100, Math.round(pollSeconds * 1000)));
	return {
		workflowId,
		claimant: `n8n ${ctx.getInstanceId()} ${randomUUID().slice(0, 8)}`,
		pollIntervalMs,
		claimLeaseSeconds: Number(ctx.getNodeParameter('options.claimLeaseSeconds', 60)),
		maxInstances: Number(ctx.getNodeParameter('options.maxInstances', 10)),
		silenceMs: Math.max(15_000, 3 * pollIntervalMs),
	};
}
