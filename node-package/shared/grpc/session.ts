/**
 * The session of this n8n process with a sidecar: a lease lives as long as the
 * process that holds it.
 *
 * The first call opens the session (OpenSession); a heartbeat then runs every
 * interval the sidecar asks for (one second by default) for the life of the
 * process. Every call carries a session id in the `durable-session` metadata:
 * an execution's calls carry the session that was current at its first call
 * (so when this process was declared dead, e.g. frozen by SIGSTOP for longer
 * than the grace, the old execution's calls are refused and it stops: fencing),
 * while new work binds to the session opened after it.
 *
 * A sidecar without sessions (UNIMPLEMENTED) is used as before: no metadata,
 * leases by time alone.
 */
import { sleep } from 'n8n-workflow';

import type {
	HeartbeatResponse,
	OpenSessionRequest,
	OpenSessionResponse,
} from '../gen/durable/v1/session';

/** The metadata (and HTTP header) a call of a session carries. */
export const SESSION_METADATA = 'durable-session';

const UNIMPLEMENTED = 12;
const NOT_FOUND = 5;
const FAILED_PRECONDITION = 9;
/** Executions remembered with their session; the oldest are forgotten first. */
const MAX_BOUND = 20_000;
/** Released owners sent with one heartbeat at most (the sidecar's batch limit is larger). */
const MAX_RELEASED = 500;

/** What the keeper needs of the sidecar (the client's own unary calls, without a session). */
export interface SessionRpc {
	open(request: OpenSessionRequest): Promise<OpenSessionResponse>;
	beat(
		sessionId: string,
		releasedOwners: string[],
		runningOwners: string[],
	): Promise<HeartbeatResponse>;
	/**
	 * Holds the WatchSession stream open: `onEnded` when the sidecar says the
	 * session ended, `onClosed` when the stream ends for any reason.
	 */
	watch(sessionId: string, onEnded: () => void, onClosed: () => void): { cancel(): void };
}

/** How the process reads an execution as n8n stored it (IExecuteFunctions.getExecutionDataById). */
export type ExecutionLookup = (executionId: string) => Promise<unknown>;

/** An execution is looked at once it made no call for this long, then again at most this often. */
const IDLE_MS = 5_000;
const RECHECK_MS = 10_000;
/** Executions looked at per heartbeat at most. */
const CHECKS_PER_BEAT = 20;

/**
 * Whether n8n's stored data of an execution says it ended: gone (not kept,
 * or pruned, once it was seen stored), failed (resultData.error, other than
 * n8n's crash marker), or ran to its end (nothing left on
 * its stack). A running execution's stored data is its start (n8n saves the
 * run at its end) and one waiting in a Wait node has waitTill: neither ended.
 */
export function executionEnded(data: unknown, storedBefore = true): boolean {
	// Gone: ended and not kept, or pruned; but only once it was seen stored, so an execution n8n
	// has not written yet is never taken for an ended one.
	if (data === undefined || data === null) return storedBefore;
	const run = data as {
		waitTill?: unknown;
		resultData?: { error?: unknown; runData?: Record<string, unknown> };
		executionData?: { nodeExecutionStack?: unknown[] };
	};
	const error = run.resultData?.error as { message?: unknown } | undefined;
	// n8n's crash recovery (any process starting up) marks executions it finds unfinished with
	// "Workflow did not finish, possible out-of-memory issue", also ones a live worker still runs:
	// a crash of the process that runs an execution is what its session tells, not this marker.
	if (error) return !String(error.message ?? '').startsWith('Workflow did not finish');
	if (run.waitTill) return false;
	const ran = Object.keys(run.resultData?.runData ?? {}).length > 0;
	const stack = run.executionData?.nodeExecutionStack;
	return ran && Array.isArray(stack) && stack.length === 0;
}

