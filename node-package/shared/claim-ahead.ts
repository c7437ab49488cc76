/**
 * Claim ahead: the node right before an Idempotency Guard (a Durable Checkpoint
 * Save, or the Resume Point), or before a chain of nodes that hand its items on
 * unchanged (Respond to Webhook, No Operation, an Edit Fields keeping every
 * field, a Durable Limit whose items wait: passesItemsOn), claims the Guard's key in its own call to the
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
import { DURABLE_FIELD, isObject, toJsonBytes, typeName } from './node-helpers';
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

/** n8n's own nodes that may stand between this node and the Guard (full type names: no look-alikes). */
const RESPOND_TO_WEBHOOK = 'n8n-nodes-base.respondToWebhook';
const NO_OP = 'n8n-nodes-base.noOp';
const SET = 'n8n-nodes-base.set';
/** n8n's nodes a side branch of the Resume Point may hold besides those (sideBranch). */
const STOP_AND_ERROR = 'n8n-nodes-base.stopAndError';
const EXECUTE_WORKFLOW = 'n8n-nodes-base.executeWorkflow';
const SIDE_BRANCH = new Set([NO_OP, RESPOND_TO_WEBHOOK, STOP_AND_ERROR, EXECUTE_WORKFLOW]);
/** Our Durable Limit: its Enter Section, Rate Limit and Leave Section hand items on (limitPassesItemsOn). */
const LIMIT = 'durableLimit';
const LIMIT_PASSES = ['enterSection', 'rateLimit', 'leaveSection'];
/** Edit Fields versions whose Include Other Input Fields and assignments are read below (3.3 added both). */
const SET_VERSIONS = [3.3, 3.4, 3.5];

/**
 * An Edit Fields (Set) node that hands each item on as the Guard reads it:
 * every input field kept (Include Other Input Fields on, Include All), one
 * item out per item in, paired to it (the node always pairs), and no field it
 * sets touches `durable`, where the Guard finds the instance and so its key.
 * Anything it cannot read for certain (an expression, JSON mode, a version
 * it does not know) disqualifies it.
 */
function setKeepsItems(p: INodeParameters, typeVersion: number): boolean {
	if (!SET_VERSIONS.includes(typeVersion)) return false;
	if ((p.mode ?? 'manual') !== 'manual') return false;
	if (p.duplicateItem !== undefined && p.duplicateItem !== false) return false;
	if (p.includeOtherFields !== true || (p.include ?? 'all') !== 'all') return false;
	const collection: unknown = p.assignments ?? {};
	if (!isObject(collection)) return false;
	const assignments: unknown = collection.assignments ?? [];
	if (!Array.isArray(assignments)) return false;
	return assignments.every((a: unknown) => isObject(a) && leavesDurableAlone(a.name));
}

/**
 * A field name Edit Fields sets without touching `durable`: plain words
 * joined by dots (with or without Support Dot Notation, the top-level field
 * it sets is then the first word or the whole name), the first not `durable`
 * in any case. Brackets, quotes, escapes and expressions can spell `durable`
 * in ways not worth reading: they disqualify.
 */
function leavesDurableAlone(name: unknown): boolean {
	if (typeof name !== 'string' || !/^[\w$ -]+(\.[\w$ -]+)*$/.test(name)) return false;
	return name.split('.')[0].trim().toLowerCase() !== DURABLE_FIELD;
}

/**
 * A node between this one and the Guard that hands every item on unchanged
 * as the Guard reads it (its `durable` field, or its pairing back to it): a
 * Respond to Webhook with one output (it answers the webhook and returns its
 * input items), a No Operation, or an Edit Fields that keeps the items
 * (setKeepsItems). A disabled node never counts (n8n hands on its input
 * items without pairing them anew).
 */
export function passesItemsOn(candidate: NodeTypeAndVersion): boolean {
	if (candidate.disabled) return false;
	const p: INodeParameters = candidate.parameters ?? {};
	if (typeName(candidate.type) === LIMIT) return limitPassesItemsOn(p);
	switch (candidate.type) {
		case NO_OP:
			return true;
		case RESPOND_TO_WEBHOOK:
			// 1.3, and 1.4+ with Enable Response Output, add a Response output the Guard may hang off.
			if (candidate.typeVersion === 1.3) return false;
			return p.enableResponseOutput === undefined || p.enableResponseOutput === false;
		case SET:
			return setKeepsItems(p, candidate.typeVersion);
		default:
			return false;
	}
}

/**
 * A Durable Limit whose items over the limit wait (Over the Limit: Wait, the default) on Enter Section,
 * Rate Limit or Leave Section: each item leaves by its only output as it came (with `limit` added and its
 * `durable` field as it was), now or after a wait inside the execution, or it is parked and comes back
 * in another execution, which claims for itself (the claim made ahead is then taken over, as one whose
 * execution died). Not Debounce (it routes items to a second output) nor Leave by Busy.
 */
