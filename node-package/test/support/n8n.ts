/* eslint-disable @n8n/community-nodes/no-restricted-globals, @n8n/community-nodes/no-restricted-imports -- test code runs in Node, never inside n8n */
/**
 * The only mock in the suite: n8n's execute-functions interface, answering
 * parameters per item the way n8n does after resolving expressions.
 */
import {
	NodeHelpers,
	type IBinaryData,
	type IDataObject,
	type IExecuteFunctions,
	type INode,
	type INodeExecutionData,
	type INodeParameters,
	type INodeTypeDescription,
	type IPairedItemData,
	type ITriggerFunctions,
	type NodeExecutionHint,
	type NodeTypeAndVersion,
} from 'n8n-workflow';
import type { CallOptions, Metadata, ServiceError } from '@grpc/grpc-js';
import { randomUUID } from 'crypto';
import { basename } from 'path';
import { Readable } from 'stream';

import type { SidecarClient } from '../../shared/transport';

export type ParamValue = unknown | ((itemIndex: number, item: INodeExecutionData) => unknown);

/**
 * A node that ran before the node under test, on the path its items came by.
 * `output` is what it emitted on the branch towards the next node (its items'
 * pairedItem index into the previous entry's output); the first entry (the
 * direct parent) emitted the input items, so its `output` is left out.
 */
export interface UpstreamNode {
	name: string;
	type: string;
	typeVersion?: number;
	parameters?: INodeParameters;
	output?: INodeExecutionData[];
	disabled?: boolean;
}

export interface ContextOptions {
	items: Array<IDataObject | INodeExecutionData>;
	params: Record<string, ParamValue>;
	credentials: Record<string, unknown>;
	workflowId?: string;
	executionId?: string;
	/** The calling execution, when this one is a sub-workflow's (n8n's execution context). */
	parentExecutionId?: string;
	continueOnFail?: boolean;
	nodeName?: string;
	nodeType?: string;
	/** The node's version (INode.typeVersion); 1 unless given. */
	typeVersion?: number;
	/**
	 * The node's description: parameters not in `params` then answer their
	 * default for this version, as n8n does (an expression default fails the
	 * test: the mock does not evaluate expressions).
	 */
	description?: INodeTypeDescription;
	/** The path the items came by, nearest node first (see UpstreamNode). */
	upstream?: UpstreamNode[];
	/**
	 * The nodes this one feeds directly (each fed by this node only), for
	 * getChildNodes; `output` is not used.
	 */
	downstream?: UpstreamNode[];
	/** Receives what the node adds with addExecutionHints (n8n shows them on its output pane). */
	hints?: NodeExecutionHint[];
	/**
	 * How helpers.prepareBinaryData keeps a file: in the item ('default', base64, n8n's memory mode) or in the
	 * binary data store under an id ('filesystem', as n8n's filesystem mode does); 'default' unless given.
	 */
	binaryMode?: 'default' | 'filesystem';
}

/** The binary data store of the 'filesystem' mode: content by id, as n8n keeps files on disk. */
export const binaryStore = new Map<string, Buffer>();

/** A file's bytes, wherever the mock (or n8n) keeps them. */
export function binaryBytes(data: IBinaryData): Buffer {
	if (data.id) {
		const stored = binaryStore.get(data.id);
		if (!stored) throw new Error(`no binary data ${data.id}`);
		return stored;
	}
	return Buffer.from(data.data, 'base64');
}

/** A file kept in the binary data store (n8n's filesystem mode), as an item's binary property. */
export function storedBinary(bytes: Buffer, fileName: string, mimeType: string): IBinaryData {
	const id = `filesystem-v2:test/${randomUUID()}`;
	binaryStore.set(id, bytes);
	return { id, data: 'filesystem-v2', fileName, mimeType, bytes: bytes.length };
}

