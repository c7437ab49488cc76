/**
 * One description per node version, built from the node's full description.
 *
 * n8n resolves every parameter of every node against its description several
 * times per execution (each Workflow object it builds: three per webhook
 * execution in n8n 2.41, plus the check before running), and the work grows
 * with the number of properties and display conditions. A node whose one
 * description serves versions 1 and 2 makes n8n walk both versions'
 * properties, the ones `@version` hides included. Here each version gets a
 * description with only its own properties, the `@version` conditions decided
 * and removed. The node class extends n8n's VersionedNodeType, whose
 * nodeVersions are these descriptions (NodeVersion); it keeps its full
 * description too, so a workflow saved with version 1 resolves exactly the
 * parameters it did.
 */
import {
	VersionedNodeType,
	type IDisplayOptions,
	type IExecuteFunctions,
	type INodeExecutionData,
	type INodeProperties,
	type INodeType,
	type INodeTypeDescription,
	type IVersionedNodeType,
} from 'n8n-workflow';

import { sidecarNodeMethods } from './credential-test';

type Condition = NonNullable<IDisplayOptions['show']>[string];

/**
 * Whether `version` meets one `@version` rule, as n8n's checkConditions
 * decides it; undefined when the rule has a form not decided here (then the
 * property keeps it, and n8n decides).
 */
function versionMeets(rule: Condition, version: number): boolean | undefined {
	if (!Array.isArray(rule)) return undefined;
	let met = false;
	for (const condition of rule as unknown[]) {
		if (typeof condition === 'number') {
			met ||= condition === version;
			continue;
		}
		if (typeof condition !== 'object' || condition === null) return undefined;
		const cnd = (condition as { _cnd?: Record<string, unknown> })._cnd;
		if (!cnd || Object.keys(condition).length !== 1) return undefined;
		const entries = Object.entries(cnd);
		if (entries.length !== 1) return undefined;
		const [op, target] = entries[0];
		if (typeof target !== 'number') return undefined;
		switch (op) {
			case 'eq':
				met ||= version === target;
				break;
			case 'not':
				met ||= version !== target;
				break;
			case 'gte':
				met ||= version >= target;
				break;
			case 'lte':
				met ||= version <= target;
				break;
			case 'gt':
				met ||= version > target;
				break;
			case 'lt':
				met ||= version < target;
				break;
			default:
				return undefined;
		}
	}
	return met;
}

/**
 * `property` as version `version` sees it: undefined when `@version` hides it,
 * else the property without its decided `@version` rules.
 */
function propertyForVersion(
	property: INodeProperties,
	version: number,
): INodeProperties | undefined {
	const display = property.displayOptions;
	if (!display) return property;
	let show = display.show;
	let hide = display.hide;
	if (show && '@version' in show) {
		const met = versionMeets(show['@version'], version);
		if (met === false) return undefined;
		if (met === true) show = withoutVersion(show);
	}
	if (hide && '@version' in hide) {
		const met = versionMeets(hide['@version'], version);
		if (met === true) return undefined;
		if (met === false) hide = withoutVersion(hide);
	}
	if (show === display.show && hide === display.hide) return property;
	const out: INodeProperties = { ...property };
	const displayOptions: IDisplayOptions = { ...display };
	if (show) displayOptions.show = show;
	else delete displayOptions.show;
	if (hide) displayOptions.hide = hide;
	else delete displayOptions.hide;
	if (Object.keys(displayOptions).length) out.displayOptions = displayOptions;
	else delete out.displayOptions;
	return out;
}

/** A show or hide rule set without its `@version` rule; undefined when nothing else is left. */
function withoutVersion<T extends Record<string, unknown>>(rules: T): T | undefined {
	const rest = { ...rules };
	delete rest['@version'];
	return Object.keys(rest).length ? rest : undefined;
}

/** The properties version `version` has (nested options are left as they are). */
export function propertiesForVersion(
	properties: INodeProperties[],
	version: number,
): INodeProperties[] {
	const out: INodeProperties[] = [];
	for (const property of properties) {
		const kept = propertyForVersion(property, version);
		if (kept) out.push(kept);
	}
	return out;
}

/**
 * Version `version` of a node, as n8n loads it: the node's description (every
 * version, `@version` rules included: the one place a parameter is written)
 * cut to that version's properties, once when the node is loaded.
 */
export function describeVersion(full: INodeTypeDescription, version: number): INodeTypeDescription {
	return { ...full, version, properties: propertiesForVersion(full.properties, version) };
}

/**
 * One version of a node as n8n runs it (a member of a VersionedNodeType's
 * nodeVersions): its own description, with the node's one execute and methods.
 * Every version shares them: a workflow saved with any version runs the
 * router, which picks that version's operations.
 */
export class NodeVersion implements INodeType {
	constructor(
		readonly description: INodeTypeDescription,
		readonly execute: NonNullable<INodeType['execute']>,
		readonly methods: INodeType['methods'],
	) {}
}

/** A node's one execute, as the tests and n8n call it. */
type NodeExecute = (this: IExecuteFunctions) => Promise<INodeExecutionData[][]>;

/**
 * A node of several versions (n8n's VersionedNodeType) whose versions share
 * one execute and the sidecar credential test. It keeps the full description
 * (every version's parameters, `@version` rules included), which each
 * version's own is cut from; the execute and methods stay on it for callers
 * that hold the node itself rather than one of its versions.
 */
export class VersionedSidecarNode extends VersionedNodeType {
	description: INodeTypeDescription;

	readonly execute: NodeExecute;

	readonly methods = sidecarNodeMethods;

	constructor(
		description: INodeTypeDescription,
		execute: NodeExecute,
		nodeVersions: IVersionedNodeType['nodeVersions'],
	) {
		super(nodeVersions, description);
		this.description = description;
		this.execute = execute;
	}
}
