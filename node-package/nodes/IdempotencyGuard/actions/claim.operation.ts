/** Claim: one Claim call for all items (or answers claimed ahead), each item routed by its answer. */
import type {
	IBinaryKeyData,
	IDataObject,
	IExecuteFunctions,
	INodeExecutionData,
} from 'n8n-workflow';

import { batched, type NodeError } from '../../../shared/batch';
import { instanceClaim, takeAheadAnswer, type AheadAnswer } from '../../../shared/claim-ahead';
import { binaryOf, withBinary } from '../../../shared/files';
import {
	asNodeError,
	callContext,
	DURABLE_FIELD,
	failForSetup,
	failInstanceForGood,
	fieldList,
	fromJsonBytes,
	IDEMPOTENCY_FIELD,
	isLimitRefusal,
	jsonParameter,
	pickFields,
	sidecarError,
	toJsonBytes,
	userJson,
	workflowIdOf,
} from '../../../shared/node-helpers';
import { refusedItem } from '../../../shared/door';
import { ClaimOutcome, type ClaimItem } from '../../../shared/transport';
import {
	instanceRefOf,
	noteGuardRun,
	parameterReader,
	targetOf,
	type InstanceRef,
} from '../../../shared/upstream';
import { withIdempotency, type GuardRun } from './run';

/** Claim's outputs, in this order. */
export const OUTPUT_FIRST_RUN = 0;
export const OUTPUT_ALREADY_DONE = 1;
export const OUTPUT_IN_PROGRESS = 2;

/** The items of one Claim run, as they were prepared. */
interface Claims {
	prepared: Map<number, ClaimItem>;
	/** The instance found upstream, put on items that do not carry it. */
	instances: Map<number, InstanceRef>;
	problems: Map<number, NodeError>;
	duplicates: Map<number, { scope: string; key: string }>;
	/** Answers claimed ahead by the node before (a Save, the Resume Point): no Claim call. */
	ahead: Map<number, AheadAnswer>;
}

export async function execute(
	ctx: IExecuteFunctions,
	run: GuardRun,
): Promise<INodeExecutionData[][]> {
	const { client, executionId, node } = run;
	const claims = prepareClaims(ctx, run);
	if (claims.problems.size > 0 && !ctx.continueOnFail()) {
		// A setup error (an empty Scope, say) fails its instance: every resume would meet it again.
		await failForSetup(client, node, claims.problems, run.targetAt);
		throw claims.problems.values().next().value as NodeError;
	}
	const indexes = [...claims.prepared.keys()];
	const results = indexes.length
		? await batched(ctx, client, 'Claiming the idempotency key', indexes, async (batch) => {
				const response = await client.claim({ items: batch.map((i) => claims.prepared.get(i)!) });
				return response.results;
			}).catch(async (error: unknown) => {
				// Without Continue On Fail the first refused item fails the execution, and its instance.
				const at = isLimitRefusal(error)
					? (error.context.itemIndex as number | undefined)
					: undefined;
				if (at !== undefined) await failRefusedClaim(run, claims.prepared.get(at), error);
				throw error;
			})
		: new Map<number, { ok: true; value: AheadAnswer } | { ok: false; error: NodeError }>();
	for (const [i, result] of results) {
		if (!result.ok) await failRefusedClaim(run, claims.prepared.get(i), result.error);
	}
	// Answers claimed ahead take the same routes as this node's own answers.
	for (const [i, answer] of claims.ahead) results.set(i, { ok: true, value: answer });
	const restored = await doneBeforeFiles(ctx, run, results);
	const outputs = routeClaims(ctx, run, claims, results, restored);
	noteGuardRun(executionId, node.name, outputs);
	return outputs;
}

