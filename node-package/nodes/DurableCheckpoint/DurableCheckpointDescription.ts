/* eslint-disable n8n-nodes-base/node-filename-against-convention -- n8n's versioned layout: the node's description lives beside its class, which only assembles the versions (v1/, v2/) */
/** The Durable Checkpoint's description: every version's parameters, and its output. */
import type { INodeParameters, INodeProperties, INodeTypeDescription } from 'n8n-workflow';

import {
	eventNameProperty,
	leaseSecondsOption,
	optionsCollection,
	searchFieldsOption,
	versionedNodeDescription,
	withCustomJson,
} from '../../shared/descriptions';

export type Operation = 'save' | 'complete' | 'fail' | 'scheduleResume' | 'awaitEvent';

/**
 * One output; Wait for Event labels it Received (only items whose event was
 * already in the mailbox leave; a parked instance ends the execution here).
 * Evaluated by n8n as an expression, so it must be self-contained.
 */
export const configuredOutputs = (parameters: INodeParameters) =>
	parameters.operation === 'awaitEvent' ? [{ type: 'main', displayName: 'Received' }] : ['main'];

const V1 = { '@version': [1] };
const V2 = { '@version': [{ _cnd: { gte: 2 } }] };

/** Versions 1 and 2 of Save fence on the same sequence. */
const expectedSequenceOption: INodeProperties = {
	displayName: 'Expected Sequence',
	name: 'expectedSequence',
	type: 'number',
	default: 0,
	description:
		"Refuse the save (ABORTED) unless this is the newest checkpoint's sequence, so an execution that lost the instance to another cannot overwrite its progress. 0 means no checkpoint yet.",
	hint: 'Usually {{ $json.durable.lastSequence }}, set by the Resume Point and each save',
};

/** Files go with the checkpoint unless the author turns it off (docs/files.md). */
const saveFilesOption: INodeProperties = {
	displayName: 'Save Files',
	name: 'saveFiles',
	type: 'boolean',
	default: true,
	description:
		"Whether the item's binary data (files: a downloaded PDF, an attachment) is saved with the checkpoint, so a resume gives the files back. Each file is stored once, however many checkpoints carry it.",
};

/**
 * The Operation selector. Each version names the Resume Point's outputs as
 * that version shows them (version 2: Finished, version 1: Completed).
 */
function operationProperty(finishedOutput: string, show: typeof V1 | typeof V2): INodeProperties {
	return {
		displayName: 'Operation',
		name: 'operation',
		type: 'options',
		noDataExpression: true,
		default: 'save',
		options: [
			{
				name: 'Complete Instance',
				value: 'complete',
				description: `Mark the instance finished; a re-delivered trigger then leaves the Resume Point by ${finishedOutput}`,
				action: 'Complete an instance',
			},
			{
				name: 'Fail Instance',
				value: 'fail',
				description: 'Mark the instance failed with a reason; it is not resumed again',
				action: 'Fail an instance',
			},
			{
				name: 'Save',
				value: 'save',
				description: 'Save the state after a step (and renew the instance lease)',
				action: 'Save a checkpoint',
			},
			{
				name: 'Schedule Resume',
				value: 'scheduleResume',
				description:
					'Wake the instance later (durably, surviving restarts) through the Resume Trigger; replaces long Wait nodes',
				action: 'Schedule a resume',
			},
			{
				name: 'Wait for Event',
				value: 'awaitEvent',
				description:
					'Park the instance (no lease, never stalled) until a Durable Instance node or the API signals the named event, with an optional timeout; replaces a Wait node on a webhook',
				action: 'Wait for an event',
			},
		],
		displayOptions: { show },
	};
}

