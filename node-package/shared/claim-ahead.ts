/**
 * Claim ahead: the node right before an Idempotency Guard (a Durable Checkpoint
 * Save, or the Resume Point) claims the Guard's key in its own call to the
 * sidecar (SaveCheckpointItem.claim_next, StartOrResumeRequest.claim_on_start)
 * and puts the answer on the item; the Guard then routes the item without a
 * Claim call of its own. One round trip less per side effect, same guarantee:
 * the claim is the one the Guard would have made (same key, fingerprint,
 * holder, lease), made moments earlier by the same execution.
 *
 * Only the Guard's default form is claimed ahead: a version-2 Claim whose
 * Scope is plain text, whose Key is empty (the instance key), whose
 * fingerprint is the instance (or nothing) and whose options hold no
 * expression. Anything else, or any doubt about the wiring, and the Guard
 * claims for itself as before.
 */
import type {
	IDataObject,
	IExecuteFunctions,
	INodeExecutionData,
	INodeParameters,
	NodeTypeAndVersion,
} from 'n8n-workflow';

import { nodeOf } from './run-node';
import { DURABLE_FIELD, isObject, toJsonBytes } from './node-helpers';
import { ClaimOutcome, type ClaimItem, type IdempotencyKey } from './transport';
import type { InstanceRef } from './upstream';

/** Where the answer travels on the item: `durable.claimAhead`. */
export const CLAIM_AHEAD_FIELD = 'claimAhead';

/** The Guard a node claims ahead for, as its parameters say. */
export interface AheadGuard {
	/** The Guard's node name: only that Guard takes the answer. */
	guard: string;
	scope: string;
	fingerprintFrom: 'instance' | 'none';
	leaseSeconds: number;
	ttlSeconds: number;
}

/** What the Guard's answer is built from (the Guard's own small metadata, plus who made it). */
export interface AheadAnswer extends IDataObject {
	guard: string;
	by: string;
	execution: string;
	scope: string;
	key: string;
	attempt: number;
	derivedKey: string;
	outcome: string;
	result?: IDataObject | null;
}

const GUARD = 'idempotencyGuard';

function typeName(type: string): string {
	return type.slice(type.lastIndexOf('.') + 1);
}

function isExpression(value: unknown): boolean {
	return typeof value === 'string' && value.startsWith('=');
}

/** A number option: absent is 0; an expression or anything else disqualifies (undefined). */
function plainNumber(value: unknown): number | undefined {
	if (value === undefined || value === null || value === '') return 0;
	return typeof value === 'number' && Number.isInteger(value) && value >= 0 ? value : undefined;
}

/** The Guard's claim, when its parameters are the default form (see the module comment). */
export function aheadGuardOf(candidate: NodeTypeAndVersion): AheadGuard | undefined {
	if (typeName(candidate.type) !== GUARD || candidate.disabled || candidate.typeVersion < 2) {
		return undefined;
	}
	const p: INodeParameters = candidate.parameters ?? {};
	if ((p.operation ?? 'claim') !== 'claim') return undefined;
	if (typeof p.scope !== 'string' || isExpression(p.scope) || !p.scope.trim()) return undefined;
	if (p.key !== undefined && p.key !== null && p.key !== '') return undefined;
	const from = p.fingerprintFrom ?? 'instance';
	if (from !== 'instance' && from !== 'none') return undefined;
	const options: unknown = p.options ?? {};
	if (!isObject(options)) return undefined;
	const leaseSeconds = plainNumber(options.leaseSeconds);
	const ttlSeconds = plainNumber(options.ttlSeconds);
	if (leaseSeconds === undefined || ttlSeconds === undefined) return undefined;
	return { guard: candidate.name, scope: p.scope.trim(), fingerprintFrom: from, leaseSeconds, ttlSeconds };
}

/**
 * The one Guard this node can claim ahead for, found once per node run from
 * the workflow's connections: a Guard in the default form that this node
 * feeds directly and whose every ancestor is this node or one of this node's
 * ancestors (so its items can only have come through here or from before
 * here). `onlyChild`: the Guard must also be the only node this one feeds
 * directly (the Resume Point, whose outputs cannot be told apart here: its
 * Start output then leads to the Guard or nowhere).
 */
