/** What every Durable Instance operation works with: the items, the client and how to read an item's target. */
import { NodeOperationError } from 'n8n-workflow';
import type { IDataObject, IExecuteFunctions, INode, INodeExecutionData } from 'n8n-workflow';

import { perItem, type NodeError } from '../../../shared/batch';
import { businessKey, refusedItem, type SenderStatuses } from '../../../shared/door';
import { asNodeError, executionIdOf, sidecarFor, workflowIdOf } from '../../../shared/node-helpers';
import type { SidecarClient } from '../../../shared/transport';

export type Operation = 'signal' | 'retry' | 'resume' | 'cancel';

export interface InstanceRun {
	node: INode;
	items: INodeExecutionData[];
	client: SidecarClient;
	executionId: string;
	/** Who acts, when the item does not say: this workflow and execution. */
	who: string;
	/** A text parameter for an item, trimmed. */
	text: (name: string, i: number) => string;
	/** A text parameter that must not be empty; `hint` says what to give. */
	required: (name: string, label: string, i: number, hint: string) => string;
	/** The instance an item acts on: Workflow ID (empty: this workflow) and Instance Key. */
	target: (i: number) => { workflowId: string; instanceKey: string };
}

/** One of the node's operations, on all items. */
export type InstanceOperation = (
	ctx: IExecuteFunctions,
	run: InstanceRun,
) => Promise<INodeExecutionData[][]>;

/** An item's call, prepared: what it puts on its output item. */
export type PreparedCall = () => Promise<IDataObject>;

export async function runOf(ctx: IExecuteFunctions): Promise<InstanceRun> {
	const node = ctx.getNode();
	const client = await sidecarFor(ctx);
	const thisWorkflow = workflowIdOf(ctx);
	const executionId = executionIdOf(ctx);
	const text = (name: string, i: number): string => {
		const raw: unknown = ctx.getNodeParameter(name, i, '');
		return typeof raw === 'string'
			? raw.trim()
			: raw === undefined || raw === null
				? ''
				: String(raw);
	};
	return {
		node,
		items: ctx.getInputData(),
		client,
		executionId,
		who: `n8n workflow ${thisWorkflow} execution ${executionId}`,
		text,
		required: (name, label, i, hint) => {
			const value = text(name, i);
			if (!value) {
				throw new NodeOperationError(node, `${label} is empty for this item`, {
					itemIndex: i,
					description: hint,
				});
			}
			return value;
		},
		target: (i) => ({
			workflowId: text('workflowId', i) || thisWorkflow,
			// Never String() of an object: that would name the instance "[object Object]".
			instanceKey: businessKey(node, ctx.getNodeParameter('instanceKey', i, ''), 'Instance Key', i),
		}),
	};
}

/**
 * Every item's parameters are read (and refused) by `prepare` before anything is sent; then
 * the calls, a few at a time. Each output item is the input item with what its call answered.
 * Under Continue On Fail a failed item is `error` and `details.httpStatus` (shared/door.ts):
 * what a Respond to Webhook on the error output answers a sender (a carrier's event), with
 * `statuses` for the sidecar codes this operation answers with a status of its own.
 */
export async function callPerItem(
	ctx: IExecuteFunctions,
	run: InstanceRun,
	action: string,
	hints: Partial<Record<number, string>>,
	prepare: (i: number) => PreparedCall,
	statuses: SenderStatuses = {},
): Promise<INodeExecutionData[][]> {
	const { node, items, client } = run;
	const prepared: Array<PreparedCall | NodeError> = items.map((_, i) => {
		try {
			return prepare(i);
		} catch (error) {
			return asNodeError(node, error, i);
		}
	});
	if (!ctx.continueOnFail()) {
		const problem = prepared.find((p) => typeof p !== 'function');
		if (problem) throw problem as NodeError;
	}
	const settled = await perItem(
		ctx,
		client,
		action,
		items.length,
		async (i) => {
			const call = prepared[i];
			if (typeof call !== 'function') throw call;
			return await call();
		},
		8,
		hints,
	);
	return [
		settled.map((result, i) => {
			if (result.ok) {
				return {
					json: { ...items[i].json, ...result.value },
					binary: items[i].binary,
					pairedItem: { item: i },
				};
			}
			if (!ctx.continueOnFail()) throw result.error;
			return refusedItem(result.error, i, statuses);
		}),
	];
}