/** Every parameter of every version; `@version` display rules choose (shared/versions.ts). */
export const durableCheckpointProperties: INodeProperties[] = [
	operationProperty('Completed', V1),
	operationProperty('Finished', V2),
	{
		displayName: 'Instance Key',
		name: 'instanceKey',
		type: 'string',
		default: '={{ $json.durable?.instanceKey }}',
		required: true,
		description:
			'The instance to act on. The Resume Point puts it on the item as durable.instanceKey.',
		hint: "If a node since the Resume Point replaced the item, use {{ $('Resume Point').item.json.durable.instanceKey }}",
		displayOptions: { show: V1 },
	},
	{
		displayName: 'Instance',
		name: 'instanceFrom',
		type: 'options',
		noDataExpression: true,
		default: 'resumePoint',
		options: [
			{
				name: 'From Resume Point',
				value: 'resumePoint',
				description:
					'The instance of the Resume Point this item came from (followed back through the nodes in between, even if they replaced the item)',
			},
			{ name: 'By Key', value: 'key', description: 'An instance key you give' },
		],
		displayOptions: { show: V2 },
	},
	{
		displayName: 'Instance Key',
		name: 'instanceKey',
		type: 'string',
		default: '',
		required: true,
		placeholder: 'e.g. {{ $json.orderId }}',
		description: "The business key of the instance, as on this workflow's Resume Point",
		displayOptions: { show: { ...V2, instanceFrom: ['key'] } },
	},
	{
		displayName: 'Step Name',
		name: 'stepName',
		type: 'string',
		default: '',
		required: true,
		placeholder: 'e.g. payment-captured',
		description:
			'Name of the step that has just finished. The Resume Point can route resumed instances by it (Step Outputs).',
		displayOptions: { show: { operation: ['save'] } },
	},
	{
		displayName: 'State to Save',
		name: 'saveWhat',
		type: 'options',
		default: 'item',
		options: [
			{
				name: 'Whole Item',
				value: 'item',
				description: 'All fields of the item, without the durable metadata',
			},
			{ name: 'Chosen Fields', value: 'fields', description: 'Only the fields you list' },
			{
				name: 'Custom JSON',
				value: 'json',
				description: 'A JSON value built with an expression',
			},
		],
		displayOptions: { show: { operation: ['save'], ...V1 } },
	},
	{
		displayName: 'State to Save',
		name: 'saveWhat',
		type: 'options',
		default: 'stepResult',
		options: [
			{
				name: 'Add Step Result',
				value: 'stepResult',
				description:
					"The item (the step's result, e.g. the HTTP response) is added to the instance's state under the step name; the state keeps the start item and every earlier step's result. After Done Before, the replayed result is saved.",
			},
			{
				name: 'Whole Item',
				value: 'item',
				description: 'The item, without the durable metadata, replaces the state',
			},
			{
				name: 'Chosen Fields',
				value: 'fields',
				description: 'Only the fields you list replace the state',
			},
			{
				name: 'Custom JSON',
				value: 'json',
				description: 'A JSON value built with an expression replaces the state',
			},
		],
		displayOptions: { show: { operation: ['save'], ...V2 } },
	},
	{
		displayName: 'Fields',
		name: 'fields',
		type: 'string',
		default: '',
		required: true,
		placeholder: 'e.g. orderId, payment.reference, customer.email',
		description: 'Comma-separated field names; dots reach into nested objects',
		displayOptions: { show: { operation: ['save'], saveWhat: ['fields'] } },
	},
	{
		displayName: 'State (JSON)',
		name: 'stateJson',
		type: 'json',
		default: '{}',
		required: true,
		displayOptions: { show: { operation: ['save'], saveWhat: ['json'] } },
	},
	...withCustomJson(
		{
			displayName: 'Result',
			name: 'resultWhat',
			type: 'options',
			default: 'none',
			options: [
				{ name: 'None', value: 'none' },
				{ name: 'Whole Item', value: 'item' },
				{ name: 'Custom JSON', value: 'json' },
			],
			description: "What to store as the instance's result",
			displayOptions: { show: { operation: ['complete'] } },
		},
		{ displayName: 'Result (JSON)', name: 'resultJson' },
	),
	{
		displayName: 'Reason',
		name: 'errorMessage',
		type: 'string',
		default: '',
		required: true,
		placeholder: 'e.g. payment declined',
		description: 'Why the instance failed (kept on the instance, up to 4096 characters)',
		displayOptions: { show: { operation: ['fail'] } },
	},
	eventNameProperty(
		'The event to wait for. A signal with this name sent before the instance got here is kept and consumed now (the item leaves by Received); otherwise the instance waits and the execution ends here.',
		{ show: { operation: ['awaitEvent'] } },
	),
	{
		displayName: 'Timeout',
		name: 'resumeWhen',
		type: 'options',
		default: 'never',
		options: [
			{ name: 'No Timeout', value: 'never' },
			{ name: 'After a Duration', value: 'after' },
			{ name: 'At a Time', value: 'at' },
		],
		description:
			'When to stop waiting: the Resume Trigger then hands the instance out and the Resume Point sends it to Timed Out (turn on its Wait Outputs)',
		displayOptions: { show: { operation: ['awaitEvent'] } },
	},
	{
		displayName: 'Resume',
		name: 'resumeWhen',
		type: 'options',
		default: 'after',
		options: [
			{ name: 'After a Duration', value: 'after' },
			{ name: 'At a Time', value: 'at' },
		],
		displayOptions: { show: { operation: ['scheduleResume'] } },
	},
	{
		displayName: 'Amount',
		name: 'amount',
		type: 'number',
		default: 1,
		typeOptions: { minValue: 0 },
		displayOptions: {
			show: { operation: ['scheduleResume', 'awaitEvent'], resumeWhen: ['after'] },
		},
	},
	{
		displayName: 'Unit',
		name: 'unit',
		type: 'options',
		default: 'hours',
		options: [
			{ name: 'Seconds', value: 'seconds' },
			{ name: 'Minutes', value: 'minutes' },
			{ name: 'Hours', value: 'hours' },
			{ name: 'Days', value: 'days' },
		],
		displayOptions: {
			show: { operation: ['scheduleResume', 'awaitEvent'], resumeWhen: ['after'] },
		},
	},
	{
		displayName: 'Date and Time',
		name: 'wakeAt',
		type: 'dateTime',
		default: '',
		required: true,
		description:
			'When to resume the instance (Schedule Resume; a past time resumes it at once) or when its wait times out (Wait for Event)',
		displayOptions: {
			show: { operation: ['scheduleResume', 'awaitEvent'], resumeWhen: ['at'] },
		},
	},
	{
		displayName:
			'Save a checkpoint before this node: when the wake-up is due, the Resume Trigger emits the instance and the Resume Point routes it by its last step.',
		name: 'scheduleNotice',
		type: 'notice',
		default: '',
		displayOptions: { show: { operation: ['scheduleResume'] } },
	},
	{
		displayName:
			"Save a checkpoint before this node, and connect that step's output on the Resume Point back to this node (a crash before the wait waits again). The awaited event reaches the Resume Point's Event output, a timeout its Timed Out output (turn on Wait Outputs there).",
		name: 'awaitNotice',
		type: 'notice',
		default: '',
		displayOptions: { show: { operation: ['awaitEvent'] } },
	},
	optionsCollection(
		[
			{
				displayName: 'Retry Per Policy',
				name: 'retry',
				type: 'boolean',
				default: false,
				description:
					"Whether the failure is retried under the instance's retry policy (Resume Point options) instead of being final: the instance is resumed after the backoff and suspended once the policy's automatic resumes are used up",
			},
		],
		{ show: { operation: ['fail'] } },
	),
	optionsCollection(
		[
			expectedSequenceOption,
			saveFilesOption,
			leaseSecondsOption(
				"The ceiling of the saved instance's lease for this execution (its n8n process dying or the execution failing frees it within seconds anyway). 0 keeps the instance's lease length (set on the Resume Point; else the sidecar default).",
			),
		],
		{ show: { operation: ['save'], ...V1 } },
	),
	optionsCollection(
		[
			{
				displayName: 'Complete Claimed Key',
				name: 'completeClaimedKey',
				type: 'boolean',
				default: true,
				description:
					'Whether the save also records the result of the idempotency key an Idempotency Guard (Claim, First Run) before this node claimed for the item, in the same transaction as the checkpoint, so a side effect needs no Record Result node: Claim → call → Save',
			},
			{
				displayName: 'Complete Instance',
				name: 'completeInstance',
				type: 'boolean',
				default: false,
				description:
					'Whether this save also completes the instance, in the same call and transaction: use it on the last Save instead of a separate Complete Instance node. The instance is then finished (no result stored), and a re-delivered trigger leaves the Resume Point by Finished.',
			},
			expectedSequenceOption,
			saveFilesOption,
			searchFieldsOption,
			leaseSecondsOption(
				"The save renews the instance's lease: the time this execution holds the instance before the Resume Trigger may take it as crashed. 0 renews it with the instance's lease length, chosen on the Resume Point. A value here changes the length for this renewal only.",
			),
		],
		{ show: { operation: ['save'], ...V2 } },
	),
];

/** What n8n is given for the Durable Checkpoint: the parameters of versions 1 and 2 together; v1/ and v2/ cut their own from it. */
export const durableCheckpointDescription: INodeTypeDescription = versionedNodeDescription({
	displayName: 'Durable Checkpoint',
	name: 'durableCheckpoint',
	group: ['transform'],
	version: [1, 2],
	defaultVersion: 2,
	subtitle:
		'={{ $parameter["operation"] === "save" ? "save: " + ($parameter["stepName"] || "(no step name)") : $parameter["operation"] === "awaitEvent" ? "wait for: " + ($parameter["eventName"] || "(no event name)") : ({ complete: "complete instance", fail: "fail instance", scheduleResume: "schedule resume" })[$parameter["operation"]] || "" }}',
	description:
		"Save the state after a step so the instance resumes here after a crash (each save renews the instance's lease, as long as chosen on the Resume Point); complete, fail, schedule a durable wake-up of an instance or park it until an event arrives",
	outputs: `={{(${configuredOutputs})($parameter)}}`,
	properties: durableCheckpointProperties,
});
