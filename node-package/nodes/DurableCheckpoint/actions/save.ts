/** The Save operation: a batch of checkpoints in one call, with their claims and completions. */
import { type IExecuteFunctions, type INode, type INodeExecutionData } from 'n8n-workflow';

import { findAheadGuard, instanceClaim, type AheadGuard } from '../../../shared/claim-ahead';
import { batched, type NodeError } from '../../../shared/batch';
import { longestWait, uncoverableWait, waitsAhead, type WaitAhead } from '../../../shared/waits';
import {
	asNodeError,
	callContext,
	failForSetup,
	fieldList,
	isLimitRefusal,
	jsonParameter,
	pickFields,
	searchFieldsOf,
	setupError,
	sidecarError,
	toJsonBytes,
	userJson,
} from '../../../shared/node-helpers';
import { refusedItem } from '../../../shared/door';
import {
	StateMode,
	type ClaimItem,
	type SaveCheckpointItem,
	type SidecarClient,
} from '../../../shared/transport';
import { parameterReader, type ClaimRef, nodeParameter } from '../../../shared/upstream';
import {
	fileRefsOf,
	hasFiles,
	refusedContent,
	uploadMissing,
	type FileContents,
} from '../../../shared/files';
import { failRefused } from './refused';
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

/** The parameters of one Save run: plain ones read once, expressions per item. */
interface SaveReaders {
	stepNameOf: (i: number) => unknown;
	saveWhatOf: (i: number) => unknown;
	fieldsOf: (i: number) => unknown;
	leaseOf: (i: number) => number;
	expectedOf: (i: number) => number | string;
	completeClaimed: boolean;
	completeInstanceOf: (i: number) => boolean;
	/** The Idempotency Guard right after this Save, whose key this call claims ahead. */
	ahead: AheadGuard | undefined;
	/** An n8n Wait node after this Save; the renewal then covers the wait too (shared/waits). */
	wait: WaitAhead | undefined;
	/** The Guard keys claimed ahead so far in this run: each once. */
	claimedAhead: Set<string>;
}

function readersOf(ctx: IExecuteFunctions, rules: SaveRules): SaveReaders {
	const follows = rules.followsInstance;
	return {
		stepNameOf: parameterReader(ctx, 'stepName', ''),
		saveWhatOf: parameterReader(ctx, 'saveWhat', rules.defaultSaveWhat),
		fieldsOf: parameterReader(ctx, 'fields', ''),
		leaseOf: parameterReader<number>(ctx, 'options.leaseSeconds', 0),
		// n8n treats an undefined fallback as "required": '' marks "option not added".
		expectedOf: parameterReader<number | string>(ctx, 'options.expectedSequence', ''),
		completeClaimed:
			follows && (nodeParameter(ctx, 'options.completeClaimedKey', 0, true) as boolean),
		completeInstanceOf: parameterReader<boolean>(ctx, 'options.completeInstance', false),
		ahead: follows ? findAheadGuard(ctx, { onlyChild: false }) : undefined,
		wait: follows ? longestWait(waitsAhead(ctx)) : undefined,
		claimedAhead: new Set<string>(),
	};
}

