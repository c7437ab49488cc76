/* eslint-disable n8n-nodes-base/node-filename-against-convention -- n8n's versioned layout: the node's description lives beside its class, which only assembles the versions (v1/, v2/) */
/** The Resume Point's description: every version's parameters, and its outputs. */
import type {
	IDisplayOptions,
	INodeParameters,
	INodeProperties,
	INodeTypeDescription,
} from 'n8n-workflow';

import {
	instanceKeyProperty,
	leaseSecondsOption,
	optionsCollection,
	searchFieldsOption,
	versionedNodeDescription,
} from '../../shared/descriptions';

/**
 * The node's outputs from its parameters. Evaluated by n8n as an expression,
 * so it must be self-contained (no imports, no closures). Version 2 has short
 * labels, since n8n cuts long ones on the canvas.
 */
export const configuredOutputs = (parameters: INodeParameters, version: number) => {
	const v2 = Number(version) >= 2;
	const outputs: Array<{ type: 'main'; displayName: string }> = [
		{ type: 'main', displayName: 'Start' },
		{ type: 'main', displayName: 'Resume' },
		{ type: 'main', displayName: v2 ? 'Finished' : 'Completed' },
		{ type: 'main', displayName: v2 ? 'Busy' : 'In Progress' },
	];
	const steps = String(parameters.stepOutputs ?? '')
		.split(',')
		.map((s) => s.trim())
		.filter((s, i, all) => s.length > 0 && all.indexOf(s) === i);
	for (const step of steps) {
		outputs.push({ type: 'main', displayName: v2 ? step : `Resume at ${step}` });
	}
	if (parameters.versionMismatchOutput === true) {
		outputs.push({ type: 'main', displayName: v2 ? 'Old Version' : 'Version Mismatch' });
	}
	if (parameters.waitOutputs === true) {
		outputs.push({ type: 'main', displayName: 'Event' });
		outputs.push({ type: 'main', displayName: 'Timed Out' });
	}
	if (parameters.differentDelivery === 'output') {
		outputs.push({ type: 'main', displayName: 'Different' });
	}
	return outputs;
};

export type DifferentDelivery = 'refuse' | 'ignore' | 'output';

/**
 * What a known key with another delivery does. Version 2.1 refuses it (the
 * Idempotency-Key rule: a reused key with other parameters is an error);
 * version 2 ignored it, and keeps doing so unless the author chooses.
 */
function differentDelivery(
	fallback: DifferentDelivery,
	show: IDisplayOptions['show'],
): INodeProperties {
	return {
		displayName: 'Different Delivery',
		name: 'differentDelivery',
		type: 'options',
		noDataExpression: true,
		default: fallback,
		displayOptions: { show },
		options: [
			{
				name: 'Refuse',
				value: 'refuse',
				description:
					'The item fails with an error saying so (on the error output it carries details.httpStatus 422 for its sender); nothing changes',
			},
			{
				name: 'Ignore',
				value: 'ignore',
				description:
					'The delivery counts as a re-delivery of the first: the instance goes on with the start item it has',
			},
			{
				name: 'Route to Output',
				value: 'output',
				description:
					'The item leaves by an extra output, Different, with the stored start item under durable.startItem; nothing changes',
			},
		],
		description:
			'What happens when a Webhook delivery arrives under a key already in use with another body than the one that started its instance (headers do not count). A re-delivery of the same body is never different; items from other triggers (a Schedule Trigger re-reading an order with newer fields, a queue) are never checked.',
	};
}

