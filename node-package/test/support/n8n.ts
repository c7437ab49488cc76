/* eslint-disable @n8n/community-nodes/no-restricted-globals -- test code runs in Node, never inside n8n */
/**
 * The only mock in the suite: n8n's execute-functions interface, answering
 * parameters per item the way n8n does after resolving expressions.
 */
import type {
	IDataObject,
	IExecuteFunctions,
	INode,
	INodeExecutionData,
	ITriggerFunctions,
} from 'n8n-workflow';
import type { CallOptions, Metadata, ServiceError } from '@grpc/grpc-js';

import type { SidecarClient } from '../../shared/transport';

export type ParamValue = unknown | ((itemIndex: number, item: INodeExecutionData) => unknown);

export interface ContextOptions {
	items: Array<IDataObject | INodeExecutionData>;
	params: Record<string, ParamValue>;
	credentials: Record<string, unknown>;
	workflowId?: string;
	executionId?: string;
	continueOnFail?: boolean;
	nodeName?: string;
	nodeType?: string;
}

function isExecutionData(value: IDataObject | INodeExecutionData): value is INodeExecutionData {
	return typeof value.json === 'object' && value.json !== null && !Array.isArray(value.json);
}

export function node(name = 'Durable Node', type = 'n8n-nodes-durable.test'): INode {
	return { id: 'node-1', name, type, typeVersion: 1, position: [0, 0], parameters: {} };
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
	const theNode = node(options.nodeName, options.nodeType);
	const context = {
		getInputData: () => items,
		getNode: () => theNode,
		getWorkflow: () => ({
			id: options.workflowId ?? 'wf-test',
			name: 'Test workflow',
			active: true,
		}),
		getExecutionId: () => options.executionId ?? 'exec-1',
		continueOnFail: () => options.continueOnFail ?? false,
		getMode: () => 'trigger',
		getCredentials: async () => options.credentials,
		getNodeParameter: (name: string, itemIndex: number, ...fallback: unknown[]) => {
			const { found, value } = lookup(options.params, name);
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
