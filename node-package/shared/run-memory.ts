/**
 * What this n8n process remembers of earlier node runs, for the nodes after
 * them: what each Idempotency Guard put out, and which instances each
 * execution's Resume Point took. Bounded and expiring; a miss only sends the
 * lookup the slower way (Upstream's paired-item walk) or to the author's error.
 */
import type { INodeExecutionData } from 'n8n-workflow';

import { ExpiringMap } from './expiring-map';
import type { InstanceRef } from './refs';

/**
 * What each Idempotency Guard put out in this n8n process, per execution: how
 * often it ran and, when its one run routed exactly one item, that item (held
 * weakly: n8n's run data keeps it alive while the execution needs it). A node
 * whose every input comes straight from that Guard, or through nodes whose
 * only input is that Guard, can then read the Guard's answer without n8n's
 * paired-item walk, which builds a data proxy per node run (about 0.4 ms of
 * n8n CPU per Save in n8n 2.41, the largest cost of our nodes' own code).
 * Anything else (a second run, several items, a record that is gone) and the
 * walk decides as before.
 */
interface GuardRun {
	runs: number;
	item: WeakRef<INodeExecutionData> | undefined;
}
export const GUARD_RUNS_MAX = 10_000;
export const GUARD_RUNS_TTL_MS = 10 * 60 * 1000;
const guardRuns = new ExpiringMap<GuardRun>(GUARD_RUNS_MAX, GUARD_RUNS_TTL_MS);

function guardRunSlot(executionId: string, guard: string): string {
	return JSON.stringify([executionId, guard]);
}

/** Notes one run of the Guard `guard` in `executionId` and what its outputs hold (called by the Guard). */
export function noteGuardRun(
	executionId: string,
	guard: string,
	outputs: INodeExecutionData[][],
): void {
	const slot = guardRunSlot(executionId, guard);
	const before = guardRuns.get(slot);
	const all = outputs.flat();
	guardRuns.set(slot, {
		runs: (before?.runs ?? 0) + 1,
		item: !before && all.length === 1 ? new WeakRef(all[0]) : undefined,
	});
}

/** The Guard's one output item when it ran once with one item in this execution, else undefined (tests too). */
export function soleGuardItem(executionId: string, guard: string): INodeExecutionData | undefined {
	const entry = guardRuns.get(guardRunSlot(executionId, guard));
	return entry?.runs === 1 ? entry.item?.deref() : undefined;
}

/** Forgets every noted Guard run (tests). */
export function clearGuardRuns(): void {
	guardRuns.clear();
}

/**
 * The instances each execution's Resume Point took (started or resumed) in
 * this n8n process. A sub-workflow runs in its caller's process, so for an
 * item that came into it without the `durable` field (a Split Out at its
 * default, an Edit Fields node, drop it in the caller) the nodes there act on
 * the instance the calling execution took, when it took exactly one: any
 * durable work that execution hands on is that instance's. Kept as long as a
 * lease with a wait can last (a day), at most HELD_MAX executions: a miss (an
 * n8n restart since the Resume Point ran, say during a Wait node) leaves the
 * author's error, the execution fails, and the instance's next resume takes
 * it again here.
 */
export const HELD_MAX = 10_000;
export const HELD_TTL_MS = 24 * 60 * 60 * 1000;
const heldInstances = new ExpiringMap<InstanceRef[]>(HELD_MAX, HELD_TTL_MS);

/** Notes the instances the Resume Point of `executionId` took in this run (called by the Resume Point). */
export function noteHeldInstances(executionId: string, refs: InstanceRef[]): void {
	if (refs.length === 0) return;
	const held = [...(heldInstances.get(executionId) ?? [])];
	for (const ref of refs) {
		const i = held.findIndex(
			(h) => h.workflowId === ref.workflowId && h.instanceKey === ref.instanceKey,
		);
		if (i >= 0) held[i] = ref;
		else held.push(ref);
	}
	heldInstances.set(executionId, held);
}

/** The instances `executionId`'s Resume Point took in this process, [] when none is known. */
export function heldBy(executionId: string): InstanceRef[] {
	return heldInstances.get(executionId) ?? [];
}
