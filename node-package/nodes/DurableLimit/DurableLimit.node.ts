/** The Durable Limit: places per key, rate limits and debounce shared by every n8n process; one file per operation (actions/). */
import {
	NodeConnectionTypes,
	type INodeProperties,
	type INodeType,
	type INodeTypeDescription,
} from 'n8n-workflow';

import { sidecarNodeMethods } from '../../shared/credential-test';
import { optionsCollection } from '../../shared/descriptions';
import { router } from './actions/router';
import { configuredOutputs } from './outputs';

export { configuredOutputs };

const UNITS = [
	{ name: 'Seconds', value: 'seconds' },
	{ name: 'Minutes', value: 'minutes' },
	{ name: 'Hours', value: 'hours' },
];

const section = { show: { operation: ['enterSection'] } };
const rate = { show: { operation: ['rateLimit'] } };
// Enter Section's own rate (Rate Limit Too): the Rate Limit's fields, shown there too.
const sectionRate = { show: { operation: ['enterSection'], rateToo: [true] } };
const debounce = { show: { operation: ['debounce'] } };

const overLimit: INodeProperties = {
	displayName: 'Over the Limit',
	name: 'overLimit',
	type: 'options',
	noDataExpression: true,
	default: 'wait',
	displayOptions: { show: { operation: ['enterSection', 'rateLimit'] } },
	options: [
		{
			name: 'Wait',
			value: 'wait',
			description:
				'The item waits its turn in the sidecar, holding no execution, and comes back through the Resume Point (Resume Trigger) to this node when its turn comes',
		},
		{
			name: 'Leave by Busy',
			value: 'busy',
			description: 'The item leaves at once by an extra output, Busy; nothing is recorded',
		},
	],
	description: 'What an item over the limit does',
};

/** A rate's fields: the Rate Limit's, and Enter Section's with Rate Limit Too. */
function rateFields(displayOptions: INodeProperties['displayOptions']): INodeProperties[] {
	return [
		{
			displayName: 'Most Items',
			name: 'maxItems',
			type: 'number',
			default: 10,
			typeOptions: { minValue: 1, maxValue: 1000000 },
			displayOptions,
			description: 'How many items per key may pass in each period',
		},
		{
			displayName: 'Per',
			name: 'periodAmount',
			type: 'number',
			default: 1,
			typeOptions: { minValue: 0.001, numberPrecision: 3 },
			displayOptions,
			description:
				"The period, in the unit below (at most one day). Set it about 10 % longer than the API's own window: calls reach the API a little after their slots.",
		},
		{
			displayName: 'Unit',
			name: 'periodUnit',
			type: 'options',
			default: 'seconds',
			options: UNITS,
			displayOptions,
		},
	];
}