export function findAheadGuard(
	ctx: IExecuteFunctions,
	{ onlyChild }: { onlyChild: boolean },
): AheadGuard | undefined {
	if (typeof ctx.getChildNodes !== 'function' || typeof ctx.getParentNodes !== 'function') {
		return undefined;
	}
	try {
		const me = nodeOf(ctx).name;
		const below = ctx.getChildNodes(me, { includeNodeParameters: true });
		if (below.length === 0) return undefined;
		const directly = (name: string) =>
			ctx.getParentNodes(name, { depth: 1 }).some((parent) => parent.name === me);
		const guards = below.filter((c) => typeName(c.type) === GUARD && !c.disabled && directly(c.name));
		if (guards.length !== 1) return undefined;
		const found = aheadGuardOf(guards[0]);
		if (!found) return undefined;
		const allowed = new Set([me, ...ctx.getParentNodes(me).map((p) => p.name)]);
		if (!ctx.getParentNodes(found.guard).every((p) => allowed.has(p.name))) return undefined;
		if (onlyChild && below.some((c) => c.name !== found.guard && directly(c.name))) return undefined;
		return found;
	} catch {
		// An n8n without these lookups, or a graph it cannot walk: the Guard claims for itself.
		return undefined;
	}
}

/**
 * The claim the Guard makes for `instance` in its default form: shared by the
 * Guard and by the nodes claiming ahead for it, so both send the same claim.
 */
export function instanceClaim(
	{ scope, fingerprintFrom, leaseSeconds, ttlSeconds }: Omit<AheadGuard, 'guard'>,
	instance: InstanceRef,
	{ workflowId, executionId, key }: { workflowId: string; executionId: string; key?: string },
): ClaimItem {
	return {
		scope,
		key: key || instance.instanceKey,
		// Canonical JSON (sorted keys): the same on the first and every resumed run.
		payloadJson:
			fingerprintFrom === 'instance'
				? toJsonBytes({ instanceKey: instance.instanceKey, workflowId })
				: Buffer.alloc(0),
		fingerprint: '',
		// 0 means the instance's lease, so the claim lapses with the instance.
		leaseSeconds: leaseSeconds || instance.leaseSeconds || 0,
		ttlSeconds,
		holder: executionId,
		// Instance-aware: a resumed instance's execution takes over its dead one's claim.
		workflowId,
		instanceKey: instance.instanceKey,
	};
}

/** The outcome as the Guard names it on the item (acquired, duplicate, in_progress). */
export function outcomeName(outcome: ClaimOutcome): string {
	return (ClaimOutcome[outcome] ?? 'UNSPECIFIED').replace('CLAIM_OUTCOME_', '').toLowerCase();
}

/** The answer to put on the item under durable.claimAhead (undefined: no answer). */
export function aheadAnswer(
	target: AheadGuard,
	answer: { outcome: ClaimOutcome; key: IdempotencyKey | undefined } | undefined,
	{ by, execution }: { by: string; execution: string },
	decodeResult: (bytes: Uint8Array | undefined) => unknown,
): AheadAnswer | undefined {
	if (!answer?.key) return undefined;
	const out: AheadAnswer = {
		guard: target.guard,
		by,
		execution,
		scope: answer.key.scope,
		key: answer.key.key,
		attempt: answer.key.attempt,
		derivedKey: answer.key.derivedKey,
		outcome: outcomeName(answer.outcome),
	};
	if (answer.outcome === ClaimOutcome.CLAIM_OUTCOME_DUPLICATE) {
		out.result = (decodeResult(answer.key.resultJson) ?? null) as IDataObject | null;
	}
	return out;
}

/**
 * The answer claimed ahead for this Guard on this item, or undefined: it must
 * name this Guard and this execution, and the item must have come straight
 * from the node that claimed it.
 */
export function takeAheadAnswer(
	ctx: IExecuteFunctions,
	item: INodeExecutionData,
	executionId: string,
): AheadAnswer | undefined {
	const meta = item.json[DURABLE_FIELD];
	if (!isObject(meta)) return undefined;
	const answer = meta[CLAIM_AHEAD_FIELD];
	if (!isObject(answer)) return undefined;
	if (answer.guard !== nodeOf(ctx).name || answer.execution !== executionId) return undefined;
	if (typeof answer.scope !== 'string' || typeof answer.key !== 'string') return undefined;
	if (typeof answer.attempt !== 'number' || typeof answer.outcome !== 'string') return undefined;
	let previous: string | undefined;
	try {
		previous = ctx.getInputSourceData(0)?.previousNode;
	} catch {
		previous = undefined;
	}
	if (previous !== answer.by) return undefined;
	return answer as AheadAnswer;
}

/** The item's `durable` object without a claim-ahead answer (once used, it travels no further). */
export function withoutAheadAnswer(json: IDataObject): IDataObject {
	const meta = json[DURABLE_FIELD];
	if (!isObject(meta) || !(CLAIM_AHEAD_FIELD in meta)) return json;
	const rest = { ...meta };
	delete rest[CLAIM_AHEAD_FIELD];
	return { ...json, [DURABLE_FIELD]: rest };
}
