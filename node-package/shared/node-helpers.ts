/**
 * Helpers every node shares: the credential's client, this workflow and
 * execution, the `durable` metadata on items, JSON fields and error items.
 */
import {
	NodeOperationError,
	type IDataObject,
	type IExecuteFunctions,
	type INode,
	type INodeExecutionData,
	type NodeApiError,
} from 'n8n-workflow';

import { nodeOf } from './run-node';
import { cachedCredentials } from './credential-cache';
import { sidecarError, type ErrorContext } from './errors';
import type { Target } from './refs';
import {
	sidecarClientFor,
	InstanceStatus,
	RunState,
	targetOf,
	type Event,
	type Instance,
	type SidecarClient,
} from './transport';

export const CREDENTIAL_NAME = 'durableSidecarApi';

/** Largest batch sent in one call (the sidecar's default DURABLE_MAX_BATCH_ITEMS). */
export const MAX_BATCH_ITEMS = 1000;

/** The field the nodes write their metadata to (and the Resume Point reads the claim from). */
export const DURABLE_FIELD = 'durable';
/** The field the Idempotency Guard writes to. */
export const IDEMPOTENCY_FIELD = 'idempotency';

export async function sidecarFor(ctx: IExecuteFunctions): Promise<SidecarClient> {
	const data = await cachedCredentials(ctx, CREDENTIAL_NAME);
	try {
		const client = sidecarClientFor(data);
		// How the session tells an execution that ended in n8n from one in a long call (session.ts).
		if (typeof ctx.getExecutionDataById === 'function') {
			client.session.observe(async (id) => await ctx.getExecutionDataById(id));
		}
		return client;
	} catch (error) {
		throw new NodeOperationError(nodeOf(ctx), error as Error, {
			description: 'Fix the Durable Sidecar API credential.',
		});
	}
}

/** Error context for a call made through `client`. */
export function callContext(
	client: SidecarClient,
	action: string,
	itemIndex?: number,
	hints?: ErrorContext['hints'],
): ErrorContext {
	return {
		action,
		target: targetOf(client.connection),
		deadlineSeconds: client.connection.deadlineSeconds,
		itemIndex,
		hints,
	};
}

/** This workflow's id; instances are keyed by it, so an unsaved workflow cannot have any. */
export function workflowIdOf(ctx: IExecuteFunctions): string {
	const id = ctx.getWorkflow().id;
	if (!id) {
		throw new NodeOperationError(nodeOf(ctx), 'This workflow has no id yet', {
			description:
				'Save the workflow once before running durable nodes: instances belong to a workflow id.',
		});
	}
	return String(id);
}

/** This execution's id (the lease owner of the instances it runs). */
export function executionIdOf(ctx: IExecuteFunctions): string {
	const id = ctx.getExecutionId();
	if (!id) {
		throw new NodeOperationError(nodeOf(ctx), 'This execution has no id', {
			description: 'Durable nodes need an execution id as lease owner; run the workflow normally.',
		});
	}
	return String(id);
}

/** Seconds per unit of the duration options (ours and n8n's Wait node). */
export const UNIT_SECONDS: Record<string, number> = {
	seconds: 1,
	minutes: 60,
	hours: 3600,
	days: 86400,
};

/** A node type's own name, whatever its package prefix (`n8n-nodes-durable.resumePoint` → `resumePoint`). */
export function typeName(type: string): string {
	return type.slice(type.lastIndexOf('.') + 1);
}