/** Save: every item in one SaveCheckpoints call (chunked), one output item per input item. */
export async function saveCheckpoints(
	ctx: IExecuteFunctions,
	run: CheckpointRun,
	rules: SaveRules,
): Promise<INodeExecutionData[]> {
	const { node, items, client } = run;
	const readers = readersOf(ctx, rules);
	const prepared = new Map<number, PreparedSave>();
	const problems = new Map<number, NodeError>();
	for (let i = 0; i < items.length; i++) {
		try {
			prepared.set(i, prepareSave(ctx, run, rules, readers, i));
		} catch (error) {
			problems.set(i, asNodeError(node, error, i));
		}
	}
	// Parameter problems are reported before anything is saved; a setup error fails its instance.
	if (problems.size > 0 && !ctx.continueOnFail()) {
		await failForSetup(client, node, problems, run.targetAt);
		throw problems.values().next().value as NodeError;
	}
	completeOnLastItem(prepared);
	await attachFiles(ctx, run, prepared, problems);
	const indexes = [...prepared.keys()];
	const results = indexes.length
		? await batched(ctx, client, 'Saving the checkpoint', indexes, async (batch) => {
				const response = await client.saveCheckpoints({
					items: batch.map((i) => prepared.get(i)!.request),
				});
				return response.results;
			}).catch(async (error: unknown) => {
				// Without Continue On Fail the first refused item fails the execution: a limit's
				// refusal fails its instance too (refused.ts), or every resume would be refused again.
				const at = isLimitRefusal(error)
					? (error.context.itemIndex as number | undefined)
					: undefined;
				const sent = at === undefined ? undefined : prepared.get(at);
				if (sent) await failRefused(run, [sent.request], error);
				throw error;
			})
		: new Map<number, never>();
	const out: INodeExecutionData[] = [];
	for (let i = 0; i < items.length; i++) {
		const result = results.get(i);
		const failure = problems.get(i) ?? (result && !result.ok ? result.error : undefined);
		if (failure) {
			if (!ctx.continueOnFail()) throw failure;
			// The error branch gets the item, and the instance is failed all the same (refused.ts).
			if (result && !result.ok) await failRefused(run, [prepared.get(i)!.request], failure);
			out.push(refusedItem(failure, i));
			continue;
		}
		if (!result || !result.ok) continue;
		const sent = prepared.get(i)!;
		out.push(rules.outputItem({ run, index: i, sent, result: result.value, ahead: readers.ahead }));
	}
	return out;
}

/**
 * The files (binary data) of the items to save: hashed, the contents the
 * sidecar lacks uploaded, and named in each item's request. Items without
 * binary data send nothing more and cost nothing more. A file that cannot be
 * uploaded (over a limit, say) fails its item's save before anything of it
 * is written.
 */
async function attachFiles(
	ctx: IExecuteFunctions,
	run: CheckpointRun,
	prepared: Map<number, PreparedSave>,
	problems: Map<number, NodeError>,
): Promise<void> {
	const { node, items, client } = run;
	const withFiles = [...prepared.keys()].filter((i) => hasFiles(items[i]));
	if (!withFiles.length || !(nodeParameter(ctx, 'options.saveFiles', 0, true) as boolean)) return;
	const contents: FileContents = new Map();
	for (const i of withFiles) {
		try {
			prepared.get(i)!.request.files = await fileRefsOf(ctx, items[i], contents);
		} catch (error) {
			if (!ctx.continueOnFail()) throw asNodeError(node, error, i);
			problems.set(i, asNodeError(node, error, i));
			prepared.delete(i);
		}
	}
	let failed: Map<string, unknown>;
	try {
		failed = await uploadMissing(client, contents, ctx.continueOnFail());
	} catch (error) {
		// Unknown content (StatFiles failed, say): every item with files failed alike.
		failed = new Map([[refusedContent(error) ?? '', error]]);
	}
	// Each item whose files hold a content that failed (every item with files when it is not known).
	const refused = new Map<number, NodeError>();
	for (const [sha256, error] of failed) {
		for (const i of withFiles) {
			const file = prepared.get(i)?.request.files.find((f) => !sha256 || f.sha256 === sha256);
			if (!file || refused.has(i)) continue;
			const named = file.fileName ? `'${file.fileName}' ` : '';
			const action = sha256
				? `Uploading file ${named}(binary property '${file.property}')`
				: 'Uploading the files to save';
			refused.set(i, sidecarError(node, error, callContext(client, action, i)));
		}
	}
	for (const [i, error] of refused) {
		await failRefused(run, [prepared.get(i)!.request], error);
	}
	const first = refused.values().next();
	if (!first.done && !ctx.continueOnFail()) throw first.value;
	for (const [i, error] of refused) {
		problems.set(i, error);
		prepared.delete(i);
	}
}

