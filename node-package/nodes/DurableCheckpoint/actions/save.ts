/** The Save operation: a batch of checkpoints in one call, with their claims and completions. */
import {
	NodeOperationError,
	type IExecuteFunctions,
	type INode,
	type INodeExecutionData,
} from 'n8n-workflow';

import { findAheadGuard, instanceClaim, type AheadGuard } from '../../../shared/claim-ahead';
import { batched, type NodeError } from '../../../shared/batch';
import { longestWait, uncoverableWait, waitsAhead, type WaitAhead } from '../../../shared/waits';
import {
	asNodeError,
	errorItem,
	fieldList,
	jsonParameter,
	pickFields,
	toJsonBytes,
	userJson,
} from '../../../shared/node-helpers';
import {
	StateMode,
	type ClaimItem,
	type SaveCheckpointItem,
	type SidecarClient,
} from '../../../shared/transport';
import { parameterReader, type ClaimRef, nodeParameter } from '../../../shared/upstream';
import type { CheckpointRun } from './run';

/** The sidecar's default lease (DURABLE_LEASE_SECONDS), for an item that does not say its instance's. */
export const DEFAULT_LEASE_SECONDS = 300;

/** What a version's Save does differently. */
export interface SaveRules {
	/** What to Save when the parameter is not given. */
	defaultSaveWhat: string;
	/**
	 * Whether the save follows its instance (version 2): it completes the key claimed upstream,
	 * saves a step result into the stored state, keeps the instance's lease (a Wait node ahead
	 * included), claims ahead for the Guard after it and can complete the instance.
	 */
	followsInstance: boolean;
	/** The output item of a saved item. */
	outputItem: (saved: SavedItem) => INodeExecutionData;
}

/** One saved item, as the version's output item is built from it. */
export interface SavedItem {
	run: CheckpointRun;
	index: number;
	sent: PreparedSave;
	result: SaveCheckpointResult;
	/** The Idempotency Guard after this Save whose key it claimed ahead, if any. */
	ahead: AheadGuard | undefined;
}

export type SaveCheckpointResult = Awaited<
	ReturnType<SidecarClient['saveCheckpoints']>
>['results'][number];

/** What one item sends, and what its output item is built from. */
export interface PreparedSave {
	request: SaveCheckpointItem;
	/** The state sent (for REPLACE saves, the stored state). */
	state: unknown;
	/** The instance's lease length as the item knows it (0: unknown). */
	leaseSeconds: number;
}