/** Every parameter of every version; `@version` display rules choose (shared/versions.ts). */
export const resumePointProperties: INodeProperties[] = [
	{
		displayName:
			'Place this node right after the trigger. New keys leave by Start, running instances by Resume (with their saved state), finished ones by Completed, and keys another execution is working on right now by In Progress.',
		name: 'notice',
		type: 'notice',
		default: '',
		displayOptions: { show: { '@version': [1] } },
	},
	{
		displayName:
			'Place this node right after the trigger, and answer a webhook only after it. New keys leave by Start, running instances by Resume (start item and saved steps restored), finished ones by Finished; Busy runs nothing (another execution holds the instance).',
		name: 'notice',
		type: 'notice',
		default: '',
		displayOptions: { show: { '@version': [{ _cnd: { gte: 2 } }] } },
	},
	instanceKeyProperty(
		'The business key of the instance, such as an order ID. The same key always means the same instance. Items from a Resume Trigger carry their own key and ignore this.',
	),
	{
		displayName: 'Version Label',
		name: 'versionLabel',
		type: 'string',
		default: '',
		placeholder: 'e.g. 1.4.0',
		description:
			'Optional label of this workflow version, recorded on new instances. Change it when you change the workflow in a way running instances must not see.',
	},
	{
		displayName: 'Step Outputs',
		name: 'stepOutputs',
		type: 'string',
		default: '',
		noDataExpression: true,
		placeholder: 'e.g. payment-captured, shipped',
		description:
			'Comma-separated step names. A resumed instance whose last checkpoint has one of these step names leaves by its own output, so the flow continues at the right place without a Switch node.',
	},
	{
		displayName: 'Version Mismatch Output',
		name: 'versionMismatchOutput',
		type: 'boolean',
		default: false,
		noDataExpression: true,
		description:
			"Whether resumed instances bound to an older workflow version leave by a separate output, carrying the bound version's workflow JSON and this execution's lease, for an Execute Workflow node that runs that JSON (its Execute Workflow Trigger feeds its own Resume Point, which takes the lease over). Off, such an instance is refused (this node suspends it and fails saying so) instead of running this version's logic.",
	},
	{
		displayName: 'Wait Outputs',
		name: 'waitOutputs',
		type: 'boolean',
		default: false,
		noDataExpression: true,
		description:
			"Whether instances that waited (Durable Checkpoint: Wait for Event) leave by two more outputs: Event (the awaited event arrived; it is on the item under event) and Timed Out (the wait's timeout passed first). Without them such an instance fails this node.",
	},
	differentDelivery('refuse', { '@version': [{ _cnd: { gte: 2.1 } }] }),
	differentDelivery('ignore', { '@version': [2] }),
	optionsCollection([
		leaseSecondsOption(
			"The ceiling of the instance's lease: how long it lives after its last renewal when nobody vouches for it. While n8n runs the execution its process renews it (a long call is never resumed); a process that dies or an execution that ends frees it within seconds, whatever this says. Saves and claims after this node keep this length unless they set their own. 0 keeps the instance's length (a new instance: the sidecar default, DURABLE_LEASE_SECONDS, 1800).",
		),
		{
			displayName: 'Max Automatic Resumes',
			name: 'maxAutomaticResumes',
			type: 'number',
			default: 20,
			typeOptions: { minValue: 0, maxValue: 1000 },
			description:
				"Retry policy: how often the sidecar resumes an instance by itself (its execution died, or Fail Instance with Retry Per Policy) without progress; the next failure suspends it (dead-lettered) for an operator. A saved checkpoint resets the count. 0: no limit. Any retry option replaces the instance's policy; the ones not added take the sidecar's defaults (DURABLE_RETRY_*; out of the box 20 resumes, at once, the values these options start at).",
		},
		{
			displayName: 'Pinned Version',
			name: 'pinnedVersion',
			type: 'number',
			default: 0,
			typeOptions: { minValue: 0 },
			description:
				'Bind new instances to this registered version number instead of the current one (gray release). 0 binds the current version.',
		},
		{
			...searchFieldsOption,
			description: `${searchFieldsOption.description} Sent with each delivery (not with the Resume Trigger's items) and set when the instance is started or resumed.`,
		},
		{
			displayName: 'Register Current Version',
			name: 'registerVersion',
			type: 'boolean',
			default: false,
			description:
				"Whether the sidecar fetches this workflow from n8n's API and registers it as a version first (needs DURABLE_N8N_BASE_URL and DURABLE_N8N_API_KEY on the sidecar)",
		},
		{
			displayName: 'Restore State',
			name: 'stateMerge',
			type: 'options',
			default: 'merge',
			options: [
				{
					name: 'Merge Into Item',
					value: 'merge',
					description: 'Saved fields are added to the item; saved values win',
				},
				{
					name: 'Replace Item',
					value: 'replace',
					description: 'The item becomes the saved state',
				},
				{
					name: 'Under Durable.state',
					value: 'field',
					description: 'The item stays as it is; the saved state is put under durable.state',
				},
			],
			description: "How the last checkpoint's state is put into a resumed item",
		},
		{
			displayName: 'Retry Backoff (Seconds)',
			name: 'initialBackoffSeconds',
			type: 'number',
			default: 0,
			typeOptions: { minValue: 0, maxValue: 86400, numberPrecision: 3 },
			description:
				'Retry policy: the wait before the first automatic resume; it grows by Retry Backoff Multiplier with every further attempt. 0: at once.',
		},
		{
			displayName: 'Retry Backoff Cap (Seconds)',
			name: 'maxBackoffSeconds',
			type: 'number',
			default: 0,
			typeOptions: { minValue: 0, maxValue: 86400, numberPrecision: 3 },
			description: 'Retry policy: the longest wait between automatic resumes. 0: one day.',
		},
		{
			displayName: 'Retry Backoff Multiplier',
			name: 'backoffMultiplier',
			type: 'number',
			default: 2,
			typeOptions: { minValue: 1, maxValue: 10, numberPrecision: 2 },
			description: 'Retry policy: the growth factor of the wait per attempt',
		},
		{
			displayName: 'Retry Jitter',
			name: 'jitter',
			type: 'number',
			default: 0,
			typeOptions: { minValue: 0, maxValue: 1, numberPrecision: 2 },
			description:
				'Retry policy: the fraction (0 to 1) of each wait taken off at random, so many failed instances do not retry in step',
		},
	]),
];

/** All of the Resume Point: every parameter of 1, 2 and 2.1 under its `@version` rule, the source of the descriptions in v1/ and v2/. */
export const resumePointDescription: INodeTypeDescription = versionedNodeDescription({
	displayName: 'Resume Point',
	name: 'resumePoint',
	group: ['transform'],
	version: [1, 2, 2.1],
	defaultVersion: 2.1,
	subtitle: '={{ $parameter["instanceKey"] ? "key: " + $parameter["instanceKey"] : "" }}',
	description:
		"Start a long-running instance for a business key, or continue it from its last checkpoint after a crash or wake-up; holds the instance's lease, which later saves and claims keep",
	outputs: `={{(${configuredOutputs})($parameter, $nodeVersion)}}`,
	properties: resumePointProperties,
});
