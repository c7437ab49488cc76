/**
 * A fingerprint of the workflow an execution runs, as a node sees it.
 *
 * n8n tells a node its workflow's id, name and active flag, not which version
 * of the workflow runs. The sidecar learns a published change by reading the
 * workflow from n8n's API, at most every DURABLE_N8N_SYNC_INTERVAL_SECONDS; an
 * order started in between would be bound to the previous version. The node
 * sends this fingerprint with its start: the sidecar compares it only with the
 * fingerprints it saw before, and reads n8n at once when it is new.
 *
 * It covers the node itself and every node before and after it (n8n's
 * getParentNodes and getChildNodes: name, type, type version, disabled and
 * parameters with their defaults), which is the logic an order that passes the
 * node runs. Sent only by executions of the published version (webhook and
 * trigger modes): a manual run in the editor runs the draft.
 */
import { createHash } from 'node:crypto';

import type { IExecuteFunctions, NodeTypeAndVersion } from 'n8n-workflow';

import { isObject } from './node-helpers';
import { nodeOf } from './run-node';

/** Execution modes that run a workflow's published version: webhooks, triggers (the Resume Trigger). */
const PUBLISHED_MODES: ReadonlySet<string> = new Set(['webhook', 'trigger']);

/** The hex SHA-256 fingerprint of the workflow around this node; '' when n8n cannot give it. */
export function workflowFingerprint(ctx: IExecuteFunctions): string {
	if (typeof ctx.getMode !== 'function' || !PUBLISHED_MODES.has(ctx.getMode())) return '';
	if (typeof ctx.getChildNodes !== 'function' || typeof ctx.getParentNodes !== 'function')
		return '';
	const me = nodeOf(ctx);
	const around: NodeTypeAndVersion[] = [
		{
			name: me.name,
			type: me.type,
			typeVersion: me.typeVersion,
			disabled: me.disabled ?? false,
			parameters: me.parameters,
		},
		...ctx.getParentNodes(me.name, { includeNodeParameters: true }),
		...ctx.getChildNodes(me.name, { includeNodeParameters: true }),
	];
	const nodes = around
		.map(({ name, type, typeVersion, disabled, parameters }) => ({
			name,
			type,
			typeVersion,
			disabled,
			parameters: parameters ?? null,
		}))
		.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
	return createHash('sha256').update(sortedJson(nodes)).digest('hex');
}

/** JSON with every object's keys in sorted order, so equal content gives equal text. */
function sortedJson(value: unknown): string {
	return JSON.stringify(value, (_key, v: unknown) =>
		isObject(v)
			? Object.fromEntries(
					Object.keys(v)
						.sort()
						.map((k) => [k, v[k]]),
				)
			: v,
	);
}
