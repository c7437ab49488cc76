/**
 * n8n's own Wait node after a durable node. While an execution waits there,
 * it renews no lease: a wait longer than the instance's lease makes the
 * instance look crashed, and the Resume Trigger resumes it in a new execution
 * while n8n still waits, so the steps after the Wait run early (and once more
 * when the wait ends, answered by their keys). A Save or a Resume Point
 * before a Wait therefore takes the lease for the wait as well, and refuses a
 * wait no lease can cover.
 */
import {
	NodeOperationError,
	type IExecuteFunctions,
	type INode,
	type INodeParameters,
	type NodeTypeAndVersion,
} from 'n8n-workflow';

import { nodeOf } from './run-node';
import { typeName, UNIT_SECONDS } from './node-helpers';

/** A Wait node this node's items reach before any other durable node, and its longest wait. */
export interface WaitAhead {
	name: string;
	/** Why it has no bound (when seconds is undefined). */
	why: string;
	/** The longest it can wait, in seconds; undefined when nothing bounds it (a webhook, an expression). */
	seconds: number | undefined;
}

/** Why a Wait has no bound this node can read. */
export function unboundedWhy(wait: NodeTypeAndVersion): string {
	const resume = wait.parameters?.resume ?? 'timeInterval';
	return resume === 'webhook' || resume === 'form'
		? 'waits for a webhook call or a form with no Limit Wait Time'
		: 'takes its time from an expression, which this node cannot read ahead';
}

/** The longest the lease of one renewal can be (SaveCheckpointItem.lease_seconds). */
export const MAX_LEASE_SECONDS = 86400;

const DURABLE_TYPES = new Set([
	'resumePoint',
	'durableCheckpoint',
	'idempotencyGuard',
	'resumeTrigger',
	'durableInstance',
]);

function isWait(node: NodeTypeAndVersion): boolean {
	return !node.disabled && node.type === 'n8n-nodes-base.wait';
}

/** A stored number, or undefined for an expression or anything else. */
function plainNumber(value: unknown, fallback: number): number | undefined {
	if (value === undefined || value === null || value === '') return fallback;
	return typeof value === 'number' && Number.isFinite(value) && value >= 0 ? value : undefined;
}

function intervalSeconds(amount: unknown, unit: unknown, amountDefault: number, unitDefault: string) {
	const n = plainNumber(amount, amountDefault);
	const u = unit === undefined || unit === '' ? unitDefault : unit;
	const factor = typeof u === 'string' ? UNIT_SECONDS[u] : undefined;
	return n === undefined || factor === undefined ? undefined : Math.ceil(n * factor);
}

/** Seconds from now until a stored date, or undefined for an expression or no date. */
function untilSeconds(value: unknown, now: number): number | undefined {
	if (typeof value !== 'string' || !value || value.startsWith('=')) return undefined;
	const at = new Date(value).getTime();
	return Number.isNaN(at) ? undefined : Math.max(0, Math.ceil((at - now) / 1000));
}

/**
 * The longest a Wait node (n8n-nodes-base.wait, versions 1 and 1.1) can wait,
 * read from its stored parameters as n8n's defaults fill them in.
 */
export function waitSeconds(wait: NodeTypeAndVersion, now = Date.now()): number | undefined {
	const p: INodeParameters = wait.parameters ?? {};
	const v1 = wait.typeVersion < 1.1;
	const resume = p.resume ?? 'timeInterval';
	if (resume === 'timeInterval') {
		return intervalSeconds(p.amount, p.unit, v1 ? 1 : 5, v1 ? 'hours' : 'seconds');
	}
	if (resume === 'specificTime') return untilSeconds(p.dateTime, now);
	// On Webhook Call, On Form Submitted: bounded only by Limit Wait Time.
	if (p.limitWaitTime !== true) return undefined;
	if ((p.limitType ?? 'afterTimeInterval') === 'afterTimeInterval') {
		return intervalSeconds(p.resumeAmount, p.resumeUnit, 1, 'hours');
	}
	return untilSeconds(p.maxDateAndTime, now);
}

