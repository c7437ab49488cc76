/**
 * Description pieces several nodes share, each written once: the frame of the
 * versioned nodes' descriptions, the Instance Key and Event Name parameters,
 * an Options collection, the Lease (Seconds) option and the JSON field of a Custom JSON
 * choice. Each call returns new objects, so no two nodes share one.
 */
import { NodeConnectionTypes, type INodeProperties, type INodeTypeDescription } from 'n8n-workflow';

/** What a versioned node says itself; the rest of its description is the same for all of them. */
export type VersionedNodeParts = Pick<
	INodeTypeDescription,
	| 'displayName'
	| 'name'
	| 'group'
	| 'version'
	| 'defaultVersion'
	| 'subtitle'
	| 'description'
	| 'outputs'
	| 'properties'
>;

/**
 * The description of a versioned node (Resume Point, Durable Checkpoint,
 * Idempotency Guard): its icons named after it, its name as the default node
 * name, usable as a tool, one main input and the sidecar's credential.
 */
export function versionedNodeDescription(parts: VersionedNodeParts): INodeTypeDescription {
	return {
		displayName: parts.displayName,
		name: parts.name,
		icon: { light: `file:${parts.name}.svg`, dark: `file:${parts.name}.dark.svg` },
		group: parts.group,
		version: parts.version,
		defaultVersion: parts.defaultVersion,
		subtitle: parts.subtitle,
		description: parts.description,
		defaults: { name: parts.displayName },
		usableAsTool: true,
		inputs: [NodeConnectionTypes.Main],
		outputs: parts.outputs,
		credentials: [{ name: 'durableSidecarApi', required: true, testedBy: 'durableSidecarApiTest' }],
		properties: parts.properties,
	};
}

/** The business key of an instance, as a trigger's item carries it (Resume Point, Durable Instance). */
export function instanceKeyProperty(description: string): INodeProperties {
	return {
		displayName: 'Instance Key',
		name: 'instanceKey',
		type: 'string',
		default: '',
		required: true,
		placeholder: 'e.g. {{ $json.body.orderId }}',
		description,
	};
}

/** The name of an event an instance waits for (Durable Checkpoint) or is sent (Durable Instance). */
export function eventNameProperty(
	description: string,
	displayOptions: INodeProperties['displayOptions'],
): INodeProperties {
	return {
		displayName: 'Event Name',
		name: 'eventName',
		type: 'string',
		default: '',
		required: true,
		placeholder: 'e.g. delivered',
		description,
		displayOptions,
	};
}

/** A node's optional settings, in one collection; `displayOptions` when only some operations have them. */
export function optionsCollection(
	options: INodeProperties[],
	displayOptions?: INodeProperties['displayOptions'],
): INodeProperties {
	return {
		displayName: 'Options',
		name: 'options',
		type: 'collection',
		placeholder: 'Add Option',
		default: {},
		...(displayOptions ? { displayOptions } : {}),
		options,
	};
}

/** The lease option of a node that holds or renews a lease; `description` says whose and what 0 means. */
export function leaseSecondsOption(description: string): INodeProperties {
	return {
		displayName: 'Lease (Seconds)',
		name: 'leaseSeconds',
		type: 'number',
		default: 0,
		typeOptions: { minValue: 0, maxValue: 86400 },
		description,
	};
}

/**
 * A choice of what to send or store (`choice`, with a Custom JSON option of
 * value `json`) followed by the JSON field that option asks for, shown where
 * the choice is and only when it is Custom JSON.
 */
/** Search fields (a Resume Point's or a Save's option): what operators filter and sort instances by. */
export const searchFieldsOption: INodeProperties = {
	displayName: 'Search Fields',
	name: 'searchFields',
	type: 'json',
	default: '{}',
	placeholder:
		'e.g. {"customerId": "{{ $json.body.customerId }}", "amount": {{ $json.body.total }}}',
	description:
		'Named fields operators filter and sort this instance by (console, CLI, ListInstances): a JSON object of texts and numbers; null removes a field. At most 16 per instance; a name starts with a letter (then letters, digits, _ . -, up to 64 characters); a text is at most 256 characters. Set with the call, after it is checked: a bad field fails the item before anything is written.',
};

export function withCustomJson(
	choice: INodeProperties,
	field: { displayName: string; name: string; placeholder?: string },
): INodeProperties[] {
	return [
		choice,
		{
			displayName: field.displayName,
			name: field.name,
			type: 'json',
			default: '{}',
			...(field.placeholder ? { placeholder: field.placeholder } : {}),
			displayOptions: { show: { ...choice.displayOptions?.show, [choice.name]: ['json'] } },
		},
	];
}
