/* eslint-disable n8n-nodes-base/node-filename-against-convention -- n8n's versioned layout: the node's description lives beside its class, which only assembles the versions (v1/, v2/) */
/** The Idempotency Guard's description: every version's parameters, and its outputs. */
import type { INodeParameters, INodeProperties, INodeTypeDescription } from 'n8n-workflow';

import {
	leaseSecondsOption,
	optionsCollection,
	versionedNodeDescription,
	withCustomJson,
} from '../../shared/descriptions';

export type Operation = 'claim' | 'recordResult' | 'release';

const V1 = { '@version': [1] };
const V2 = { '@version': [{ _cnd: { gte: 2 } }] };

/**
 * Claim has three outputs; the other operations pass items through one.
 * Self-contained: n8n evaluates it. Version 2 has short labels (n8n cuts long ones).
 */
export const configuredOutputs = (parameters: INodeParameters, version: number) => {
	if (parameters.operation === 'recordResult' || parameters.operation === 'release') {
		return [{ type: 'main', displayName: 'Done' }];
	}
	const v2 = Number(version) >= 2;
	return [
		{ type: 'main', displayName: 'First Run' },
		{ type: 'main', displayName: v2 ? 'Done Before' : 'Already Done' },
		{ type: 'main', displayName: v2 ? 'Busy' : 'In Progress' },
	];
};

/** Versions 1 and 2 of Claim keep a key equally long. */
const keepKeyForOption: INodeProperties = {
	displayName: 'Keep Key For (Seconds)',
	name: 'ttlSeconds',
	type: 'number',
	default: 0,
	typeOptions: { minValue: 0, maxValue: 31622400 },
	description:
		'How long the key (and its result) is remembered; after that the same key runs again. 0 uses the sidecar default (86400, one day).',
};

/** The Operation selector, naming Claim's outputs as each version shows them (configuredOutputs). */
function operationProperty(
	doneBefore: string,
	busy: string,
	show: typeof V1 | typeof V2,
): INodeProperties {
	return {
		displayName: 'Operation',
		name: 'operation',
		type: 'options',
		noDataExpression: true,
		default: 'claim',
		options: [
			{
				name: 'Claim',
				value: 'claim',
				description: `Claim the key before the side effect: First Run runs it, ${doneBefore} replays the stored result, ${busy} runs nothing`,
				action: 'Claim a key',
			},
			{
				name: 'Record Result',
				value: 'recordResult',
				description: "Store the side effect's result after it succeeded; later claims replay it",
				action: 'Record the result of a key',
			},
			{
				name: 'Release',
				value: 'release',
				description:
					'Give the key back after the side effect failed, so a retry can claim it again',
				action: 'Release a key',
			},
		],
		displayOptions: { show },
	};
}