function prepareClaims(ctx: IExecuteFunctions, run: GuardRun): Claims {
	const { items, node, version } = run;
	const claims: Claims = {
		prepared: new Map(),
		instances: new Map(),
		problems: new Map(),
		duplicates: new Map(),
		ahead: new Map(),
	};
	const seen = new Set<string>();
	const fingerprintFromOf = parameterReader(ctx, 'fingerprintFrom', version.defaultFingerprintFrom);
	const fieldsOf = parameterReader(ctx, 'fingerprintFields', '');
	const leaseOf = parameterReader<number>(ctx, 'options.leaseSeconds', 0);
	const ttlOf = parameterReader<number>(ctx, 'options.ttlSeconds', 0);
	const claimKey = version.claimKeys(ctx, run);
	for (let i = 0; i < items.length; i++) {
		try {
			const scope = run.text('scope', i);
			const from = fingerprintFromOf(i) as string;
			const { key, instance } = claimKey(i, from);
			if (instance && !instanceRefOf(items[i].json)) claims.instances.set(i, instance);
			const id = JSON.stringify([scope, key]);
			if (seen.has(id)) {
				claims.duplicates.set(i, { scope, key });
				continue;
			}
			seen.add(id);
			const instanceForm = version.followsInstance && (from === 'instance' || from === 'none');
			if (instanceForm) {
				const answer = takeAheadAnswer(node.name, run.executionId, scope, key);
				if (answer) {
					claims.ahead.set(i, answer);
					continue;
				}
			}
			// Who claims: the execution holding the instance (the caller's, in a sub-workflow).
			const own = () => ({ workflowId: workflowIdOf(ctx), executionId: run.executionId });
			const target = instance ? targetOf(ctx, instance, i, own()) : undefined;
			if (instanceForm && instance && target) {
				// The default form: the same claim a node before would make ahead (shared/claim-ahead).
				claims.prepared.set(
					i,
					instanceClaim(
						{ scope, fingerprintFrom: from, leaseSeconds: leaseOf(i), ttlSeconds: ttlOf(i) },
						instance,
						{ workflowId: target.workflowId, executionId: target.executionId, key },
					),
				);
				continue;
			}
			let payload: unknown;
			if (from === 'fields') {
				payload = pickFields(userJson(items[i]), fieldList(fieldsOf(i) as string));
			} else if (from === 'json') {
				const raw = ctx.getNodeParameter('fingerprintJson', i, '{}');
				payload = jsonParameter(node, raw, 'Fingerprint (JSON)', i);
			} else if (from === 'item') {
				payload = userJson(items[i]);
			}
			// v1 (any fingerprint), or v2 with a chosen fingerprint.
			claims.prepared.set(i, {
				scope,
				key,
				payloadJson: payload === undefined ? Buffer.alloc(0) : toJsonBytes(payload),
				fingerprint: '',
				// v2: 0 means the instance's lease, so the claim lapses with the instance.
				leaseSeconds: leaseOf(i) || (instance?.leaseSeconds ?? 0),
				ttlSeconds: ttlOf(i),
				holder: target?.executionId ?? run.executionId,
				// Instance-aware: a resumed instance's execution takes over its dead one's claim.
				workflowId: target?.workflowId ?? '',
				instanceKey: target?.instanceKey ?? '',
			});
		} catch (error) {
			claims.problems.set(i, asNodeError(node, error, i));
		}
	}
	return claims;
}

/**
 * A claim the sidecar refuses for a limit (its fingerprint payload over DURABLE_MAX_STATE_BYTES) is
 * refused alike on every resume: its instance is failed at once, as a Save's refusal fails it
 * (DurableCheckpoint/actions/refused.ts). Nothing was claimed, so nothing ran.
 */
async function failRefusedClaim(
	{ client, node }: GuardRun,
	claim: ClaimItem | undefined,
	error: unknown,
): Promise<void> {
	if (!claim?.instanceKey || !isLimitRefusal(error)) return;
	const message =
		`${node.name}: key '${claim.key}' of scope '${claim.scope}' not claimed, so the side effect after it did not run. ` +
		`${error.message}. Refused by the sidecar: retry the instance once the limit is raised or the fingerprint is smaller.`;
	await failInstanceForGood(
		client,
		{ workflowId: claim.workflowId, instanceKey: claim.instanceKey, executionId: claim.holder },
		message,
	);
}

