/** The Durable Instance: signal an instance, or retry, resume or cancel it; one file per operation (actions/). */
import { NodeConnectionTypes, type INodeType, type INodeTypeDescription } from 'n8n-workflow';

import { sidecarNodeMethods } from '../../shared/credential-test';
import {
	eventNameProperty,
	instanceKeyProperty,
	optionsCollection,
	withCustomJson,
} from '../../shared/descriptions';
import { router } from './actions/router';

export { defaultDedupeId } from './actions/signal.operation';

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
			instanceKeyProperty(
				"The business key of the instance, as that workflow's Resume Point gives it",
			),
			eventNameProperty('The name the instance waits for (Durable Checkpoint: Wait for Event)', {
				show: { operation: ['signal'] },
			}),
			...withCustomJson(
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
					placeholder: 'e.g. {{ JSON.stringify($json.body) }}',
				},
			),
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
				displayName: 'Start If Absent',
				name: 'startIfAbsent',
				type: 'boolean',
				default: false,
				description:
					"Whether a signal for a key no instance has yet starts that instance, with the start item below and the event in its mailbox, in one step (signal-with-start): an event can then never arrive too early. The new instance is held for its delivery: the order's own webhook starts it at its Resume Point with the order's item (and the event waits in its mailbox); nothing runs on the start item unless an operator resumes the instance. Off: a signal never starts an instance (error: does not exist).",
				displayOptions: { show: { operation: ['signal'] } },
			},
			...withCustomJson(
				{
					displayName: 'Start Item',
					name: 'startItemFrom',
					type: 'options',
					default: 'item',
					options: [
						{
							name: 'Whole Item',
							value: 'item',
							description:
								"The item as it is, as the target workflow's Resume Point stores a delivery",
						},
						{
							name: 'Custom JSON',
							value: 'json',
							description: 'A JSON object built with an expression',
						},
					],
					description:
						'What the started instance holds until its delivery replaces it (what it runs with only if an operator resumes it before the delivery comes; ignored when the instance exists)',
					displayOptions: { show: { operation: ['signal'], startIfAbsent: [true] } },
				},
				{
					displayName: 'Start Item (JSON)',
					name: 'startItemJson',
					placeholder: 'e.g. {{ JSON.stringify($json.body) }}',
				},
			),
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
			optionsCollection(
				[
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
				{ show: { operation: ['signal'] } },
			),
			optionsCollection(
				[
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
				{ show: { operation: ['retry', 'resume', 'cancel'] } },
			),
		],
	};

	methods = sidecarNodeMethods;

	execute = router;
}
