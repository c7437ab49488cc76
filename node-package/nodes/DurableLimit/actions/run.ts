/** What every Durable Limit operation works with: the items, their instances, the limit's name and key, and the routing. */
import { NodeOperationError } from 'n8n-workflow';
import type { IDataObject, IExecuteFunctions, INode, INodeExecutionData } from 'n8n-workflow';

import { failuresOf, perItem } from '../../../shared/batch';
import {
	asNodeError,
	executionIdOf,
	failForSetup,
	setupError,
	sidecarFor,
	UNIT_SECONDS,
	workflowIdOf,
} from '../../../shared/node-helpers';
import type { SidecarClient } from '../../../shared/transport';
import { keyText, refusedItem } from '../../../shared/door';
import { nodeParameter, targetOf, Upstream, type Target } from '../../../shared/upstream';

export type Operation = 'enterSection' | 'leaveSection' | 'rateLimit' | 'debounce';

/** The key of items whose Key is empty: one count for all of them. */
export const ALL_ITEMS_KEY = 'all';

export interface LimitRun {
	node: INode;
	items: INodeExecutionData[];
	client: SidecarClient;
	executionId: string;
	/** The item's instance, and the execution that holds it (the caller's, in a sub-workflow). */
	target: (i: number) => Target;
	/** The limit's name and key for an item. */
	limitOf: (i: number) => { limitName: string; limitKey: string };
}

/** One of the node's operations, on all items; its outputs in the order configuredOutputs names them. */
export type LimitOperation = (
	ctx: IExecuteFunctions,
	run: LimitRun,
) => Promise<INodeExecutionData[][]>;

/**
 * Where an item goes: an output's index and what the item carries under `limit` (none: the item as it
 * came, for a pass-through such as Leave Section before a Save); undefined: parked, no output.
 */
export type Routed = { output: number; limit?: IDataObject } | undefined;

export async function runOf(ctx: IExecuteFunctions): Promise<LimitRun> {
	const node = ctx.getNode();
	const items = ctx.getInputData();
	const workflowId = workflowIdOf(ctx);
	const executionId = executionIdOf(ctx);
	const upstream = new Upstream(ctx);
	const text = (name: string, i: number): string => {
		const raw: unknown = nodeParameter(ctx, name, i, '');
		return typeof raw === 'string'
			? raw.trim()
			: raw === undefined || raw === null
				? ''
				: String(raw);
	};
	return {
		node,
		items,
		client: await sidecarFor(ctx),
		executionId,
		target: once((i) =>
			targetOf(
				ctx,
				upstream.requireInstance(
					i,
					items[i],
					'The Durable Limit counts instances: place it after a Resume Point, so that an item that waits can come back.',
				),
				i,
				{ workflowId, executionId },
			),
		),
		limitOf: once((i) => {
			const limitName = text('limitName', i);
			if (!limitName) {
				throw setupError(
					node,
					'Limit Name is empty',
					i,
					'Name the limit, e.g. stripe-api: every node that uses the name shares the limit.',
				);
			}
			return { limitName, limitKey: limitKeyOf(node, nodeParameter(ctx, 'limitKey', i, ''), i) };
		}),
	};
}

/**
 * The Key an item gives: text (trimmed) or a number's decimal text; empty: ALL_ITEMS_KEY. Never String()
 * of an object or a list: two customers whose ids are objects would both count as "[object Object]".
 */
export function limitKeyOf(node: INode, raw: unknown, itemIndex: number): string {
	const refuse = (why: string): NodeOperationError =>
		setupError(
			node,
			`Key ${why}`,
			itemIndex,
			'Set Key to an expression that gives text or a number, e.g. {{ $json.body.customerId }}: two objects would otherwise count as one key.',
		);
	const read = keyText(raw, 'a key');
	if ('why' in read) throw refuse(read.why);
	return read.text || ALL_ITEMS_KEY;
}

/**
 * A whole-number parameter in [min, max], or an error naming it as the node shows it (the sidecar's own
 * refusal names its contract's field, which the author never sees).
 */
export function wholeNumber(
	ctx: IExecuteFunctions,
	name: string,
	label: string,
	itemIndex: number,
	fallback: number,
	[min, max]: [number, number],
): number {
	const raw: unknown = nodeParameter(ctx, name, itemIndex, fallback);
	const value = typeof raw === 'string' && raw.trim() !== '' ? Number(raw) : raw;
	if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
		throw setupError(
			ctx.getNode(),
			`${label} must be a whole number from ${min.toLocaleString('en-US')} to ${max.toLocaleString('en-US')}, got ${JSON.stringify(raw) ?? String(raw)}`,
			itemIndex,
			`Set ${label} to a whole number from ${min.toLocaleString('en-US')} to ${max.toLocaleString('en-US')}.`,
		);
	}
	return value;
}