/** n8n's binary data helpers the nodes use (getBinaryStream, prepareBinaryData), over the store above. */
function binaryHelpers(mode: 'default' | 'filesystem') {
	return {
		getBinaryStream: async (id: string, chunkSize = 64 * 1024): Promise<Readable> => {
			const bytes = binaryStore.get(id);
			if (!bytes) throw new Error(`no binary data ${id}`);
			const pieces: Buffer[] = [];
			for (let at = 0; at < bytes.length; at += chunkSize)
				pieces.push(bytes.subarray(at, at + chunkSize));
			return Readable.from(pieces);
		},
		prepareBinaryData: async (
			data: Buffer | Readable,
			filePath?: string,
			mimeType?: string,
		): Promise<IBinaryData> => {
			const bytes = Buffer.isBuffer(data)
				? data
				: Buffer.concat((await data.toArray()) as Buffer[]);
			const fileName = filePath ? basename(filePath) : undefined;
			const out: IBinaryData = {
				data: '',
				mimeType: mimeType ?? 'application/octet-stream',
				...(fileName ? { fileName } : {}),
				bytes: bytes.length,
			};
			if (mode === 'filesystem') {
				return {
					...out,
					id: storedBinary(bytes, fileName ?? '', out.mimeType).id,
					data: 'filesystem-v2',
				};
			}
			out.data = bytes.toString('base64');
			return out;
		},
	};
}

function isExecutionData(value: IDataObject | INodeExecutionData): value is INodeExecutionData {
	return typeof value.json === 'object' && value.json !== null && !Array.isArray(value.json);
}

export function node(
	name = 'Durable Node',
	type = 'n8n-nodes-durable.test',
	typeVersion = 1,
	parameters: INodeParameters = {},
): INode {
	return { id: 'node-1', name, type, typeVersion, position: [0, 0], parameters };
}

/** The parameters as stored on the node: a per-item function stands for an expression. */
function storedParameters(params: Record<string, ParamValue>): INodeParameters {
	const out: INodeParameters = {};
	for (const [name, value] of Object.entries(params)) {
		if (name.includes('.')) continue;
		out[name] = (typeof value === 'function' ? '={{ mock }}' : value) as INodeParameters[string];
	}
	return out;
}

function firstPaired(item: INodeExecutionData | undefined): number | undefined {
	const paired = item?.pairedItem;
	if (typeof paired === 'number') return paired;
	if (Array.isArray(paired)) return (paired[0] as IPairedItemData | undefined)?.item;
	return (paired as IPairedItemData | undefined)?.item;
}

/** Looks `a.b` up in the parameters, as n8n's getNodeParameter does for collections. */
function lookup(
	params: Record<string, ParamValue>,
	name: string,
): { found: boolean; value: ParamValue } {
	if (name in params) return { found: true, value: params[name] };
	const [head, ...rest] = name.split('.');
	let value: unknown = params[head];
	for (const part of rest) {
		if (typeof value !== 'object' || value === null || !(part in value))
			return { found: false, value: undefined };
		value = (value as Record<string, unknown>)[part];
	}
	return { found: value !== undefined, value };
}