export class DurableLimit implements INodeType {
	description: INodeTypeDescription = {
		displayName: 'Durable Limit',
		name: 'durableLimit',
		icon: { light: 'file:durableLimit.svg', dark: 'file:durableLimit.dark.svg' },
		group: ['transform'],
		version: 1,
		subtitle:
			'={{ ({ enterSection: "enter ", leaveSection: "leave ", rateLimit: "rate limit ", debounce: "debounce " })[$parameter["operation"] || "enterSection"] + ($parameter["limitName"] || "") }}',
		description:
			'Limits shared by every n8n process and worker, per key: at most N items in a section at once, at most N per period, or one run per quiet burst. Items over a limit wait durably. Place after a Resume Point.',
		defaults: { name: 'Durable Limit' },
		usableAsTool: true,
		inputs: [NodeConnectionTypes.Main],
		outputs: `={{(${configuredOutputs})($parameter)}}`,
		credentials: [{ name: 'durableSidecarApi', required: true, testedBy: 'durableSidecarApiTest' }],
		properties: [
			{
				displayName: 'Operation',
				name: 'operation',
				type: 'options',
				noDataExpression: true,
				default: 'enterSection',
				options: [
					{
						name: 'Enter Section',
						value: 'enterSection',
						description:
							'At most N items at once between this node and a Leave Section with the same name and key (concurrency per key)',
						action: 'Enter a limited section',
					},
					{
						name: 'Leave Section',
						value: 'leaveSection',
						description: 'Give the place back; the next waiting item goes on at once',
						action: 'Leave a limited section',
					},
					{
						name: 'Rate Limit',
						value: 'rateLimit',
						description:
							'At most N items per period per key, spaced evenly (for a rate-limited API)',
						action: 'Rate limit items',
					},
					{
						name: 'Debounce',
						value: 'debounce',
						description:
							'Of a burst of items per key, only one goes on once the burst went quiet; the others leave by Debounced',
						action: 'Debounce items',
					},
				],
			},
			{
				displayName: 'Limit Name',
				name: 'limitName',
				type: 'string',
				default: '',
				required: true,
				placeholder: 'e.g. stripe-api',
				description:
					'Names the limit: every node, workflow and worker that uses the same name (and key) shares it. Enter and Leave Section of one section use the same name.',
			},
			{
				displayName: 'Key',
				name: 'limitKey',
				type: 'string',
				default: '',
				placeholder: 'e.g. {{ $json.body.customerId }}',
				description:
					'What the limit is counted per, such as a customer or chat ID. Empty: one count for all items.',
				displayOptions: { show: { operation: ['enterSection', 'rateLimit', 'debounce'] } },
			},
			{
				displayName:
					"Leave Section gives back every place the item's instance holds (or waits for) under this Limit Name, whatever its key, so it needs no Key: the item here is often a call's answer, not the one the key was read from.",
				name: 'leaveNotice',
				type: 'notice',
				default: '',
				displayOptions: { show: { operation: ['leaveSection'] } },
			},
			{
				displayName: 'Most at Once',
				name: 'maxHolders',
				type: 'number',
				default: 1,
				typeOptions: { minValue: 1, maxValue: 10000 },
				displayOptions: section,
				description: 'How many items per key may be in the section at the same time',
			},
			...rateFields(rate),
			overLimit,
			{
				displayName: 'Rate Limit Too',
				name: 'rateToo',
				type: 'boolean',
				default: false,
				displayOptions: section,
				description:
					'Whether an item given its place also takes a slot of a rate limit with the same name and key, in the same call: a section and a rate limit in one node, one sidecar call fewer than Enter Section followed by Rate Limit. Needs Over the Limit: Wait; slots one at a time, one item per instance (for a Burst, use a Rate Limit after this node).',
			},
			...rateFields(sectionRate),
			{
				displayName: 'Quiet For',
				name: 'quietAmount',
				type: 'number',
				default: 10,
				typeOptions: { minValue: 0.001, numberPrecision: 3 },
				displayOptions: debounce,
				description: 'A burst ends when no item with its key arrived for this long',
			},
			{
				displayName: 'Unit',
				name: 'quietUnit',
				type: 'options',
				default: 'seconds',
				options: UNITS,
				displayOptions: debounce,
			},
			{
				displayName: 'Keep',
				name: 'keep',
				type: 'options',
				noDataExpression: true,
				default: 'last',
				displayOptions: debounce,
				options: [
					{ name: 'Last Item', value: 'last', description: "The burst's newest item goes on" },
					{ name: 'First Item', value: 'first', description: "The burst's first item goes on" },
				],
			},
			optionsCollection(
				[
					{
						displayName: 'Burst',
						name: 'burst',
						type: 'number',
						default: 1,
						typeOptions: { minValue: 1 },
						displayOptions: { show: { '/operation': ['rateLimit'] } },
						description:
							'How many items may pass at once after a quiet spell (at most Most Items). 1: evenly spaced. Over any period at most Most Items + Burst - 1 pass.',
					},
					{
						displayName: 'Max Wait Inside the Execution (Seconds)',
						name: 'maxWaitSeconds',
						type: 'number',
						default: 10,
						typeOptions: { minValue: 0, maxValue: 60 },
						description:
							'An item whose place or slot comes within this long waits for it in the running execution; a later one is parked in the sidecar and comes back through the Resume Point. Only a run with one item waits in the execution: with several, items not let through now are parked.',
					},
				],
				{ show: { operation: ['enterSection', 'rateLimit'] } },
			),
			optionsCollection(
				[
					{
						displayName: 'Longest Burst',
						name: 'maxWaitAmount',
						type: 'number',
						default: 0,
						typeOptions: { minValue: 0, numberPrecision: 3 },
						description:
							'A burst ends at the latest this long after its first item, however busy (in the Quiet For unit; at most one day). 0: no maximum.',
					},
				],
				debounce,
			),
		],
	};

	methods = sidecarNodeMethods;

	execute = router;
}