/** `read` per item index, evaluated once (its answer or its error) however often an operation asks. */
function once<T>(read: (i: number) => T): (i: number) => T {
	const seen = new Map<number, { value: T } | { error: unknown }>();
	return (i) => {
		let got = seen.get(i);
		if (got === undefined) {
			try {
				got = { value: read(i) };
			} catch (error) {
				got = { error };
			}
			seen.set(i, got);
		}
		if ('error' in got) throw got.error;
		return got.value;
	};
}

/**
 * One call per item (several in flight), each item routed to the output its answer names, with
 * `limit` on its JSON; a failed item fails the run (a setupError failing its instance for good
 * first), or under Continue On Fail leaves by `failedOutput` (the output that runs nothing) as
 * n8n's error item.
 */
export async function routeItems(
	ctx: IExecuteFunctions,
	run: LimitRun,
	action: string,
	outputs: number,
	failedOutput: number,
	call: (i: number, target: Target) => Promise<Routed>,
): Promise<INodeExecutionData[][]> {
	const { node, items, client } = run;
	const settled = await perItem(ctx, client, action, items.length, async (i) => {
		let target: Target;
		try {
			target = run.target(i);
		} catch (error) {
			throw asNodeError(node, error, i);
		}
		return await call(i, target);
	});
	const failed = settled.find((result) => !result.ok);
	if (failed && !failed.ok && !ctx.continueOnFail()) {
		await failForSetup(client, node, failuresOf(settled), run.target);
		throw failed.error;
	}
	const out: INodeExecutionData[][] = Array.from({ length: outputs }, () => []);
	for (let i = 0; i < items.length; i++) {
		const result = settled[i];
		if (!result.ok) {
			out[failedOutput].push(refusedItem(result.error, i));
			continue;
		}
		if (result.value === undefined) continue;
		const { output, limit } = result.value;
		out[output].push({
			json: limit ? { ...items[i].json, limit } : items[i].json,
			binary: items[i].binary,
			pairedItem: { item: i },
		});
	}
	return out;
}

/**
 * The calls a run's items make to a rate: the items of one instance at one key are one call for all of
 * them (n8n sends them on together, so they go out at one time). `callOfItem[i]`: item i's call, or
 * undefined when its instance or key cannot be read (routeItems reports that error); `itemsOfCall`:
 * how many items each call stands for.
 */
export function rateCallsOf(run: LimitRun): {
	callOfItem: Array<string | undefined>;
	itemsOfCall: Map<string, number>;
} {
	const callOf = (i: number): string | undefined => {
		try {
			const { workflowId, instanceKey } = run.target(i);
			const { limitName, limitKey } = run.limitOf(i);
			return JSON.stringify([workflowId, instanceKey, limitName, limitKey]);
		} catch {
			return undefined;
		}
	};
	const callOfItem = run.items.map((_, i) => callOf(i));
	const itemsOfCall = new Map<string, number>();
	for (const call of callOfItem) {
		if (call !== undefined) itemsOfCall.set(call, (itemsOfCall.get(call) ?? 0) + 1);
	}
	return { callOfItem, itemsOfCall };
}

/** The answer of `call` for each item of one call, asked once for all of them. */
export function oncePerCall<T>(
	callOfItem: Array<string | undefined>,
	call: (i: number, key: string) => Promise<T>,
): (i: number) => Promise<T> {
	const answers = new Map<string, Promise<T>>();
	return async (i) => {
		const key = callOfItem[i] ?? String(i);
		let pending = answers.get(key);
		if (pending === undefined) {
			pending = call(i, key);
			answers.set(key, pending);
		}
		return await pending;
	};
}

/** The option Max Wait Inside the Execution, in milliseconds (0 to 60 s). */
export function waitMs(ctx: IExecuteFunctions, i: number): number {
	const seconds = Number(nodeParameter(ctx, 'options.maxWaitSeconds', i, 10));
	return Number.isFinite(seconds) ? Math.min(60_000, Math.max(0, Math.round(seconds * 1000))) : 0;
}

/** An amount parameter in the unit parameter beside it, in milliseconds; `what` names it in an error. */
export function millisecondsOf(
	ctx: IExecuteFunctions,
	node: INode,
	i: number,
	amount: string,
	unit: string,
	what: string,
	{ zero = false }: { zero?: boolean } = {},
): number {
	const value = Number(nodeParameter(ctx, amount, i, 0));
	const seconds = UNIT_SECONDS[String(nodeParameter(ctx, unit, i, 'seconds'))] ?? 1;
	const ms = Math.round(value * seconds * 1000);
	if (!Number.isFinite(ms) || ms < (zero ? 0 : 1) || ms > 86_400_000) {
		const unitName = String(nodeParameter(ctx, unit, i, 'seconds'));
		throw setupError(
			node,
			`${what} must be from ${zero ? '0' : '1 ms'} to one day, got ${String(value)} ${unitName}`,
			i,
			`Set ${what} to a number of ${unitName} from ${zero ? '0' : 'one millisecond (0.001 seconds)'} to one day.`,
		);
	}
	return ms;
}
