/**
 * The one open CallService/Call stream of a sidecar connection: the nodes'
 * unary calls travel on it as messages, matched to their answers by id,
 * instead of costing an HTTP/2 stream, headers and a call object each
 * (proto/durable/v1/call.proto). The sidecar handles each message with the
 * unary method's own handler, so answers and errors are the unary call's.
 *
 * callUnary (unary.ts) decides per attempt: the stream when the channel is
 * connected, the sidecar serves it and the request is small; a unary call
 * otherwise (while the sidecar restarts, calls wait for it as unary calls do,
 * so no call sits in a stream that has not started).
 */
import type { ClientDuplexStream, Metadata } from '@grpc/grpc-js';
import { sleep } from 'n8n-workflow';

import type { CallRequest, CallResponse, CallServiceClient } from '../gen/durable/v1/call';

const CANCELLED = 1;
const DEADLINE_EXCEEDED = 4;
const UNIMPLEMENTED = 12;
const UNAVAILABLE = 14;

/**
 * A request larger than this goes as a unary call of its own, so that a large
 * checkpoint does not hold the stream's other calls behind it.
 */
export const STREAM_MAX_REQUEST_BYTES = 256 * 1024;

/** An answer with an error code, shaped like the grpc-js ServiceError a unary call rejects with. */
export class CarriedCallError extends Error {
	constructor(
		readonly code: number,
		readonly details: string,
	) {
		super(`${code} ${details}`);
		this.name = 'CarriedCallError';
	}
}

/** The sidecar does not serve the stream (it predates CallService): the call is sent again as a unary call. */
export class StreamNotServedError extends Error {
	constructor() {
		super('the sidecar does not serve durable.v1.CallService');
		this.name = 'StreamNotServedError';
	}
}

/** How often the calls waiting are checked against their deadlines (while any wait). */
const DEADLINE_CHECK_MS = 50;

interface Pending {
	resolve: (response: Buffer) => void;
	reject: (error: Error) => void;
	/** ms since the epoch */
	deadline: number;
}

export class CallStream {
	private stream: ClientDuplexStream<CallRequest, CallResponse> | undefined;
	private readonly pending = new Map<number, Pending>();
	private nextId = 1;
	/** The sidecar answered the stream UNIMPLEMENTED: every call goes unary from then on. */
	private notServed = false;
	/** Whether the deadline check runs (it stops when no call waits). */
	private checking = false;

	constructor(
		private readonly client: CallServiceClient,
		private readonly metadata: () => Metadata,
	) {}

	/** Whether a request of `bytes` bytes goes on the stream (the channel must also be connected). */
	carries(bytes: number): boolean {
		return !this.notServed && bytes <= STREAM_MAX_REQUEST_BYTES;
	}

	/**
	 * Sends one call (its request encoded) and resolves with its encoded
	 * response. Rejects with a CarriedCallError for an error answer, with
	 * DEADLINE_EXCEEDED when `deadline` (ms since the epoch) passes first, with
	 * UNAVAILABLE when the stream closes before the answer (the call may or may
	 * not have run: callUnary sends it again, as every call is repeat-safe), and
	 * with StreamNotServedError when the sidecar has no CallService.
	 */
	send(method: string, request: Buffer, session: string, deadline: number): Promise<Buffer> {
		return new Promise<Buffer>((resolve, reject) => {
			const remaining = deadline - Date.now();
			if (remaining <= 0) {
				reject(new CarriedCallError(DEADLINE_EXCEEDED, 'Deadline exceeded'));
				return;
			}
			const id = this.nextId++;
			this.pending.set(id, { resolve, reject, deadline });
			this.open().write({ id, method, request, session, timeoutMs: Math.ceil(remaining) });
			this.checkDeadlines();
		});
	}

	/**
	 * Fails the calls whose deadline passed with no answer (the sidecar also
	 * stops them at their timeout_ms; this covers an answer that never comes).
	 * One timer for all calls, running only while some wait.
	 */
	private checkDeadlines(): void {
		if (this.checking) return;
		this.checking = true;
		const loop = async () => {
			while (this.pending.size > 0) {
				await sleep(DEADLINE_CHECK_MS);
				const now = Date.now();
				for (const [id, waiting] of this.pending) {
					if (waiting.deadline > now) continue;
					this.pending.delete(id);
					waiting.reject(new CarriedCallError(DEADLINE_EXCEEDED, 'Deadline exceeded'));
				}
			}
			this.checking = false;
		};
		void loop();
	}

	private open(): ClientDuplexStream<CallRequest, CallResponse> {
		if (this.stream) return this.stream;
		const stream = this.client.call(this.metadata());
		stream.on('data', (answer: CallResponse) => {
			const waiting = this.pending.get(answer.id);
			if (!waiting) return; // its deadline passed: already rejected
			this.pending.delete(answer.id);
			if (answer.code === 0) waiting.resolve(Buffer.from(answer.response));
			else waiting.reject(new CarriedCallError(answer.code, answer.message));
		});
		stream.on('error', (error: { code?: number; details?: string }) =>
			this.closed(stream, error.code ?? UNAVAILABLE, error.details ?? String(error)),
		);
		stream.on('end', () => this.closed(stream, UNAVAILABLE, 'the sidecar ended the stream'));
		this.stream = stream;
		return stream;
	}

	/** The stream closed: its calls without an answer fail, and the next call opens a new stream. */
	private closed(
		stream: ClientDuplexStream<CallRequest, CallResponse>,
		code: number,
		details: string,
	): void {
		// Every call waiting was written on the current stream (a new one opens only
		// after this); a later event of a stream already closed changes nothing.
		if (this.stream !== stream) return;
		this.stream = undefined;
		if (code === UNIMPLEMENTED) this.notServed = true;
		const error = () =>
			code === UNIMPLEMENTED
				? new StreamNotServedError()
				: new CarriedCallError(
						code === CANCELLED ? CANCELLED : UNAVAILABLE,
						`the call stream to the sidecar closed: ${details}`,
					);
		for (const [id, waiting] of this.pending) {
			this.pending.delete(id);
			waiting.reject(error());
		}
	}

	/** Ends the stream (the client is closing); calls still waiting fail with CANCELLED. */
	close(): void {
		const stream = this.stream;
		if (!stream) return;
		this.closed(stream, CANCELLED, 'the client closed');
		stream.cancel();
	}
}
