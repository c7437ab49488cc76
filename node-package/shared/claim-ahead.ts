/**
 * Claim ahead: the node right before an Idempotency Guard (a Durable Checkpoint
 * Save, or the Resume Point) claims the Guard's key in its own call to the
 * sidecar (SaveCheckpointItem.claim_next, StartOrResumeRequest.claim_on_start)
 * and keeps the answer for the Guard, which then routes the item without a
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
import type { IExecuteFunctions, INodeParameters, NodeTypeAndVersion } from 'n8n-workflow';

import { ExpiringMap } from './expiring-map';
import { nodeOf } from './run-node';
import { isObject, toJsonBytes, typeName } from './node-helpers';
import type { ClaimItem, ClaimResult } from './transport';
import type { InstanceRef } from './upstream';

/** The Guard a node claims ahead for, as its parameters say. */
export interface AheadGuard {
	/** The Guard's node name: only that Guard takes the answer. */
	guard: string;
	scope: string;
	fingerprintFrom: 'instance' | 'none';
	leaseSeconds: number;
	ttlSeconds: number;
}

/** The sidecar's answer to a claim made ahead: what the Guard's own Claim call would have returned. */
export type AheadAnswer = ClaimResult;

const GUARD = 'idempotencyGuard';

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
	return {
		guard: candidate.name,
		scope: p.scope.trim(),
		fingerprintFrom: from,
		leaseSeconds,
		ttlSeconds,
	};
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
		const inputs = new Map<string, string[]>();
		const inputsOf = (name: string): string[] => {
			let names = inputs.get(name);
			if (!names) {
				names = ctx.getParentNodes(name, { depth: 1 }).map((parent) => parent.name);
				inputs.set(name, names);
			}
			return names;
		};
		const directly = (name: string) => inputsOf(name).includes(me);
		const guards = below.filter(
			(c) => typeName(c.type) === GUARD && !c.disabled && directly(c.name),
		);
		if (guards.length !== 1) return undefined;
		const found = aheadGuardOf(guards[0]);
		if (!found) return undefined;
		// This node as the Guard's only input settles it without walking both ancestries.
		if (!inputsOf(found.guard).every((name) => name === me)) {
			const allowed = new Set([me, ...ctx.getParentNodes(me).map((p) => p.name)]);
			if (!ctx.getParentNodes(found.guard).every((p) => allowed.has(p.name))) return undefined;
		}
		if (onlyChild && below.some((c) => c.name !== found.guard && directly(c.name)))
			return undefined;
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

/**
 * Answers claimed ahead, waiting for their Guard. They stay in this process
 * (n8n runs a node and the one it feeds in the same process, one right after
 * the other) and never on the items, so n8n's execution record does not grow.
 * A Guard that finds none (another process, an n8n restart, an entry
 * dropped) claims for itself: a claim by the same execution is a retry and
 * gets the same answer back. Entries are taken once; the rest go after
 * AHEAD_TTL_MS or beyond AHEAD_MAX entries, oldest first.
 */
export const AHEAD_MAX = 10_000;
export const AHEAD_TTL_MS = 10 * 60 * 1000;
const answers = new ExpiringMap<AheadAnswer>(AHEAD_MAX, AHEAD_TTL_MS);

function slot(executionId: string, guard: string, scope: string, key: string): string {
	return JSON.stringify([executionId, guard, scope, key]);
}

/** Keeps the sidecar's answer to a claim made ahead for `target` (nothing when there is none). */
export function keepAheadAnswer(
	target: AheadGuard,
	executionId: string,
	answer: AheadAnswer | undefined,
): void {
	if (!answer?.key) return;
	answers.set(slot(executionId, target.guard, answer.key.scope, answer.key.key), answer);
}

/** The answer claimed ahead for this Guard, execution and key, taken (once), or undefined. */
export function takeAheadAnswer(
	guard: string,
	executionId: string,
	scope: string,
	key: string,
): AheadAnswer | undefined {
	return answers.take(slot(executionId, guard, scope, key));
}

/** How many answers wait (tests). */
export function aheadAnswersWaiting(): number {
	return answers.size;
}
