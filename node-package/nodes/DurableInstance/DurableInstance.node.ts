import { createHash } from 'crypto';
import {
	NodeConnectionTypes,
	NodeOperationError,
	type IDataObject,
	type IExecuteFunctions,
	type INodeExecutionData,
	type INodeType,
	type INodeTypeDescription,
} from 'n8n-workflow';

import { businessKey } from '../../shared/door';
import { perItem, type NodeError } from '../../shared/batch';
import { testSidecarCredential } from '../../shared/credential-test';
import { GrpcStatus } from '../../shared/errors';
import {
	asNodeError,
	errorItem,
	eventJson,
	executionIdOf,
	jsonParameter,
	runStateName,
	sidecarFor,
	toJsonBytes,
	userJson,
	workflowIdOf,
} from '../../shared/node-helpers';
import { InstanceStatus, SignalOutcome, type Instance } from '../../shared/transport';

type Operation = 'signal' | 'retry' | 'resume' | 'cancel';

/** Identifiers the sidecar takes are 1 to 255 characters. */
const MAX_ID = 255;

const SIGNAL_HINTS: Partial<Record<number, string>> = {
	[GrpcStatus.NOT_FOUND]:
		"No instance has this key in that workflow, and a signal never starts one. Check Workflow ID (the target workflow's ID, from its URL; empty means this workflow) and Instance Key (the key that workflow's Resume Point uses). A signal that may arrive before its instance exists can be routed with Continue On Fail and sent again later.",
	[GrpcStatus.FAILED_PRECONDITION]:
		'The instance has finished (completed, failed or cancelled) and takes no more events. Expect late events? Route them with Continue On Fail.',
};

const ACTION_HINTS: Partial<Record<number, string>> = {
	[GrpcStatus.NOT_FOUND]:
		"No instance has this key in that workflow. Check Workflow ID (the target workflow's ID; empty means this workflow) and Instance Key.",
	[GrpcStatus.FAILED_PRECONDITION]:
		'The instance is in a state that forbids this action: Retry takes suspended and failed instances; Resume takes suspended ones and running ones that wait (for an event, a wake-up or a retry backoff); Cancel takes any unfinished one.',
};

function statusName(inst: Instance | undefined): string {
	if (!inst) return 'unknown';
	return InstanceStatus[inst.status]?.replace('INSTANCE_STATUS_', '').toLowerCase() ?? 'unknown';
}

function outcomeName(outcome: SignalOutcome): string {
	return (SignalOutcome[outcome] ?? 'UNSPECIFIED').replace('SIGNAL_OUTCOME_', '').toLowerCase();
}