function limitPassesItemsOn(p: INodeParameters): boolean {
	const operation = p.operation ?? 'enterSection';
	if (typeof operation !== 'string' || !LIMIT_PASSES.includes(operation)) return false;
	return operation === 'leaveSection' || (p.overLimit ?? 'wait') === 'wait';
}

/**
 * The one Guard this node can claim ahead for, found once per node run from
 * the workflow's connections: a Guard in the default form that this node
 * feeds directly, or through a chain of nodes that pass items on
 * (passesItemsOn), each fed by the one before only and feeding only the next,
 * and whose every ancestor is this node, that chain or one of this node's
 * ancestors (so its items can only have come through here or from before
 * here). `onlyChild`: the Guard (or the chain's first node) must also be the
 * only node this one feeds directly, but for No Operation nodes that lead
 * nowhere (the Resume Point, whose outputs cannot be told apart here: its
 * Start output then leads to the Guard or nowhere; the README wires Finished
 * and Busy to such a node when n8n answers with the last node).
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
		// Everything below this node is in `below` (getChildNodes gives every descendant).
		const fedBy = (name: string) => below.filter((c) => inputsOf(c.name).includes(name));
		// A No Operation leading nowhere runs nothing: a new instance miswired to end there
		// (Start into it) leaves only a claim its instance holds, as if its execution had
		// died right after the Guard claimed; the resumed execution takes the claim over.
		const endsHere = (c: NodeTypeAndVersion) =>
			c.type === NO_OP && !c.disabled && fedBy(c.name).length === 0;
		// A Guard this node feeds that is also fed by a node below this one continues the order after
		// a later step (the Resume Point's Resume and step outputs, README "A durable workflow in
		// version 2"): a new instance's item, which leaves by Start, reaches it only by that later
		// step, whose Save claims for it then. Chosen ahead it never is (the Guard it finds must be fed
		// by this node or nodes above it alone, below); it only no longer hides the Guard on Start.
		const beneath = new Set(below.map((c) => c.name));
		const continues = (c: NodeTypeAndVersion) =>
			inputsOf(c.name).some((p) => p !== me && beneath.has(p));
		// The door's refusal (README "The door": the error output into Respond to Webhook and Stop
		// and Error) and a hand-off to another workflow (the Old Version output into Execute Workflow)
		// run no node of this workflow after them: for a new instance, whose item leaves by Start,
		// they are like a No Operation leading nowhere. Every node of such a branch is one of those,
		// and each of its ends is a Stop and Error or an Execute Workflow (a Respond to Webhook that
		// leads nowhere may well be the Start's answer, and still counts as a node fed here).
		const sideBranch = (c: NodeTypeAndVersion, seen = new Set<string>()): boolean => {
			if (c.disabled || !SIDE_BRANCH.has(c.type) || seen.has(c.name)) return false;
			seen.add(c.name);
			const next = fedBy(c.name);
			if (next.length === 0) return c.type === STOP_AND_ERROR || c.type === EXECUTE_WORKFLOW;
			return next.every((n) => sideBranch(n, seen));
		};
		const children = fedBy(me).filter(
			(c) => !onlyChild || !(endsHere(c) || continues(c) || sideBranch(c)),
		);
		if (onlyChild && children.length !== 1) return undefined;
		/** The Guards this node reaches, each with the chain of pass-through nodes before it. */
		const guards: Array<{ node: NodeTypeAndVersion; chain: string[] }> = [];
		for (const child of children) {
			let current = child;
			const chain: string[] = [];
			while (typeName(current.type) !== GUARD) {
				if (!passesItemsOn(current) || chain.includes(current.name)) break;
				const feeder = chain.length ? chain[chain.length - 1] : me;
				const from = inputsOf(current.name);
				const next = fedBy(current.name);
				// Fed by the one before, and maybe by this node too (the Resume Point's Resume output
				// into the chain's node after Respond to Webhook: a resumed item, never claimed for).
				if (!from.includes(feeder) || from.some((name) => name !== feeder && name !== me)) break;
				if (next.length !== 1) break;
				chain.push(current.name);
				current = next[0];
			}
			if (typeName(current.type) === GUARD && !current.disabled)
				guards.push({ node: current, chain });
		}
		if (guards.length !== 1) return undefined;
		const [{ node, chain }] = guards;
		const found = aheadGuardOf(node);
		if (!found) return undefined;
		// Fed only by the last node on the way settles it without walking both ancestries.
		const feeder = chain.length ? chain[chain.length - 1] : me;
		if (!inputsOf(found.guard).every((name) => name === feeder)) {
			const allowed = new Set([me, ...chain, ...ctx.getParentNodes(me).map((p) => p.name)]);
			if (!ctx.getParentNodes(found.guard).every((p) => allowed.has(p.name))) return undefined;
		}
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
