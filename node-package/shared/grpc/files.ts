/**
 * FileService's two streams (proto/durable/v1/files.proto): a file goes up in
 * chunks of at most 1 MiB, with backpressure, and comes back as a Readable of
 * chunks, so neither side holds more than a chunk or two of it. An upload that
 * meets a sidecar restart (UNAVAILABLE, or the CANCELLED of a stopping
 * sidecar) starts over from its first byte with jittered backoff, within its
 * deadline: the sidecar stored nothing of the broken one.
 */
import type { Metadata, ServiceError } from '@grpc/grpc-js';
import { sleep } from 'n8n-workflow';

import {
	DownloadFileRequest,
	type DownloadFileResponse,
	type FileServiceClient,
	UploadFileRequest,
	type UploadFileResponse,
} from '../gen/durable/v1/files';
import {
	CANCELLED,
	jittered,
	RETRY_INITIAL_MS,
	RETRY_MAX_MS,
	statusCodeOf,
	UNAVAILABLE,
} from './unary';

/** The largest chunk the sidecar takes, and the size it stores them in. */
export const CHUNK_BYTES = 1024 * 1024;

/** A file's content, readable from its first byte as often as an upload needs to start over. */
export type ContentSource = () => Promise<
	AsyncIterable<Buffer | Uint8Array> | Iterable<Buffer | Uint8Array>
>;

/** Seconds an upload or download of `size` bytes may take: the credential's deadline plus 1 s per MiB. */
export function transferSeconds(deadlineSeconds: number, size: number): number {
	return deadlineSeconds + Math.ceil(size / CHUNK_BYTES);
}

async function uploadOnce(
	client: FileServiceClient,
	metadata: Metadata,
	deadline: Date,
	sha256: string,
	sizeBytes: number,
	source: ContentSource,
): Promise<UploadFileResponse> {
	let call: ReturnType<FileServiceClient['uploadFile']> | undefined;
	const answer = new Promise<UploadFileResponse>((resolve, reject) => {
		call = client.uploadFile(metadata, { deadline }, (error: ServiceError | null, reply) => {
			if (error) reject(error);
			else resolve(reply);
		});
	});
	const stream = call!;
	let ended = false;
	const settled = answer.then(
		() => (ended = true),
		() => (ended = true),
	);
	const write = async (message: UploadFileRequest) => {
		if (stream.write(message)) return;
		await Promise.race([new Promise((resolve) => stream.once('drain', resolve)), settled]);
	};
	const pump = async () => {
		await write(
			UploadFileRequest.fromPartial({ part: { $case: 'header', value: { sha256, sizeBytes } } }),
		);
		for await (const piece of await source()) {
			const buffer = Buffer.isBuffer(piece) ? piece : Buffer.from(piece);
			for (let at = 0; at < buffer.length && !ended; at += CHUNK_BYTES) {
				await write({ part: { $case: 'chunk', value: buffer.subarray(at, at + CHUNK_BYTES) } });
			}
			if (ended) break; // answered early: the sidecar refused the content
		}
		stream.end();
	};
	await pump().catch(async (error: unknown) => {
		// Reading the content failed: the sidecar stores nothing of a cancelled upload.
		stream.cancel();
		return await Promise.reject(error);
	});
	return await answer;
}

/** Uploads one content (FileService.UploadFile), starting over while the sidecar restarts. */
export async function uploadFile(
	client: FileServiceClient,
	metadata: () => Metadata,
	seconds: number,
	sha256: string,
	sizeBytes: number,
	source: ContentSource,
): Promise<UploadFileResponse> {
	const deadline = Date.now() + seconds * 1000;
	let backoffMs = RETRY_INITIAL_MS;
	for (;;) {
		const sent = metadata();
		sent.setOptions({ waitForReady: true });
		const outcome = await uploadOnce(
			client,
			sent,
			new Date(deadline),
			sha256,
			sizeBytes,
			source,
		).then(
			(reply) => ({ reply, error: undefined }),
			(error: unknown) => ({ reply: undefined, error }),
		);
		if (outcome.reply) return outcome.reply;
		const code = statusCodeOf(outcome.error);
		const waitMs = jittered(backoffMs);
		if ((code !== UNAVAILABLE && code !== CANCELLED) || Date.now() + waitMs >= deadline) {
			return await Promise.reject(outcome.error);
		}
		backoffMs = Math.min(backoffMs * 2, RETRY_MAX_MS);
		await sleep(waitMs);
	}
}

/**
 * One content's bytes (FileService.DownloadFile) as a readable stream of
 * Buffers, read as it is consumed; a failed download errors the stream.
 */
export function downloadFile(
	client: FileServiceClient,
	metadata: Metadata,
	seconds: number,
	sha256: string,
): ReturnType<ReturnType<FileServiceClient['downloadFile']>['map']> {
	metadata.setOptions({ waitForReady: true });
	const call = client.downloadFile(DownloadFileRequest.fromPartial({ sha256 }), metadata, {
		deadline: new Date(Date.now() + seconds * 1000),
	});
	return call.map((reply: DownloadFileResponse) => reply.chunk);
}