/** n8n stored the execution and it shows neither an end nor an error: it runs (or waits in a Wait node). */
function isRunning(data: unknown): boolean {
	if (data === undefined || data === null || executionEnded(data)) return false;
	return !(data as { resultData?: { error?: unknown } }).resultData?.error;
}

/** A session id for one call; `fresh`: bound by this very call, so a refusal may be retried in a new session. */
export interface SessionChoice {
	id: string;
	fresh: boolean;
}

function codeOf(error: unknown): number | undefined {
	const code = (error as { code?: unknown } | null)?.code;
	return typeof code === 'number' ? code : undefined;
}

/** The sidecar refused a call because its session ended or is unknown (services/sessions.py). */
export function isSessionRefusal(error: unknown): boolean {
	const details = String((error as { details?: unknown } | null)?.details ?? '');
	return codeOf(error) === FAILED_PRECONDITION && /^session /.test(details);
}

export class SessionKeeper {
	private current = '';
	private opening: Promise<string> | undefined;
	private unsupported = false;
	private stopped = false;
	private beating = false;
	private intervalMs = 1_000;
	private readonly bound = new Map<string, string>();
	/** Owners whose executions failed here: their leases are released with the next heartbeat. */
	private readonly released = new Set<string>();
	/** Owners whose executions n8n says still run (a long call): their leases are renewed with the next heartbeat. */
	private readonly running = new Set<string>();
	/** When each bound owner last made a call, and when its execution was last looked at. */
	private readonly seen = new Map<string, { call: number; checked: number; stored: boolean }>();
	private lookup: ExecutionLookup | undefined;
	private checking = false;
	private watching: { id: string; cancel(): void } | undefined;

	constructor(
		private readonly rpc: SessionRpc,
		private readonly identity: OpenSessionRequest,
	) {}

	/** The session id the current session has now ('' before the first call, or without sessions). */
	get id(): string {
		return this.current;
	}

	/** The session a call of `owner` (an execution id, key holder; '' for none) carries. */
	async choose(owner: string): Promise<SessionChoice> {
		if (this.unsupported || this.stopped) return { id: '', fresh: false };
		if (owner) {
			const before = this.seen.get(owner);
			this.seen.set(owner, { call: Date.now(), checked: 0, stored: before?.stored ?? false });
		}
		const known = owner ? this.bound.get(owner) : undefined;
		if (known !== undefined) return { id: known, fresh: false };
		const id = await this.ensure();
		if (owner && id) this.bind(owner, id);
		return { id, fresh: true };
	}

	/** After a refusal of a fresh choice: a new session for `owner` (the old one ended meanwhile). */
	async renew(owner: string, ended: string): Promise<string> {
		if (this.current === ended) this.current = '';
		const id = await this.ensure();
		if (owner && id) this.bind(owner, id);
		return id;
	}

	/**
	 * The execution of `owner` failed and makes no further call: its leases
	 * are released with the next heartbeat, so the Resume Trigger resumes its
	 * instance at once rather than at the lease's ceiling.
	 */
	release(owner: string): void {
		if (!owner || this.unsupported || this.stopped) return;
		this.bound.delete(owner);
		this.seen.delete(owner);
		if (this.released.size < MAX_RELEASED) this.released.add(owner);
	}

	/**
	 * How to read an execution's stored data (a node run's
	 * getExecutionDataById). With it the keeper looks at each execution that
	 * made no call for a while: one that ended in n8n (it failed in any node,
	 * or finished without completing its instance) has its leases released,
	 * so its instance resumes in seconds; one still running (a long call) has
	 * its instance's lease renewed for its length, however long it takes.
	 */
	observe(lookup: ExecutionLookup): void {
		this.lookup = lookup;
	}