export function executeContext(options: ContextOptions): IExecuteFunctions {
	const items: INodeExecutionData[] = options.items.map((item) =>
		isExecutionData(item) ? item : { json: item },
	);
	const stored = storedParameters(options.params);
	const theNode = node(options.nodeName, options.nodeType, options.typeVersion ?? 1, stored);
	const defaults: INodeParameters = options.description
		? (NodeHelpers.getNodeParameters(
				options.description.properties,
				stored,
				true,
				false,
				theNode,
				options.description,
			) ?? {})
		: {};
	const upstream = options.upstream ?? [];
	/** What $(name).item answers for input item `itemIndex`: n8n follows pairedItem back. */
	const pairedItemIn = (itemIndex: number, name: string): INodeExecutionData => {
		if (!upstream.some((u) => u.name === name)) {
			throw new Error(`No path back to referenced node '${name}'`);
		}
		let index: number | undefined = itemIndex;
		for (let n = 0; n < upstream.length; n++) {
			const output = n === 0 ? items : (upstream[n].output ?? []);
			const item: INodeExecutionData | undefined = index === undefined ? undefined : output[index];
			if (!item) throw new Error(`Paired item data for item ${itemIndex} unavailable`);
			if (upstream[n].name === name) return item;
			index = firstPaired(item);
		}
		throw new Error(`No path back to referenced node '${name}'`);
	};
	const context = {
		helpers: binaryHelpers(options.binaryMode ?? 'default'),
		getInputData: () => items,
		getNode: () => theNode,
		getWorkflow: () => ({
			id: options.workflowId ?? 'wf-test',
			name: 'Test workflow',
			active: true,
		}),
		getExecutionId: () => options.executionId ?? 'exec-1',
		addExecutionHints: (...hints: NodeExecutionHint[]) => {
			options.hints?.push(...hints);
		},
		getExecutionContext: () => ({
			version: 1,
			establishedAt: 0,
			source: options.parentExecutionId ? 'integrated' : 'webhook',
			...(options.parentExecutionId ? { parentExecutionId: options.parentExecutionId } : {}),
		}),
		continueOnFail: () => options.continueOnFail ?? false,
		getMode: () => 'trigger',
		getCredentials: async () => options.credentials,
		getChildNodes: (
			nodeName: string,
			opts?: { includeNodeParameters?: boolean },
		): NodeTypeAndVersion[] =>
			nodeName === theNode.name
				? (options.downstream ?? []).map((d) => ({
						name: d.name,
						type: d.type,
						typeVersion: d.typeVersion ?? 1,
						disabled: d.disabled ?? false,
						...(opts?.includeNodeParameters ? { parameters: d.parameters ?? {} } : {}),
					}))
				: [],
		getInputSourceData: () => ({
			previousNode: upstream[0]?.name ?? '',
			previousNodeOutput: 0,
			previousNodeRun: 0,
		}),
		getParentNodes: (
			nodeName: string,
			opts?: { depth?: number; includeNodeParameters?: boolean },
		): NodeTypeAndVersion[] => {
			if ((options.downstream ?? []).some((d) => d.name === nodeName)) {
				// A node below this one: this node, then what lies above it.
				const above = [
					{
						name: theNode.name,
						type: theNode.type,
						typeVersion: theNode.typeVersion,
						disabled: false,
					},
					...upstream.map((u) => ({
						name: u.name,
						type: u.type,
						typeVersion: u.typeVersion ?? 1,
						disabled: u.disabled ?? false,
					})),
				];
				return opts?.depth === 1 ? above.slice(0, 1) : above;
			}
			const from =
				nodeName === theNode.name ? 0 : upstream.findIndex((u) => u.name === nodeName) + 1;
			if (from === 0 && nodeName !== theNode.name) return [];
			const depth = opts?.depth ?? -1;
			const chosen = upstream.slice(from, depth < 0 ? undefined : from + depth);
			return chosen.map((u) => ({
				name: u.name,
				type: u.type,
				typeVersion: u.typeVersion ?? 1,
				disabled: u.disabled ?? false,
				...(opts?.includeNodeParameters ? { parameters: u.parameters ?? {} } : {}),
			}));
		},
		getWorkflowDataProxy: (itemIndex: number) => ({
			$: (name: string) => ({
				get item() {
					return pairedItemIn(itemIndex, name);
				},
			}),
		}),
		getNodeParameter: (name: string, itemIndex: number, ...fallback: unknown[]) => {
			let { found, value } = lookup(options.params, name);
			if (!found && options.description) {
				({ found, value } = lookup(defaults as Record<string, ParamValue>, name));
				if (typeof value === 'string' && value.startsWith('=')) {
					throw new Error(`the mock cannot evaluate the default expression of "${name}"`);
				}
			}
			if (!found) {
				// Like n8n: a missing parameter without a (defined) fallback is an error.
				if (fallback[0] === undefined) throw new Error(`Could not get parameter "${name}"`);
				return fallback[0];
			}
			return typeof value === 'function'
				? (value as (i: number, item: INodeExecutionData) => unknown)(itemIndex, items[itemIndex])
				: value;
		},
	};
	return context as unknown as IExecuteFunctions;
}