/** The instance as the action left it. */
function instanceJson(inst: Instance | undefined): IDataObject {
	if (!inst) return {};
	return {
		workflowId: inst.workflowId,
		instanceKey: inst.instanceKey,
		status: statusName(inst),
		runState: runStateName(inst),
		lastStep: inst.lastStep,
		attempt: inst.attempt,
		errorMessage: inst.errorMessage,
		lastError: inst.lastError,
	};
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

export class DurableInstance implements INodeType {
	description: INodeTypeDescription = {
		displayName: 'Durable Instance',
		name: 'durableInstance',
		icon: { light: 'file:durableInstance.svg', dark: 'file:durableInstance.dark.svg' },
		group: ['transform'],
		version: 1,
		subtitle:
			'={{ $parameter["operation"] === "signal" ? "signal: " + ($parameter["eventName"] || "(no event name)") : ({ retry: "retry instance", resume: "resume instance", cancel: "cancel instance" })[$parameter["operation"]] || "" }}',
		description:
			'Act on an instance by workflow and key from anywhere: send it a named event (its wait ends, or the event waits in its mailbox), or, as an operator, retry, resume or cancel it. Holds no lease.',
		defaults: { name: 'Durable Instance' },
		usableAsTool: true,
		inputs: [NodeConnectionTypes.Main],
		outputs: [NodeConnectionTypes.Main],
		credentials: [{ name: 'durableSidecarApi', required: true, testedBy: 'durableSidecarApiTest' }],
		properties: [
			{
				displayName: 'Operation',
				name: 'operation',
				type: 'options',
				noDataExpression: true,
				default: 'signal',
				options: [
					{
						name: 'Signal',
						value: 'signal',
						description:
							'Deliver a named event with a payload: the instance waiting for it continues; one that is not waiting yet keeps it for its next wait',
						action: 'Signal an instance',
					},
					{
						name: 'Retry',
						value: 'retry',
						description:
							'Run a suspended or failed instance again from its newest checkpoint (redrive)',
						action: 'Retry an instance',
					},
					{
						name: 'Resume',
						value: 'resume',
						description:
							'Resume a suspended instance, or one that waits for an event, a wake-up or a retry backoff, now',
						action: 'Resume an instance',
					},
					{
						name: 'Cancel',
						value: 'cancel',
						description: 'Stop an unfinished instance for good, with a reason',
						action: 'Cancel an instance',
					},
				],
			},
			{
				displayName: 'Workflow ID',
				name: 'workflowId',
				type: 'string',
				default: '',
				placeholder: 'e.g. durableOrderTracking',
				description:
					'The ID of the workflow the instance belongs to (in its URL: /workflow/&lt;ID&gt;). Empty: this workflow.',
			},
			{
				displayName: 'Instance Key',
				name: 'instanceKey',
				type: 'string',
				default: '',
				required: true,
				placeholder: 'e.g. {{ $json.body.orderId }}',
				description: "The business key of the instance, as that workflow's Resume Point gives it",
			},
			{
				displayName: 'Event Name',
				name: 'eventName',
				type: 'string',
				default: '',
				required: true,
				placeholder: 'e.g. delivered',
				description: 'The name the instance waits for (Durable Checkpoint: Wait for Event)',
				displayOptions: { show: { operation: ['signal'] } },
			},
			{
				displayName: 'Payload',
				name: 'payloadFrom',
				type: 'options',
				default: 'json',
				options: [
					{
						name: 'Custom JSON',
						value: 'json',
						description: 'A JSON value built with an expression',
					},
					{
						name: 'Whole Item',
						value: 'item',
						description: 'The item as it is (a webhook item holds headers, query and body)',
					},
					{ name: 'None', value: 'none' },
				],
				description: 'What the waiting instance gets as event.payload',
				displayOptions: { show: { operation: ['signal'] } },
			},
			{
				displayName: 'Payload (JSON)',
				name: 'payloadJson',
				type: 'json',
				default: '{}',
				placeholder: 'e.g. {{ JSON.stringify($json.body) }}',
				displayOptions: { show: { operation: ['signal'], payloadFrom: ['json'] } },
			},
			{
				displayName: 'Deduplication ID',
				name: 'dedupeId',
				type: 'string',
				default: '',
				placeholder: 'e.g. {{ $json.body.eventId }}',
				description:
					"The sender's ID of this event: a second signal with the same ID to the same instance delivers nothing (answer: duplicate). Empty: this execution, node and item, so only a repeat within this execution is a duplicate. Give the sender's own event or delivery ID so a re-delivered webhook is delivered once.",
				displayOptions: { show: { operation: ['signal'] } },
			},
			{
				displayName: 'Reason',
				name: 'reason',
				type: 'string',
				default: '',
				required: true,
				placeholder: 'e.g. payment provider fixed, see ticket 4711',
				description: "Why (kept in the instance's audit trail, up to 4096 characters)",
				displayOptions: { show: { operation: ['retry', 'resume', 'cancel'] } },
			},
			{
				displayName: 'Options',
				name: 'options',
				type: 'collection',
				placeholder: 'Add Option',
				default: {},
				displayOptions: { show: { operation: ['signal'] } },
				options: [
					{
						displayName: 'Sender',
						name: 'sender',
						type: 'string',
						default: '',
						placeholder: 'e.g. carrier-webhook',
						description:
							'Who sends, recorded on the event and in the audit trail. Empty: this workflow and execution.',
					},
				],
			},
			{
				displayName: 'Options',
				name: 'options',
				type: 'collection',
				placeholder: 'Add Option',
				default: {},
				displayOptions: { show: { operation: ['retry', 'resume', 'cancel'] } },
				options: [
					{
						displayName: 'Actor',
						name: 'actor',
						type: 'string',
						default: '',
						placeholder: 'e.g. ana@example.com',
						description:
							'Who acts, recorded in the audit trail. Empty: this workflow and execution.',
					},
				],
			},
		],
	};

	methods = {
		credentialTest: {
			durableSidecarApiTest: testSidecarCredential,
		},
	};

	async execute(this: IExecuteFunctions): Promise<INodeExecutionData[][]> {
		const items = this.getInputData();
		if (items.length === 0) return [[]];
		const node = this.getNode();
		const operation = this.getNodeParameter('operation', 0) as Operation;
		const client = await sidecarFor(this);
		const thisWorkflow = workflowIdOf(this);
		const executionId = executionIdOf(this);
		const who = `n8n workflow ${thisWorkflow} execution ${executionId}`;

		const text = (name: string, i: number): string => {
			const raw: unknown = this.getNodeParameter(name, i, '');
			return typeof raw === 'string'
				? raw.trim()
				: raw === undefined || raw === null
					? ''
					: String(raw);
		};
		const required = (name: string, label: string, i: number, hint: string): string => {
			const value = text(name, i);
			if (!value) {
				throw new NodeOperationError(node, `${label} is empty for this item`, {
					itemIndex: i,
					description: hint,
				});
			}
			return value;
		};
		const target = (i: number) => ({
			workflowId: text('workflowId', i) || thisWorkflow,
			// Never String() of an object: that would name the instance "[object Object]".
			instanceKey: businessKey(
				node,
				this.getNodeParameter('instanceKey', i, ''),
				'Instance Key',
				i,
			),
		});

		// Parameters are read (and refused) before anything is sent.
		const prepared: Array<(() => Promise<IDataObject>) | NodeError> = items.map((item, i) => {
			try {
				const { workflowId, instanceKey } = target(i);
				if (operation === 'signal') {
					const eventName = required(
						'eventName',
						'Event Name',
						i,
						'Name the event, as the waiting Durable Checkpoint (Wait for Event) names it.',
					);
					const from = this.getNodeParameter('payloadFrom', i, 'json') as string;
					const payload =
						from === 'none'
							? undefined
							: from === 'item'
								? userJson(item)
								: jsonParameter(
										node,
										this.getNodeParameter('payloadJson', i, '{}'),
										'Payload (JSON)',
										i,
									);
					const dedupeId = text('dedupeId', i) || defaultDedupeId(executionId, node.name, i);
					if (dedupeId.length > MAX_ID) {
						throw new NodeOperationError(node, 'Deduplication ID is longer than 255 characters', {
							itemIndex: i,
						});
					}
					const sender = text('options.sender', i) || who;
					return async () => {
						const response = await client.signalInstance({
							workflowId,
							instanceKey,
							eventName,
							payloadJson: payload === undefined ? Buffer.alloc(0) : toJsonBytes(payload),
							dedupeId,
							sender,
						});
						const inst = response.instance;
						return {
							signal: {
								outcome: outcomeName(response.outcome),
								workflowId,
								instanceKey,
								eventName,
								dedupeId,
								instanceStatus: statusName(inst),
								runState: runStateName(inst),
								event: eventJson(response.event),
							},
						};
					};
				}
				const reason = required(
					'reason',
					'Reason',
					i,
					"Say why; the reason is kept in the instance's audit trail.",
				);
				const actor = text('options.actor', i) || who;
				const request = { workflowId, instanceKey, actor, reason };
				return async () => {
					const response =
						operation === 'retry'
							? await client.retryInstance(request)
							: operation === 'resume'
								? await client.resumeInstance(request)
								: await client.cancelInstance(request);
					return { instance: { action: operation, ...instanceJson(response.instance) } };
				};
			} catch (error) {
				return asNodeError(node, error, i);
			}
		});
		if (!this.continueOnFail()) {
			const problem = prepared.find((p) => typeof p !== 'function');
			if (problem) throw problem as NodeError;
		}

		const action =
			operation === 'signal'
				? 'Signalling the instance'
				: operation === 'retry'
					? 'Retrying the instance'
					: operation === 'resume'
						? 'Resuming the instance'
						: 'Cancelling the instance';
		const settled = await perItem(
			this,
			client,
			action,
			items.length,
			async (i) => {
				const call = prepared[i];
				if (typeof call !== 'function') throw call;
				return await call();
			},
			8,
			operation === 'signal' ? SIGNAL_HINTS : ACTION_HINTS,
		);
		const out: INodeExecutionData[] = [];
		for (let i = 0; i < items.length; i++) {
			const result = settled[i];
			if (!result.ok) {
				if (!this.continueOnFail()) throw result.error;
				out.push(errorItem(items[i], result.error, i));
				continue;
			}
			out.push({
				json: { ...items[i].json, ...result.value },
				binary: items[i].binary,
				pairedItem: { item: i },
			});
		}
		return [out];
	}
}