	/** Looks at the executions idle for a while (in the background of the heartbeat). */
	private async checkIdle(): Promise<void> {
		const lookup = this.lookup;
		if (!lookup || this.checking) return;
		this.checking = true;
		try {
			const now = Date.now();
			const due = [...this.seen.entries()]
				.filter(([, s]) => now - s.call >= IDLE_MS && now - s.checked >= RECHECK_MS)
				.slice(0, CHECKS_PER_BEAT);
			for (const [owner, s] of due) {
				s.checked = now;
				const data = await lookup(owner).catch(() => false);
				if (data === false) continue; // n8n could not tell (its database): look again later
				const ended = executionEnded(data, s.stored);
				if (data !== undefined && data !== null) s.stored = true;
				if (this.seen.get(owner) !== s) continue;
				if (ended) this.release(owner);
				else if (isRunning(data) && this.running.size < MAX_RELEASED) this.running.add(owner);
			}
		} finally {
			this.checking = false;
		}
	}

	/** Stops the heartbeat (the process shuts its clients down); the sidecar ends the session after its grace. */
	stop(): void {
		this.stopped = true;
		this.watching?.cancel();
		this.watching = undefined;
	}

	/**
	 * Keeps the session's WatchSession stream open while it is current. The
	 * sidecar learns of this process's exit (its connection closes) and ends
	 * the session two heartbeats later instead of after the whole grace; and
	 * this process learns at once that its session ended.
	 */
	private watch(id: string): void {
		if (this.stopped || this.watching?.id === id || this.current !== id) return;
		this.watching?.cancel();
		const stream = this.rpc.watch(
			id,
			() => {
				if (this.current === id) this.current = '';
			},
			() => {
				if (this.watching?.id !== id) return;
				this.watching = undefined;
				// Watched again once the session is current (a restarted sidecar: at the next beat).
				void sleep(this.intervalMs).then(() => this.watch(this.current));
			},
		);
		this.watching = { id, cancel: () => stream.cancel() };
	}

	private bind(owner: string, id: string): void {
		this.bound.delete(owner);
		this.bound.set(owner, id);
		if (this.bound.size > MAX_BOUND) {
			const oldest = this.bound.keys().next();
			if (!oldest.done) {
				this.bound.delete(oldest.value);
				this.seen.delete(oldest.value);
			}
		}
	}

	private ensure(): Promise<string> {
		if (this.current) return Promise.resolve(this.current);
		this.opening ??= this.open().finally(() => {
			this.opening = undefined;
		});
		return this.opening;
	}

	private async open(): Promise<string> {
		// A sidecar from before sessions answers UNIMPLEMENTED: leases by time alone, as before.
		const opened = await this.rpc
			.open(this.identity)
			.catch(async (error: unknown) =>
				codeOf(error) === UNIMPLEMENTED ? undefined : await Promise.reject(error),
			);
		if (opened === undefined) {
			this.unsupported = true;
			return '';
		}
		this.current = opened.session?.sessionId ?? '';
		this.intervalMs = Math.max(100, opened.heartbeatIntervalMs || 1_000);
		this.watch(this.current);
		if (!this.beating) {
			this.beating = true;
			void this.heartbeat();
		}
		return this.current;
	}

	/** One heartbeat per interval for the life of the process; an ended session is replaced by a new one. */
	private async heartbeat(): Promise<void> {
		while (!this.stopped) {
			await sleep(this.intervalMs);
			const id = this.current;
			if (this.stopped || !id) continue;
			const released = [...this.released];
			const running = [...this.running];
			try {
				const answer = await this.rpc.beat(id, released, running);
				for (const owner of released) this.released.delete(owner);
				for (const owner of running) this.running.delete(owner);
				if (answer.ended && this.current === id) this.current = '';
			} catch (error) {
				// NOT_FOUND: the sidecar's database does not know it (restored, or another database).
				if (codeOf(error) === NOT_FOUND && this.current === id) this.current = '';
				// Anything else (the sidecar restarting): the next beat tries again, within the grace.
			}
			void this.checkIdle();
			if (!this.current && !this.stopped) {
				try {
					await this.ensure();
				} catch {
					// Opened again by the next call or beat.
				}
			}
		}
	}
}