/** Every parameter of every version; `@version` display rules choose (shared/versions.ts). */
export const idempotencyGuardProperties: INodeProperties[] = [
	operationProperty('Already Done', 'In Progress', V1),
	operationProperty('Done Before', 'Busy', V2),
	{
		displayName: 'Scope',
		name: 'scope',
		type: 'string',
		default: '={{ $json.idempotency?.scope ?? $workflow.id }}',
		required: true,
		description:
			"Groups keys, e.g. payment or email. The same key in two scopes is two keys. Defaults to this workflow's ID.",
		displayOptions: { show: V1 },
	},
	{
		displayName: 'Key',
		name: 'key',
		type: 'string',
		default: '={{ $json.idempotency?.key }}',
		required: true,
		placeholder: 'e.g. {{ $json.orderId }}-charge',
		description:
			'The key of the side effect: the same key never runs twice. Record Result and Release find it on the item as idempotency.key.',
		displayOptions: { show: V1 },
	},
	{
		displayName: 'Scope',
		name: 'scope',
		type: 'string',
		default: '',
		required: true,
		placeholder: 'e.g. payment',
		description:
			'Names the side effect, e.g. payment or confirmation-email. With the key it decides what runs once: the same key in two scopes is two side effects.',
		displayOptions: { show: { operation: ['claim'], ...V2 } },
	},
	{
		displayName: 'Key',
		name: 'key',
		type: 'string',
		default: '',
		placeholder: 'empty: the instance key',
		description:
			'Empty (usual): the instance key from the Resume Point, so the side effect runs once per instance. Set a key only when one instance runs this side effect several times (e.g. once per line item).',
		displayOptions: { show: { operation: ['claim'], ...V2 } },
	},
	{
		displayName: 'Scope',
		name: 'scope',
		type: 'string',
		default: '',
		placeholder: 'empty: as claimed before this node',
		description: 'Empty (usual): the scope the Claim before this node claimed for this item',
		displayOptions: { show: { operation: ['recordResult', 'release'], ...V2 } },
	},
	{
		displayName: 'Key',
		name: 'key',
		type: 'string',
		default: '',
		placeholder: 'empty: as claimed before this node',
		description: 'Empty (usual): the key the Claim before this node claimed for this item',
		displayOptions: { show: { operation: ['recordResult', 'release'], ...V2 } },
	},
	{
		displayName: 'Fingerprint From',
		name: 'fingerprintFrom',
		type: 'options',
		default: 'item',
		options: [
			{
				name: 'Whole Item',
				value: 'item',
				description: "The item's JSON: reusing the key with different data is an error",
			},
			{ name: 'Chosen Fields', value: 'fields', description: 'Only the listed fields' },
			{ name: 'Custom JSON', value: 'json', description: 'A JSON value you build' },
			{ name: 'Nothing', value: 'none', description: 'Do not compare payloads' },
		],
		description:
			'What the request fingerprint is computed from. A key claimed again with a different fingerprint is refused (FAILED_PRECONDITION), so a reused key cannot replay the wrong result.',
		displayOptions: { show: { operation: ['claim'], ...V1 } },
	},
	{
		displayName: 'Fingerprint From',
		name: 'fingerprintFrom',
		type: 'options',
		default: 'instance',
		options: [
			{ name: 'Chosen Fields', value: 'fields', description: 'Only the listed fields' },
			{ name: 'Custom JSON', value: 'json', description: 'A JSON value you build' },
			{
				name: 'Instance',
				value: 'instance',
				description:
					'The workflow and instance key: the same on the first and every resumed run; another instance reusing the key is refused',
			},
			{ name: 'Nothing', value: 'none', description: 'Do not compare payloads' },
			{
				name: 'Whole Item',
				value: 'item',
				description: "The item's JSON: reusing the key with different data is an error",
			},
		],
		description:
			'What the request fingerprint is computed from. A key claimed again with a different fingerprint is refused (FAILED_PRECONDITION), so a reused key cannot replay the wrong result.',
		displayOptions: { show: { operation: ['claim'], ...V2 } },
	},
	{
		displayName: 'Fields',
		name: 'fingerprintFields',
		type: 'string',
		default: '',
		required: true,
		placeholder: 'e.g. orderId, amount, currency',
		description: 'Comma-separated field names; dots reach into nested objects',
		displayOptions: { show: { operation: ['claim'], fingerprintFrom: ['fields'] } },
	},
	{
		displayName: 'Fingerprint (JSON)',
		name: 'fingerprintJson',
		type: 'json',
		default: '{}',
		displayOptions: { show: { operation: ['claim'], fingerprintFrom: ['json'] } },
	},
	{
		displayName: 'Attempt',
		name: 'attempt',
		type: 'number',
		default: 0,
		typeOptions: { minValue: 0 },
		description:
			'The attempt number the Claim returned. 0 reads it from the item (idempotency.attempt). A holder whose lease was taken over is refused, so it cannot overwrite a newer result.',
		displayOptions: { show: { operation: ['recordResult', 'release'] } },
	},
	...withCustomJson(
		{
			displayName: 'Result',
			name: 'resultWhat',
			type: 'options',
			default: 'item',
			options: [
				{
					name: 'Whole Item',
					value: 'item',
					description: "The item's JSON (the side effect's response)",
				},
				{ name: 'Custom JSON', value: 'json' },
			],
			description: 'What later duplicates get replayed',
			displayOptions: { show: { operation: ['recordResult'] } },
		},
		{ displayName: 'Result (JSON)', name: 'resultJson' },
	),
	{
		displayName: 'Reason',
		name: 'errorMessage',
		type: 'string',
		default: '',
		placeholder: 'e.g. {{ $json.error }}',
		description: 'Why the side effect failed (kept on the key)',
		displayOptions: { show: { operation: ['release'] } },
	},
	optionsCollection(
		[
			leaseSecondsOption(
				'How long the claim blocks others while the side effect runs. If this execution dies, the key can be claimed again after it. 0 uses the sidecar default (60).',
			),
			keepKeyForOption,
		],
		{ show: { operation: ['claim'], ...V1 } },
	),
	optionsCollection(
		[
			leaseSecondsOption(
				"How long the claim blocks other executions while the side effect runs. 0 (usual): the instance's lease, chosen on the Resume Point, so the claim and the instance lapse together (else the sidecar default, 60). When the instance is resumed after a crash, its new execution takes the claim over at once.",
			),
			keepKeyForOption,
			{
				displayName: 'Share Key Across Instances',
				name: 'shareKeyAcrossInstances',
				type: 'boolean',
				default: false,
				description:
					'Whether a Key you set means the same side effect in every instance (e.g. a customer ID, for a welcome email sent once per customer whatever the order). Off (version 2.1 and later): the Key counts within this instance only, so two orders may both charge line sku-1. Version 2 nodes share it unless this is added and off.',
			},
		],
		{ show: { operation: ['claim'], ...V2 } },
	),
];

/** The Idempotency Guard as a whole, versions 1, 2 and 2.1 in one list of parameters (each version's own description is cut from it in v1/ and v2/). */
export const idempotencyGuardDescription: INodeTypeDescription = versionedNodeDescription({
	displayName: 'Idempotency Guard',
	name: 'idempotencyGuard',
	group: ['transform'],
	version: [1, 2, 2.1],
	defaultVersion: 2.1,
	subtitle:
		'={{ (({ claim: "claim", recordResult: "record result", release: "release" })[$parameter["operation"]] || "claim") + (($parameter["scope"] || $parameter["key"]) ? ": " + [$parameter["scope"], $parameter["key"]].filter(Boolean).join(" / ") : "") }}',
	description:
		"Run a side effect (a charge, an email, a write to another system) at most once per key, however often the workflow is retried or re-delivered; a claim's lease is the instance's lease unless set here",
	outputs: `={{(${configuredOutputs})($parameter, $nodeVersion)}}`,
	properties: idempotencyGuardProperties,
});
