/**
 * One unary RPC within one overall deadline, waiting for the channel and
 * retrying UNAVAILABLE (and the CANCELLED of a stopping sidecar) with jittered
 * backoff inside it, so a sidecar restart under a running workflow costs a
 * delay, not an error; and the error of a deadline that passed while the
 * sidecar could not be reached. Each attempt goes on the connection's open
 * call stream when it can (call-stream.ts), else as a unary call of its own.
 */
import type { Client, ServiceError } from '@grpc/grpc-js';
import { sleep } from 'n8n-workflow';

import { StreamNotServedError, type CallStream } from './call-stream';
import type { SidecarChannel } from './channel';
import { SESSION_METADATA } from './session';

/** gRPC status codes the retry loop looks at (wire values, as in errors.ts). */
export const CANCELLED = 1;
export const UNAVAILABLE = 14;
const DEADLINE_EXCEEDED = 4;
/** Backoff between retries of an UNAVAILABLE call: 100 ms doubling to 2 s, jittered. */
export const RETRY_INITIAL_MS = 100;
export const RETRY_MAX_MS = 2_000;

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

export function statusCodeOf(error: unknown): number | undefined {
	const code = (error as { code?: unknown } | null)?.code;
	return typeof code === 'number' ? code : undefined;
}

/** Equal jitter: half the backoff fixed, half random, so restarted clients do not retry in step. */
export function jittered(backoffMs: number): number {
	return backoffMs / 2 + Math.random() * (backoffMs / 2);
}

/** A unary method of a generated service definition (e.g. IdempotencyServiceService.claim). */
export interface UnaryMethod<Req, Res> {
	readonly path: string;
	readonly requestSerialize: (value: Req) => Buffer;
	readonly responseDeserialize: (value: Buffer) => Res;
}

/** The request is encoded once, for the size check and every attempt. */
const asEncoded = (encoded: Buffer): Buffer => encoded;

/**
 * Calls `method` with `service` (a client on `channel`) within `seconds`, in
 * `session` (the durable-session metadata; '' for none): on `stream` when the
 * channel is connected and the stream carries the request, else unary. The
 * call waits for the channel to be ready instead of failing at once while the
 * sidecar restarts, and an UNAVAILABLE or CANCELLED answer (a connection
 * dropped mid-call, a sidecar shutting down with the call in flight) is
 * retried with jittered exponential backoff until the deadline. Every RPC the
 * nodes make is repeat-safe by contract, and the request is sent unchanged
 * each time. When the deadline passes while the sidecar cannot be reached,
 * the error is a SidecarUnreachableError naming host:port and the time waited.
 */
export function callUnary<Req, Res>(
	channel: SidecarChannel,
	service: Client,
	method: UnaryMethod<Req, Res>,
	request: Req,
	seconds: number,
	session = '',
	stream?: CallStream,
): Promise<Res> {
	const encoded = method.requestSerialize(request);
	const startedAt = Date.now();
	const deadline = startedAt + seconds * 1000;
	const failingAtStart = channel.isFailing();
	const unreachable = () => new SidecarUnreachableError(channel.target, seconds);
	let backoffMs = RETRY_INITIAL_MS;
	let retried = false;
	return new Promise<Res>((resolve, reject) => {
		// A retry runs from a timer: whatever it throws (the client closed while the call waited to retry, as
		// when n8n shuts down) must end this call, never escape as an unhandled rejection of the timer.
		const attempt = () => {
			try {
				send();
			} catch (error) {
				reject(error);
			}
		};
		const send = () => {
			if (stream?.carries(encoded.length) && channel.isReady()) {
				stream.send(method.path, encoded, session, deadline).then(
					(response) => resolve(method.responseDeserialize(response)),
					(error: unknown) => {
						if (error instanceof StreamNotServedError) attempt();
						else failed(error);
					},
				);
				return;
			}
			const metadata = channel.metadata();
			if (session) metadata.set(SESSION_METADATA, session);
			metadata.setOptions({ waitForReady: true });
			service.makeUnaryRequest(
				method.path,
				asEncoded,
				method.responseDeserialize,
				encoded,
				metadata,
				{ deadline },
				(error: ServiceError | null, response?: Res) => {
					if (error) failed(error);
					else resolve(response as Res);
				},
			);
		};
		const failed = (error: unknown) => {
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
				} else if (channel.isReady()) {
					// Reached, but it keeps answering UNAVAILABLE (e.g. its database is down).
					reject(error);
				} else {
					reject(unreachable());
				}
				return;
			}
			const neverReached =
				(retried || failingAtStart || channel.failedToConnectSince(startedAt)) &&
				!channel.isReady();
			reject(code === DEADLINE_EXCEEDED && neverReached ? unreachable() : error);
		};
		attempt();
	});
}