/** One item's save, or the error in its parameters. */
function prepareSave(
	ctx: IExecuteFunctions,
	run: CheckpointRun,
	rules: SaveRules,
	r: SaveReaders,
	i: number,
): PreparedSave {
	const { node, items, upstream } = run;
	const follows = rules.followsInstance;
	const item = items[i];
	const stepName = String(r.stepNameOf(i) ?? '').trim();
	if (!stepName) {
		throw setupError(
			node,
			'Step Name is empty',
			i,
			'Name the step that has just finished, e.g. payment-captured.',
		);
	}
	const saveWhat = r.saveWhatOf(i) as string;
	const claim: ClaimRef | undefined =
		follows && (r.completeClaimed || saveWhat === 'stepResult')
			? upstream.claim(i, item)
			: undefined;
	const state = stateOf(ctx, run, r, saveWhat, claim, i);
	const expectedSequence = expectedSequenceOf(run, r.expectedOf(i), i);
	const completeKey =
		r.completeClaimed && claim?.outcome === 'acquired' && claim.attempt >= 1
			? {
					scope: claim.scope,
					key: claim.key,
					attempt: claim.attempt,
					// Empty: the key's result is the saved step result.
					resultJson: Buffer.alloc(0),
				}
			: undefined;
	const target = run.targetAt(i);
	const completeInstance = follows && r.completeInstanceOf(i) === true;
	const leaseSeconds = follows
		? ((upstream.instance(i, item) ?? upstream.callerInstance())?.leaseSeconds ?? 0)
		: 0;
	const claimNext = completeInstance ? undefined : claimAhead(r, target, leaseSeconds);
	const request: SaveCheckpointItem = {
		workflowId: target.workflowId,
		instanceKey: target.instanceKey,
		stepName,
		stateJson: toJsonBytes(state),
		executionId: target.executionId,
		nodeName: node.name,
		expectedSequence,
		// A completed instance holds no lease: nothing after it waits on one.
		leaseSeconds: completeInstance
			? r.leaseOf(i)
			: renewalFor(node, r.leaseOf(i), leaseSeconds, r.wait, i),
		stateMode: !follows
			? StateMode.STATE_MODE_UNSPECIFIED
			: saveWhat === 'stepResult'
				? StateMode.STATE_MODE_ADD_STEP_RESULT
				: StateMode.STATE_MODE_REPLACE,
		completeKey,
		// The last Save: the instance is completed in the same call (no Complete Instance node).
		completeInstance,
		claimNext,
		searchFieldsJson: follows ? searchFieldsOf(ctx, node, i) : Buffer.alloc(0),
		// Named once the files are hashed and uploaded (attachFiles), for the items that carry any.
		files: [],
	};
	return { request, state, leaseSeconds };
}

/** The state an item saves, per What to Save. */
function stateOf(
	ctx: IExecuteFunctions,
	{ node, items }: CheckpointRun,
	r: SaveReaders,
	saveWhat: string,
	claim: ClaimRef | undefined,
	i: number,
): unknown {
	const item = items[i];
	if (saveWhat === 'stepResult') {
		// Done Before: the side effect ran earlier; its replayed result is the step's result.
		return claim?.outcome === 'duplicate' ? (claim.result ?? null) : (userJson(item) as unknown);
	}
	if (saveWhat === 'fields') return pickFields(userJson(item), fieldList(r.fieldsOf(i) as string));
	if (saveWhat === 'json') {
		return jsonParameter(node, ctx.getNodeParameter('stateJson', i, '{}'), 'State (JSON)', i);
	}
	return userJson(item);
}

/** The Expected Sequence option: undefined when not added, else a whole number. */
function expectedSequenceOf(
	{ node }: CheckpointRun,
	expected: number | string,
	i: number,
): number | undefined {
	const expectedSequence =
		expected === '' || expected === null || expected === undefined ? undefined : Number(expected);
	if (expectedSequence !== undefined && !Number.isInteger(expectedSequence)) {
		throw setupError(
			node,
			`Expected Sequence must be a whole number, got ${String(expected)}`,
			i,
			'Set Expected Sequence to a whole number, or remove the option.',
		);
	}
	return expectedSequence;
}

/** The claim this save makes ahead for the Guard after it: once per key in a run. */
function claimAhead(
	r: SaveReaders,
	target: { workflowId: string; instanceKey: string; executionId: string },
	leaseSeconds: number,
): ClaimItem | undefined {
	if (!r.ahead) return undefined;
	const { workflowId, instanceKey } = target;
	// The instance as the Guard will find it on this Save's output item.
	const claimNext = instanceClaim(
		r.ahead,
		{ workflowId, instanceKey, leaseSeconds },
		{ workflowId, executionId: target.executionId },
	);
	const id = JSON.stringify([claimNext.scope, claimNext.key]);
	if (r.claimedAhead.has(id)) return undefined;
	r.claimedAhead.add(id);
	return claimNext;
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