type ClaimResults = Map<number, { ok: true; value: AheadAnswer } | { ok: false; error: NodeError }>;

/**
 * The files of the keys answered Done Before (those of the save that
 * completed each key), as n8n binary data by item: one ListKeyFiles call for
 * the run's Done Before items, and a download per file.
 */
async function doneBeforeFiles(
	ctx: IExecuteFunctions,
	{ client, node }: GuardRun,
	results: ClaimResults,
): Promise<Map<number, IBinaryKeyData>> {
	const done: Array<[number, { scope: string; key: string }]> = [];
	for (const [i, result] of results) {
		if (
			result.ok &&
			result.value.outcome === ClaimOutcome.CLAIM_OUTCOME_DUPLICATE &&
			result.value.key
		) {
			done.push([i, { scope: result.value.key.scope, key: result.value.key.key }]);
		}
	}
	const out = new Map<number, IBinaryKeyData>();
	if (!done.length) return out;
	try {
		const listed = await client.listKeyFiles({ keys: done.map(([, key]) => key) });
		for (let n = 0; n < done.length; n++) {
			const files = listed.keys[n]?.files ?? [];
			if (files.length) out.set(done[n][0], await binaryOf(ctx, client, files));
		}
	} catch (error) {
		throw sidecarError(
			node,
			error,
			callContext(client, 'Restoring the files of the step done before', done[0][0]),
		);
	}
	return out;
}

function routeClaims(
	ctx: IExecuteFunctions,
	{ items, version }: GuardRun,
	{ problems, duplicates, ahead, instances }: Claims,
	results: ClaimResults,
	restored: Map<number, IBinaryKeyData>,
): INodeExecutionData[][] {
	const outputs: INodeExecutionData[][] = [[], [], []];
	const routed = (i: number, meta: IDataObject): INodeExecutionData => {
		const out = withIdempotency(items[i], meta, i);
		// v2: this claim's answer only, nothing left over from an earlier one.
		if (version.followsInstance) out.json[IDEMPOTENCY_FIELD] = meta;
		const instance = instances.get(i);
		if (instance) out.json[DURABLE_FIELD] = { ...instance };
		return out;
	};
	for (let i = 0; i < items.length; i++) {
		const result = results.get(i);
		const failure = problems.get(i) ?? (result && !result.ok ? result.error : undefined);
		if (failure) {
			if (!ctx.continueOnFail()) throw failure;
			// In Progress runs nothing: a failed claim must never take the First Run path.
			outputs[OUTPUT_IN_PROGRESS].push(refusedItem(failure, i));
			continue;
		}
		const duplicate = duplicates.get(i);
		if (duplicate) {
			outputs[OUTPUT_IN_PROGRESS].push(
				routed(i, {
					...duplicate,
					outcome: 'in_progress',
					reason: 'An earlier item of this execution claimed the same key',
				}),
			);
			continue;
		}
		if (!result || !result.ok) continue;
		const meta: IDataObject = {
			...version.keyMeta(result.value.key),
			outcome: (ClaimOutcome[result.value.outcome] ?? 'UNSPECIFIED')
				.replace('CLAIM_OUTCOME_', '')
				.toLowerCase(),
		};
		// Claimed by the node before, in its own call: this node made none.
		if (ahead.has(i)) meta.claimedAhead = true;
		switch (result.value.outcome) {
			case ClaimOutcome.CLAIM_OUTCOME_ACQUIRED:
				outputs[OUTPUT_FIRST_RUN].push(routed(i, meta));
				break;
			case ClaimOutcome.CLAIM_OUTCOME_DUPLICATE: {
				meta.result = (fromJsonBytes(result.value.key?.resultJson) ?? null) as IDataObject;
				const files = restored.get(i);
				outputs[OUTPUT_ALREADY_DONE].push(
					files ? withBinary(routed(i, meta), files) : routed(i, meta),
				);
				break;
			}
			default:
				outputs[OUTPUT_IN_PROGRESS].push(routed(i, meta));
		}
	}
	return outputs;
}
