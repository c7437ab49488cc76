/**
 * Running a node's items through the sidecar: batched calls that fall back to
 * one call per item to attribute an item's error (under Continue On Fail), and
 * per-item calls for RPCs the contract does not batch.
 */
import type {
	IExecuteFunctions,
	INodeExecutionData,
	NodeApiError,
	NodeOperationError,
} from 'n8n-workflow';

import { nodeOf } from './run-node';
import {
	batchItemIndex,
	isGrpcFailure,
	isSidecarUnreachable,
	ITEM_SCOPED,
	sidecarError,
} from './errors';
import {
	callContext,
	chunks,
	mapLimited,
	MAX_BATCH_ITEMS,
	type ErrorContext,
} from './node-helpers';
import { refusedItem } from './door';
import type { SidecarClient } from './transport';

export type NodeError = NodeOperationError | NodeApiError;

/** Per input index: the result, or the n8n error for that item. */
export type Settled<T> = Array<{ ok: true; value: T } | { ok: false; error: NodeError }>;

/**
 * Calls `call` with all `indexes` (in chunks of MAX_BATCH_ITEMS) and returns a
 * result per index. The contract makes a batch all-or-nothing, so when an item
 * of a batch is refused and Continue On Fail is on, the batch is retried item
 * by item (safe: nothing of the failed batch was written) so that every other
 * item still gets its answer. Without Continue On Fail the error is thrown
 * with the failing item's index.
 */
export async function batched<T>(
	ctx: IExecuteFunctions,
	client: SidecarClient,
	action: string,
	indexes: number[],
	call: (batch: number[]) => Promise<T[]>,
): Promise<Map<number, { ok: true; value: T } | { ok: false; error: NodeError }>> {
	const node = nodeOf(ctx);
	const out = new Map<number, { ok: true; value: T } | { ok: false; error: NodeError }>();
	for (const positions of chunks(indexes.length, MAX_BATCH_ITEMS)) {
		const batch = positions.map((p) => indexes[p]);
		try {
			const values = await call(batch);
			batch.forEach((index, k) => out.set(index, { ok: true, value: values[k] }));
			continue;
		} catch (error) {
			const at = isGrpcFailure(error) ? batchItemIndex(error.details) : undefined;
			const itemIndex = at !== undefined && at < batch.length ? batch[at] : batch[0];
			const mapped = sidecarError(node, error, callContext(client, action, itemIndex));
			if (!ctx.continueOnFail()) throw mapped;
			if (!(isGrpcFailure(error) && ITEM_SCOPED.has(error.code)) || batch.length === 1) {
				// Not about one item (sidecar down, wrong token): every item failed alike.
				for (const index of batch) {
					out.set(index, {
						ok: false,
						error: sidecarError(node, error, callContext(client, action, index)),
					});
				}
				continue;
			}
		}
		for (const index of batch) {
			try {
				const [value] = await call([index]);
				out.set(index, { ok: true, value });
			} catch (error) {
				out.set(index, {
					ok: false,
					error: sidecarError(node, error, callContext(client, action, index)),
				});
			}
		}
	}
	return out;
}

/** One call per item, a few in flight at once; a failure is that item's error. */
export async function perItem<T>(
	ctx: IExecuteFunctions,
	client: SidecarClient,
	action: string,
	count: number,
	call: (index: number) => Promise<T>,
	concurrency = 8,
	hints?: ErrorContext['hints'],
): Promise<Settled<T>> {
	const node = nodeOf(ctx);
	// Once the sidecar proved unreachable for a whole deadline, the items not yet
	// sent fail at once instead of each waiting out its own deadline.
	let unreachable: unknown;
	return await mapLimited(count, concurrency, async (index) => {
		try {
			if (unreachable !== undefined) throw unreachable;
			return { ok: true as const, value: await call(index) };
		} catch (error) {
			if (isSidecarUnreachable(error)) unreachable = error;
			return {
				ok: false as const,
				error: sidecarError(node, error, callContext(client, action, index, hints)),
			};
		}
	});
}

/** The failed items of settled per-item calls, as [input index, its error]. */
export function failuresOf<T>(settled: Settled<T>): Array<[number, NodeError]> {
	return settled.flatMap((result, i) =>
		result.ok ? [] : [[i, result.error] as [number, NodeError]],
	);
}

/**
 * The output items of settled per-item calls: `toItem` of each answer (undefined: the item
 * goes no further); a failed item fails the run, or under Continue On Fail becomes an error item.
 */
export function settledItems<T>(
	ctx: IExecuteFunctions,
	items: INodeExecutionData[],
	settled: Settled<T>,
	toItem: (value: T, itemIndex: number) => INodeExecutionData | undefined,
): INodeExecutionData[] {
	const out: INodeExecutionData[] = [];
	for (let i = 0; i < items.length; i++) {
		const result = settled[i];
		if (!result.ok) {
			if (!ctx.continueOnFail()) throw result.error;
			out.push(refusedItem(result.error, i));
			continue;
		}
		const item = toItem(result.value, i);
		if (item) out.push(item);
	}
	return out;
}