export interface TriggerHarness {
	context: ITriggerFunctions;
	emitted: Array<{ item: INodeExecutionData; deduplicationKey?: string }>;
	errors: Error[];
	logs: Array<{ level: string; message: string }>;
}

export function triggerContext(options: {
	params: Record<string, ParamValue>;
	credentials: Record<string, unknown>;
	workflowId?: string;
	mode?: 'trigger' | 'manual';
}): TriggerHarness {
	const harness: TriggerHarness = {
		context: undefined as unknown as ITriggerFunctions,
		emitted: [],
		errors: [],
		logs: [],
	};
	const log = (level: string) => (message: string) => harness.logs.push({ level, message });
	const context = {
		getNode: () => node('Resume Trigger', 'n8n-nodes-durable.resumeTrigger'),
		getWorkflow: () => ({
			id: options.workflowId ?? 'wf-test',
			name: 'Test workflow',
			active: true,
		}),
		getMode: () => options.mode ?? 'trigger',
		getActivationMode: () => 'activate',
		getInstanceId: () => 'test-instance',
		getCredentials: async () => options.credentials,
		getNodeParameter: (name: string, fallback?: unknown) => {
			const { found, value } = lookup(options.params, name);
			return found ? value : fallback;
		},
		emit: (data: INodeExecutionData[][], _r?: unknown, _d?: unknown, deduplicationKey?: string) => {
			for (const item of data[0] ?? []) harness.emitted.push({ item, deduplicationKey });
		},
		emitError: (error: Error) => harness.errors.push(error),
		logger: { debug: log('debug'), info: log('info'), warn: log('warn'), error: log('error') },
	};
	harness.context = context as unknown as ITriggerFunctions;
	return harness;
}

/** Polls `check` until it is true or `ms` pass. */
export async function waitFor(check: () => boolean, ms: number, what: string): Promise<void> {
	const until = Date.now() + ms;
	while (Date.now() < until) {
		if (check()) return;
		await new Promise((r) => setTimeout(r, 50));
	}
	throw new Error(`timed out after ${ms} ms waiting for ${what}`);
}

/** A generated unary method as a promise, with the test client's token and deadline. */
export async function unary<Req, Res>(
	service: object,
	method: (
		request: Req,
		metadata: Metadata,
		options: Partial<CallOptions>,
		callback: (error: ServiceError | null, response: Res) => void,
	) => unknown,
	client: SidecarClient,
	request: Req,
): Promise<Res> {
	return await new Promise<Res>((resolve, reject) => {
		method.call(service, request, client.metadata(), client.options(), (error, response) =>
			error ? reject(error) : resolve(response),
		);
	});
}

/**
 * What the node after a failed item reads, as n8n 2.41 hands it on
 * (WorkflowExecute.handleNodeErrorOutput, then normalizeNodeErrors):
 * `errorOutput` true for "Continue (using error output)", false for
 * "Continue" (regular output). `routed`: whether the item leaves by the error
 * output; `json`: its JSON there. An item that carries an `error` object, or
 * whose JSON holds only `error`, `message` and `details`, is routed, merged
 * over the input item it pairs with; an item with an `error` object then has
 * its JSON replaced by `{ error: message }`.
 */
export function asN8nHandsOn(
	item: INodeExecutionData,
	inputs: INodeExecutionData[],
	errorOutput: boolean,
): { routed: boolean; json: IDataObject } {
	let json = item.json;
	const onlyError =
		item.json.error !== undefined &&
		Object.keys(item.json).every((key) => ['error', 'message', 'details'].includes(key));
	const routed = errorOutput && (item.error !== undefined || onlyError);
	if (routed) {
		const paired = Array.isArray(item.pairedItem) ? item.pairedItem[0] : item.pairedItem;
		const input = typeof paired === 'object' ? inputs[paired.item] : undefined;
		if (input) json = { ...input.json, ...item.json };
	}
	if (item.error !== undefined) json = { error: item.error.message };
	return { routed, json };
}
