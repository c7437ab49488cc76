/** Signal: an event for an instance's mailbox, delivered once per deduplication id. */
import { createHash } from 'crypto';
import {
	NodeOperationError,
	type IDataObject,
	type IExecuteFunctions,
	type INodeExecutionData,
} from 'n8n-workflow';

import { GrpcStatus } from '../../../shared/errors';
import {
	eventJson,
	jsonParameter,
	instanceStatusName,
	runStateName,
	toJsonBytes,
	userJson,
} from '../../../shared/node-helpers';
import { SignalOutcome } from '../../../shared/transport';
import { callPerItem, type InstanceRun, type PreparedCall } from './run';

/** Identifiers the sidecar takes are 1 to 255 characters. */
const MAX_ID = 255;

const SIGNAL_HINTS: Partial<Record<number, string>> = {
	[GrpcStatus.NOT_FOUND]:
		"No instance has this key in that workflow, and a signal starts one only with Start If Absent. Check Workflow ID (the target workflow's ID, from its URL; empty means this workflow) and Instance Key (the key that workflow's Resume Point uses). A signal that may arrive before its instance exists: turn on Start If Absent (signal-with-start).",
	[GrpcStatus.FAILED_PRECONDITION]:
		"The instance has finished (completed, failed or cancelled) and takes no more events. Expect late events? Set this node's On Error to Continue (using error output) and answer the sender from there with a Respond to Webhook whose code is {{ $json.details.httpStatus }} (409 here), as examples/carrier-webhook.json does.",
};

/**
 * What a sender is answered on the error output (details.httpStatus) for a
 * signal the sidecar refused: 409 for an instance that has finished (the
 * event can never be delivered: a sender stops re-delivering on a 4xx), 503
 * for an instance that does not exist (yet: the order may start after its
 * carrier's event, so the sender should deliver again; with Start If Absent
 * the event holds it instead). A key the item lacks is 400, the sidecar away
 * 503 (shared/door.ts).
 */
const SIGNAL_STATUSES = { NOT_FOUND: 503, FAILED_PRECONDITION: 409 } as const;

export async function execute(
	ctx: IExecuteFunctions,
	run: InstanceRun,
): Promise<INodeExecutionData[][]> {
	const { node, items, client, executionId, text, required, target } = run;
	const prepare = (i: number): PreparedCall => {
		const { workflowId, instanceKey } = target(i);
		const eventName = required(
			'eventName',
			'Event Name',
			i,
			'Name the event, as the waiting Durable Checkpoint (Wait for Event) names it.',
		);
		const from = ctx.getNodeParameter('payloadFrom', i, 'json') as string;
		const payload =
			from === 'none'
				? undefined
				: from === 'item'
					? userJson(items[i])
					: jsonParameter(node, ctx.getNodeParameter('payloadJson', i, '{}'), 'Payload (JSON)', i);
		const dedupeId = text('dedupeId', i) || defaultDedupeId(executionId, node.name, i);
		if (dedupeId.length > MAX_ID) {
			throw new NodeOperationError(node, 'Deduplication ID is longer than 255 characters', {
				itemIndex: i,
			});
		}
		const sender = text('options.sender', i) || run.who;
		const startIfAbsent = ctx.getNodeParameter('startIfAbsent', i, false) as boolean;
		const startItem = startIfAbsent ? startItemOf(ctx, run, i) : undefined;
		return async () => {
			const response = await client.signalInstance({
				workflowId,
				instanceKey,
				eventName,
				payloadJson: payload === undefined ? Buffer.alloc(0) : toJsonBytes(payload),
				dedupeId,
				sender,
				startIfAbsent,
				startItemJson: startItem === undefined ? Buffer.alloc(0) : toJsonBytes(startItem),
			});
			const inst = response.instance;
			return {
				signal: {
					outcome: outcomeName(response.outcome),
					workflowId,
					instanceKey,
					eventName,
					dedupeId,
					instanceStatus: instanceStatusName(inst),
					runState: runStateName(inst),
					event: eventJson(response.event),
				},
			};
		};
	};
	return await callPerItem(
		ctx,
		run,
		'Signalling the instance',
		SIGNAL_HINTS,
		prepare,
		SIGNAL_STATUSES,
	);
}

/** Signal-with-start's start item: the whole item, or a custom JSON object. */
function startItemOf(ctx: IExecuteFunctions, { node, items }: InstanceRun, i: number): IDataObject {
	if ((ctx.getNodeParameter('startItemFrom', i, 'item') as string) !== 'json')
		return userJson(items[i]);
	const value = jsonParameter(
		node,
		ctx.getNodeParameter('startItemJson', i, '{}'),
		'Start Item (JSON)',
		i,
	);
	if (value === null || typeof value !== 'object' || Array.isArray(value)) {
		throw new NodeOperationError(node, 'Start Item (JSON) must be a JSON object', {
			itemIndex: i,
			description:
				'The started instance runs with it as a delivery, like a webhook item: give an object such as {"orderId": "A-1"}.',
		});
	}
	return value as IDataObject;
}

function outcomeName(outcome: SignalOutcome): string {
	return (SignalOutcome[outcome] ?? 'UNSPECIFIED').replace('SIGNAL_OUTCOME_', '').toLowerCase();
}

/**
 * The default deduplication id: this execution, node and item. Repeating the
 * same execution (a node retry) signals once; a new execution (a re-delivered
 * webhook) is a new signal unless the author gives the sender's own id.
 */
export function defaultDedupeId(executionId: string, nodeName: string, itemIndex: number): string {
	const id = `n8n:${executionId}:${nodeName}:${itemIndex}`;
	if (id.length <= MAX_ID) return id;
	return `n8n:${executionId}:${createHash('sha256').update(`${nodeName}:${itemIndex}`).digest('hex')}`;
}