/**
 * The Wait nodes this node's items can reach with no other durable node in
 * between (each path is walked up from the Wait, stopping at durable nodes),
 * found once per node run from the workflow's connections.
 */
export function waitsAhead(ctx: IExecuteFunctions, now = Date.now()): WaitAhead[] {
	if (typeof ctx.getChildNodes !== 'function' || typeof ctx.getParentNodes !== 'function') return [];
	const me = nodeOf(ctx).name;
	let below: NodeTypeAndVersion[];
	try {
		below = ctx.getChildNodes(me, { includeNodeParameters: true });
	} catch {
		return [];
	}
	const found: WaitAhead[] = [];
	for (const wait of below.filter(isWait)) {
		const seen = new Set<string>([wait.name]);
		const queue = [wait.name];
		let reached = false;
		while (queue.length > 0 && !reached) {
			const name = queue.shift()!;
			for (const parent of ctx.getParentNodes(name, { depth: 1 })) {
				if (parent.name === me) {
					reached = true;
					break;
				}
				if (seen.has(parent.name) || DURABLE_TYPES.has(typeName(parent.type))) continue;
				seen.add(parent.name);
				queue.push(parent.name);
			}
		}
		if (reached) {
			const seconds = waitSeconds(wait, now);
			found.push({ name: wait.name, seconds, why: seconds === undefined ? unboundedWhy(wait) : '' });
		}
	}
	return found;
}

/** The longest of the waits, or the first one nothing bounds. */
export function longestWait(waits: WaitAhead[]): WaitAhead | undefined {
	let longest: WaitAhead | undefined;
	for (const wait of waits) {
		if (wait.seconds === undefined) return wait;
		if (!longest || wait.seconds > longest.seconds!) longest = wait;
	}
	return longest;
}

/** Seconds as an author reads them: 2 days, 3 h, 10 min, 45 s. */
export function spoken(seconds: number): string {
	if (seconds % 86400 === 0) return `${seconds / 86400} day${seconds === 86400 ? '' : 's'}`;
	if (seconds % 3600 === 0) return `${seconds / 3600} h`;
	if (seconds % 60 === 0) return `${seconds / 60} min`;
	return `${seconds} s`;
}

/**
 * The author's error for a Wait after `where` (this Save, this Resume Point)
 * that no lease can cover: one with no bound, or one whose `needed` lease
 * (the wait, with the instance's lease where it adds up) passes
 * MAX_LEASE_SECONDS. Undefined when the lease can cover it.
 */
export function uncoverableWait(
	node: INode,
	where: string,
	wait: WaitAhead,
	needed: number,
	itemIndex?: number,
): NodeOperationError | undefined {
	const instead = `Or set the Lease option of this ${where} to cover the wait yourself. Nothing was changed.`;
	if (wait.seconds === undefined) {
		return new NodeOperationError(node, `The Wait node '${wait.name}' after this ${where} ${wait.why}`, {
			itemIndex,
			description: `While n8n waits there, the instance renews no lease; once its lease lapses the Resume Trigger resumes it in another execution and the steps after the Wait run early. Wait for an event with Durable Checkpoint → Wait for Event (Durable Instance → Signal delivers it), or give the Wait a Limit Wait Time. ${instead}`,
		});
	}
	if (needed <= MAX_LEASE_SECONDS) return undefined;
	return new NodeOperationError(
		node,
		`The Wait node '${wait.name}' after this ${where} waits ${spoken(wait.seconds)}: ${needed > wait.seconds ? "with the instance's lease that is" : 'that is'} longer than a lease can be (1 day)`,
		{
			itemIndex,
			description: `Let the sidecar keep the time instead: a Durable Checkpoint Save, then Durable Checkpoint → Schedule Resume. The instance then holds no lease, survives restarts, and when it is due the Resume Trigger resumes it and the Resume Point sends it on by its last step. ${instead}`,
		},
	);
}
