/**
 * Files (n8n binary data) kept with the checkpoints: what a Save sends and what
 * a resume or a Done Before gets back (docs/files.md).
 *
 * A Save hashes each binary property of its items (streamed from n8n's binary
 * data store, never read whole when n8n keeps it on disk), asks the sidecar
 * once which contents it lacks, uploads those in 1 MiB chunks, and names the
 * files in the checkpoint. A resumed instance, or a Claim answered Done Before,
 * gets its files back as n8n binary data through n8n's own helper
 * (`helpers.prepareBinaryData`), streamed from the sidecar.
 */
import { createHash } from 'crypto';

import {
	BINARY_ENCODING,
	type IBinaryData,
	type IBinaryKeyData,
	type IExecuteFunctions,
	type INodeExecutionData,
} from 'n8n-workflow';

import type { FileRef, SidecarClient } from './transport';

/** n8n reads a stored binary in pieces of this size (the sidecar's chunk). */
const READ_BYTES = 1024 * 1024;
/** StatFiles takes at most this many hashes per call. */
const STAT_BATCH = 1000;

type Source = () => Promise<AsyncIterable<Buffer | Uint8Array> | Iterable<Buffer | Uint8Array>>;

/** The contents a Save's files need, by SHA-256 (each uploaded once, when the sidecar lacks it). */
export type FileContents = Map<string, { sizeBytes: number; source: Source }>;

/** The bytes of one binary property, readable from the start as often as needed. */
function sourceOf(ctx: IExecuteFunctions, data: IBinaryData): Source {
	if (data.id) {
		const id = data.id;
		return async () => await ctx.helpers.getBinaryStream(id, READ_BYTES);
	}
	const buffer = Buffer.from(data.data, BINARY_ENCODING);
	return async () => [buffer];
}

async function digestOf(source: Source): Promise<{ sha256: string; sizeBytes: number }> {
	const hash = createHash('sha256');
	let sizeBytes = 0;
	for await (const piece of await source()) {
		hash.update(piece);
		sizeBytes += piece.length;
	}
	return { sha256: hash.digest('hex'), sizeBytes };
}

/** Whether an item carries files. */
export function hasFiles(item: INodeExecutionData): boolean {
	return !!item.binary && Object.keys(item.binary).length > 0;
}

/**
 * The files of one item, hashed, as a Save names them; their contents are
 * added to `contents` (by hash) for `uploadMissing`.
 */
export async function fileRefsOf(
	ctx: IExecuteFunctions,
	item: INodeExecutionData,
	contents: FileContents,
): Promise<FileRef[]> {
	const refs: FileRef[] = [];
	for (const [property, data] of Object.entries(item.binary ?? {})) {
		if (!data) continue;
		const source = sourceOf(ctx, data);
		const { sha256, sizeBytes } = await digestOf(source);
		refs.push({
			property,
			fileName: data.fileName ?? '',
			mimeType: data.mimeType ?? '',
			sha256,
			sizeBytes,
		});
		if (!contents.has(sha256)) contents.set(sha256, { sizeBytes, source });
	}
	return refs;
}

/**
 * Uploads the contents the sidecar does not hold yet (one StatFiles call per 1,000 contents). The
 * first failure is thrown, tagged with its content (refusedContent); with `keepGoing` the other
 * contents are still uploaded and the failures are answered by content instead.
 */
export async function uploadMissing(
	client: SidecarClient,
	contents: FileContents,
	keepGoing = false,
): Promise<Map<string, unknown>> {
	const failed = new Map<string, unknown>();
	const hashes = [...contents.keys()];
	for (let at = 0; at < hashes.length; at += STAT_BATCH) {
		const batch = hashes.slice(at, at + STAT_BATCH);
		const held = new Set((await client.statFiles({ sha256: batch })).present);
		for (const sha256 of batch) {
			if (held.has(sha256)) continue;
			const { sizeBytes, source } = contents.get(sha256)!;
			try {
				await client.uploadFile(sha256, sizeBytes, source);
			} catch (error) {
				if (!keepGoing) {
					throw typeof error === 'object' && error !== null
						? Object.assign(error, { sha256 })
						: error;
				}
				failed.set(sha256, error);
			}
		}
	}
	return failed;
}

/** The content an upload of uploadMissing was refused for, when the error says. */
export function refusedContent(error: unknown): string | undefined {
	const sha256 = (error as { sha256?: unknown } | null)?.sha256;
	return typeof sha256 === 'string' ? sha256 : undefined;
}

/** The files as n8n binary data, each streamed from the sidecar into n8n's binary data store. */
export async function binaryOf(
	ctx: IExecuteFunctions,
	client: SidecarClient,
	refs: FileRef[],
): Promise<IBinaryKeyData> {
	const out: IBinaryKeyData = {};
	for (const ref of refs) {
		const data = await ctx.helpers.prepareBinaryData(
			client.downloadFile(ref.sha256, ref.sizeBytes),
			ref.fileName || undefined,
			ref.mimeType || 'application/octet-stream',
		);
		// prepareBinaryData names the file by the path's last part: keep the saved name as it was.
		if (ref.fileName) data.fileName = ref.fileName;
		out[ref.property] = data;
	}
	return out;
}

/** The item with these files added to its binary data (a restored file replaces one of the same property). */
export function withBinary(item: INodeExecutionData, restored: IBinaryKeyData): INodeExecutionData {
	return { ...item, binary: { ...(item.binary ?? {}), ...restored } };
}