/** Save: every item in one SaveCheckpoints call (chunked), one output item per input item. */
export async function saveCheckpoints(
	ctx: IExecuteFunctions,
	run: CheckpointRun,
	rules: SaveRules,
): Promise<INodeExecutionData[]> {
	const { node, items, client, upstream, targetAt } = run;
	const follows = rules.followsInstance;
	const out: INodeExecutionData[] = [];
	// Plain parameters are read once per run; expressions per item.
	const stepNameOf = parameterReader(ctx, 'stepName', '');
	const saveWhatOf = parameterReader(ctx, 'saveWhat', rules.defaultSaveWhat);
	const fieldsOf = parameterReader(ctx, 'fields', '');
	const leaseOf = parameterReader<number>(ctx, 'options.leaseSeconds', 0);
	// n8n treats an undefined fallback as "required": '' marks "option not added".
	const expectedOf = parameterReader<number | string>(ctx, 'options.expectedSequence', '');
	const completeClaimed =
		follows && (nodeParameter(ctx, 'options.completeClaimedKey', 0, true) as boolean);
	const completeInstanceOf = parameterReader<boolean>(ctx, 'options.completeInstance', false);
	// The Idempotency Guard right after this Save, whose key this call claims ahead.
	const ahead = follows ? findAheadGuard(ctx, { onlyChild: false }) : undefined;
	// An n8n Wait node after this Save; the renewal then covers the wait too (shared/waits).
	const wait = follows ? longestWait(waitsAhead(ctx)) : undefined;
	const claimedAhead = new Set<string>();

	const prepared = new Map<number, PreparedSave>();
	const problems = new Map<number, NodeError>();
	for (let i = 0; i < items.length; i++) {
		const item = items[i];
		try {
			const stepName = String(stepNameOf(i) ?? '').trim();
			if (!stepName) {
				throw new NodeOperationError(node, 'Step Name is empty', {
					itemIndex: i,
					description: 'Name the step that has just finished, e.g. payment-captured.',
				});
			}
			const saveWhat = saveWhatOf(i) as string;
			const claim: ClaimRef | undefined =
				follows && (completeClaimed || saveWhat === 'stepResult')
					? upstream.claim(i, item)
					: undefined;
			let state: unknown;
			if (saveWhat === 'stepResult') {
				// Done Before: the side effect ran earlier; its replayed result is the step's result.
				state =
					claim?.outcome === 'duplicate' ? (claim.result ?? null) : (userJson(item) as unknown);
			} else if (saveWhat === 'fields') {
				state = pickFields(userJson(item), fieldList(fieldsOf(i) as string));
			} else if (saveWhat === 'json') {
				state = jsonParameter(node, ctx.getNodeParameter('stateJson', i, '{}'), 'State (JSON)', i);
			} else {
				state = userJson(item);
			}
			const expected = expectedOf(i);
			const expectedSequence =
				expected === '' || expected === null || expected === undefined
					? undefined
					: Number(expected);
			if (expectedSequence !== undefined && !Number.isInteger(expectedSequence)) {
				throw new NodeOperationError(
					node,
					`Expected Sequence must be a whole number, got ${String(expected)}`,
					{ itemIndex: i },
				);
			}
			const completeKey =
				completeClaimed && claim?.outcome === 'acquired' && claim.attempt >= 1
					? {
							scope: claim.scope,
							key: claim.key,
							attempt: claim.attempt,
							// Empty: the key's result is the saved step result.
							resultJson: Buffer.alloc(0),
						}
					: undefined;
			const target = targetAt(i);
			const { workflowId, instanceKey } = target;
			const completeInstance = follows && completeInstanceOf(i) === true;
			const leaseSeconds = follows
				? ((upstream.instance(i, item) ?? upstream.callerInstance())?.leaseSeconds ?? 0)
				: 0;
			let claimNext: ClaimItem | undefined;
			if (ahead && !completeInstance) {
				// The instance as the Guard will find it on this Save's output item.
				claimNext = instanceClaim(
					ahead,
					{ workflowId, instanceKey, leaseSeconds },
					{ workflowId, executionId: target.executionId },
				);
				const id = JSON.stringify([claimNext.scope, claimNext.key]);
				if (claimedAhead.has(id)) claimNext = undefined;
				else claimedAhead.add(id);
			}
			prepared.set(i, {
				request: {
					workflowId,
					instanceKey,
					stepName,
					stateJson: toJsonBytes(state),
					executionId: target.executionId,
					nodeName: node.name,
					expectedSequence,
					// A completed instance holds no lease: nothing after it waits on one.
					leaseSeconds: completeInstance
						? leaseOf(i)
						: renewalFor(node, leaseOf(i), leaseSeconds, wait, i),
					stateMode: !follows
						? StateMode.STATE_MODE_UNSPECIFIED
						: saveWhat === 'stepResult'
							? StateMode.STATE_MODE_ADD_STEP_RESULT
							: StateMode.STATE_MODE_REPLACE,
					completeKey,
					// The last Save: the instance is completed in the same call (no Complete Instance node).
					completeInstance,
					claimNext,
				},
				state,
				leaseSeconds,
			});
		} catch (error) {
			problems.set(i, asNodeError(node, error, i));
		}
	}
	// Parameter problems are reported before anything is saved.
	if (problems.size > 0 && !ctx.continueOnFail()) throw problems.values().next().value as NodeError;
	completeOnLastItem(prepared);
	const indexes = [...prepared.keys()];
	const results = indexes.length
		? await batched(ctx, client, 'Saving the checkpoint', indexes, async (batch) => {
				const response = await client.saveCheckpoints({
					items: batch.map((i) => prepared.get(i)!.request),
				});
				return response.results;
			})
		: new Map<number, never>();
	for (let i = 0; i < items.length; i++) {
		const problem = problems.get(i);
		const result = results.get(i);
		const failure = problem ?? (result && !result.ok ? result.error : undefined);
		if (failure) {
			if (!ctx.continueOnFail()) throw failure;
			out.push(errorItem(items[i], failure, i));
			continue;
		}
		if (!result || !result.ok) continue;
		out.push(
			rules.outputItem({ run, index: i, sent: prepared.get(i)!, result: result.value, ahead }),
		);
	}
	return out;
}

/**
 * The lease this Save renews: its own Lease option when set (the author's
 * choice), else, when an n8n Wait node follows, the instance's lease plus the
 * longest wait, so the instance is not taken for crashed while n8n waits;
 * else 0 (the instance's own length). A wait no lease can cover is an error
 * before anything is saved.
 */
export function renewalFor(
	node: INode,
	option: number,
	instanceLease: number,
	wait: WaitAhead | undefined,
	itemIndex: number,
): number {
	if (option || !wait) return option;
	const lease = (instanceLease || DEFAULT_LEASE_SECONDS) + (wait.seconds ?? 0);
	const error = uncoverableWait(node, 'Save', wait, lease, itemIndex);
	if (error) throw error;
	return lease;
}

/**
 * Complete Instance on several items of one instance (its line items after a Split Out, say):
 * every item is saved, in item order, and the instance completes with its last one. The sidecar
 * refuses a completion before a later save to the same instance, which an author could only
 * avoid with an expression.
 */
export function completeOnLastItem(prepared: Map<number, PreparedSave>): void {
	const last = new Map<string, number>();
	for (const [i, { request }] of prepared) {
		if (request.completeInstance) last.set(request.instanceKey, i);
	}
	for (const [i, { request }] of prepared) {
		if (request.completeInstance && last.get(request.instanceKey) !== i) {
			request.completeInstance = false;
		}
	}
}