export function isObject(value: unknown): value is IDataObject {
	return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** The `durable` metadata object on an item, or an empty one. */
export function durableOf(item: INodeExecutionData): IDataObject {
	const meta = item.json[DURABLE_FIELD];
	return isObject(meta) ? meta : {};
}

/** A copy of the item with its `durable` metadata extended by `patch`. */
export function withDurable(
	item: INodeExecutionData,
	patch: IDataObject,
	itemIndex: number,
): INodeExecutionData {
	return {
		json: { ...item.json, [DURABLE_FIELD]: { ...durableOf(item), ...patch } },
		binary: item.binary,
		pairedItem: { item: itemIndex },
	};
}

/** The item's JSON without our own metadata fields (what a checkpoint saves). */
export function userJson(item: INodeExecutionData): IDataObject {
	const out: IDataObject = { ...item.json };
	delete out[DURABLE_FIELD];
	delete out[IDEMPOTENCY_FIELD];
	return out;
}

/** Reads dotted paths (`order.id`) from the item JSON into a new object with the same paths. */
export function pickFields(json: IDataObject, fields: string[]): IDataObject {
	const out: IDataObject = {};
	for (const path of fields) {
		const parts = path.split('.');
		let value: unknown = json;
		for (const part of parts) {
			value = isObject(value) ? value[part] : undefined;
		}
		if (value === undefined) continue;
		let target = out;
		for (const part of parts.slice(0, -1)) {
			if (!isObject(target[part])) target[part] = {};
			target = target[part] as IDataObject;
		}
		target[parts[parts.length - 1]] = value as IDataObject[string];
	}
	return out;
}

/** "a, b.c ,d" → ["a", "b.c", "d"] */
export function fieldList(value: string): string[] {
	return value
		.split(',')
		.map((f) => f.trim())
		.filter((f) => f.length > 0);
}

/** A JSON parameter: n8n hands it over as a string or as an already-parsed value. */
export function jsonParameter(
	node: INode,
	value: unknown,
	name: string,
	itemIndex: number,
): unknown {
	if (typeof value !== 'string') return value;
	try {
		return JSON.parse(value);
	} catch {
		throw setupError(
			node,
			`${name} is not valid JSON`,
			itemIndex,
			`Give ${name} as a JSON object, e.g. {"status": "paid"}.`,
		);
	}
}

/** The Search Fields option of item i as the sidecar takes it; empty when none is set. */
export function searchFieldsOf(
	ctx: IExecuteFunctions,
	node: INode,
	i: number,
	parameter = 'options.searchFields',
): Buffer {
	const raw = ctx.getNodeParameter(parameter, i, '') as unknown;
	if (raw === '' || raw === undefined || raw === null) return Buffer.alloc(0);
	const value = jsonParameter(node, raw, 'Search Fields', i);
	if (value === null || typeof value !== 'object' || Array.isArray(value)) {
		throw setupError(
			node,
			'Search Fields must be a JSON object',
			i,
			'Name each field with its text or number, e.g. {"customerId": "C-42", "amount": 99.5}.',
		);
	}
	if (Object.keys(value).length === 0) return Buffer.alloc(0);
	return toJsonBytes(value);
}

export function toJsonBytes(value: unknown): Buffer {
	return Buffer.from(JSON.stringify(value ?? null), 'utf8');
}

/** Parses bytes the sidecar returns as JSON; empty means undefined. */
export function fromJsonBytes(bytes: Uint8Array | undefined): unknown {
	if (!bytes || bytes.length === 0) return undefined;
	try {
		return JSON.parse(Buffer.from(bytes).toString('utf8'));
	} catch {
		return Buffer.from(bytes).toString('utf8');
	}
}

/**
 * Runs a node's whole run so that, under Continue On Fail, an error of the whole run (its credentials, a
 * call before any item's) fails every item on `failedOutput`, an output that runs nothing. Thrown, n8n
 * would send the input items on out of the node's first output with no error on them
 * (WorkflowExecute.handleNodeExecutionError in n8n 2.41): a Resume Point's Start, a Claim's First Run.
 */
export async function failingTogether(
	ctx: IExecuteFunctions,
	outputs: () => number,
	failedOutput: number,
	toItem: (error: NodeOperationError | NodeApiError, itemIndex: number) => INodeExecutionData,
	run: () => Promise<INodeExecutionData[][]>,
): Promise<INodeExecutionData[][]> {
	try {
		return await run();
	} catch (error) {
		const node = ctx.getNode();
		if (!ctx.continueOnFail()) throw asNodeError(node, error, 0);
		const out: INodeExecutionData[][] = Array.from({ length: outputs() }, () => []);
		out[failedOutput] = ctx.getInputData().map((_, i) => toItem(asNodeError(node, error, i), i));
		return out;
	}
}

/** Any failure while preparing an item, as the n8n error for that item. */
export function asNodeError(
	node: INode,
	error: unknown,
	itemIndex: number,
): NodeOperationError | NodeApiError {
	if (error instanceof NodeOperationError) return error;
	if (
		typeof error === 'object' &&
		error !== null &&
		(error as { name?: unknown }).name === 'NodeApiError'
	) {
		return error as NodeApiError;
	}
	return new NodeOperationError(node, error instanceof Error ? error : String(error), {
		itemIndex,
	});
}

/** Runs `work` for every index with at most `limit` in flight; results keep input order. */
export async function mapLimited<T>(
	count: number,
	limit: number,
	work: (index: number) => Promise<T>,
): Promise<T[]> {
	const results = new Array<T>(count);
	let next = 0;
	async function lane(): Promise<void> {
		while (next < count) {
			const index = next++;
			results[index] = await work(index);
		}
	}
	await Promise.all(Array.from({ length: Math.min(limit, count) }, lane));
	return results;
}

/** Splits `count` indexes into consecutive chunks of at most `size`. */
export function chunks(count: number, size: number): number[][] {
	const out: number[][] = [];
	for (let start = 0; start < count; start += size) {
		out.push(Array.from({ length: Math.min(size, count - start) }, (_, k) => start + k));
	}
	return out;
}

export { sidecarError };
export type { ErrorContext };

/** "running", "completed", ... as items say an instance's status; "unknown" without one. */
export function instanceStatusName(inst: Instance | undefined): string {
	if (!inst) return 'unknown';
	return InstanceStatus[inst.status]?.replace('INSTANCE_STATUS_', '').toLowerCase() ?? 'unknown';
}

/**
 * An instance as an item carries it: which one and its status, then `more` of its
 * fields; nothing without an instance.
 */
export function instanceFields(
	inst: Instance | undefined,
	more: (inst: Instance) => IDataObject,
): IDataObject {
	if (!inst) return {};
	return {
		workflowId: inst.workflowId,
		instanceKey: inst.instanceKey,
		status: instanceStatusName(inst),
		...more(inst),
	};
}

/** A time as items carry it: ISO text, or null when there is none. */
export function isoTime(at: Date | undefined): string | null {
	return at ? at.toISOString() : null;
}

/** "waiting", "active", ... for a RUNNING instance; "" otherwise. */
export function runStateName(inst: Instance | undefined): string {
	if (!inst || !inst.runState) return '';
	return (RunState[inst.runState] ?? '').replace('RUN_STATE_', '').toLowerCase();
}

/** An event as the nodes put it on an item: its payload parsed, times as ISO strings. */
export function eventJson(event: Event | undefined): IDataObject | null {
	if (!event) return null;
	return {
		name: event.eventName,
		payload: (fromJsonBytes(event.payloadJson) ?? null) as IDataObject,
		dedupeId: event.dedupeId,
		sender: event.sender,
		receivedAt: event.receivedAt ? event.receivedAt.toISOString() : null,
	};
}

/**
 * Whether the error is the sidecar's refusal for one of its limits (RESOURCE_EXHAUSTED: a state, a
 * payload, a result or a file over a DURABLE_MAX_* setting), which every resume would meet again.
 */
export function isLimitRefusal(error: unknown): error is NodeOperationError {
	return error instanceof NodeOperationError && error.context.grpcCode === 'RESOURCE_EXHAUSTED';
}

/**
 * The way out an error that fails its instance for good names: the instance is bound to the version it
 * started with, and a failed one cannot be moved, so the retry comes first.
 */
export const FAILED_FOR_GOOD =
	'The instance is failed, not retried. To run it again once the workflow is changed: durable-sidecar instances retry, then (the Resume Point suspends it: it is bound to the old version) instances move to the new version and instances resume (docs/waiting-and-failures.md).';

/**
 * An error in how a node is set up for an item (a required parameter empty, a number out of range, a
 * JSON parameter that is not JSON): every resume would meet it again, since a resumed execution reads
 * the same parameters on the same checkpointed data. failForSetup fails its instance for good with it,
 * instead of the instance being resumed and failing until its retry policy suspends it with a lapsed
 * lease as its only reason.
 */
export function setupError(
	node: INode,
	message: string,
	itemIndex: number | undefined,
	description: string,
): NodeOperationError {
	const error = new NodeOperationError(node, message, { itemIndex, description });
	error.context.failsInstance = true;
	return error;
}

/** Whether the error is a setupError (it fails its instance for good). */
export function isSetupError(error: unknown): error is NodeOperationError {
	return error instanceof NodeOperationError && error.context.failsInstance === true;
}

/**
 * Before a run fails without Continue On Fail: the instance of every item whose error is a setupError
 * is failed for good with it, each instance once, and the error's description then ends with the way
 * out (FAILED_FOR_GOOD). `targetAt` finds an item's instance; an item without one (it throws or gives
 * undefined) has none to fail. Under Continue On Fail the items go on as error items and the author's
 * workflow decides, so callers do not call this then.
 */
export async function failForSetup(
	client: SidecarClient,
	node: INode,
	errors: Iterable<[number, unknown]>,
	targetAt: (itemIndex: number) => Target | undefined,
): Promise<void> {
	const done = new Set<string>();
	// One error may stand for several items (a refusal of the whole node): it gets the way out once.
	const failed = new Set<NodeOperationError>();
	for (const [i, error] of errors) {
		if (!isSetupError(error) || error.description?.endsWith(FAILED_FOR_GOOD)) continue;
		let target: Target | undefined;
		try {
			target = targetAt(i);
		} catch {
			continue;
		}
		const id = target && JSON.stringify([target.workflowId, target.instanceKey]);
		if (!target || !id || done.has(id)) continue;
		done.add(id);
		if (
			await failInstanceForGood(
				client,
				target,
				`${node.name}: ${error.message}. ${withWayOut(error)}`,
			)
		) {
			failed.add(error);
		}
	}
	for (const error of failed) error.description = withWayOut(error);
}

const withWayOut = (error: NodeOperationError): string =>
	error.description ? `${error.description} ${FAILED_FOR_GOOD}` : FAILED_FOR_GOOD;

/**
 * Fails an instance that no resume can carry on (a limit the sidecar refuses, a workflow its
 * items cannot pass), with `message` as its error and no retry by its policy: the console and the
 * CLI say why at once, instead of the instance being resumed and refused until its policy gives up.
 * Best effort: the caller's own error is what the author sees either way.
 */
export async function failInstanceForGood(
	client: SidecarClient,
	{ workflowId, instanceKey, executionId }: Target,
	message: string,
): Promise<boolean> {
	try {
		await client.failInstance({
			workflowId,
			instanceKey,
			executionId,
			errorMessage: message.slice(0, 4096),
			retry: false,
		});
		return true;
	} catch {
		// The instance is then resumed under its retry policy, and refused again.
		return false;
	}
}
