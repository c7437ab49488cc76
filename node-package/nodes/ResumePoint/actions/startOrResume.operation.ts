/** Start or Resume: each item's instance is started, resumed or found busy or finished, and routed. */
import type {
	IDataObject,
	IExecuteFunctions,
	INodeExecutionData,
	NodeOperationError,
} from 'n8n-workflow';

import type { NodeError } from '../../../shared/batch';
import type { AheadGuard } from '../../../shared/claim-ahead';
import {
	asNodeError,
	callContext,
	executionIdOf,
	failingTogether,
	fieldList,
	fromJsonBytes,
	sidecarError,
	sidecarFor,
	workflowIdOf,
} from '../../../shared/node-helpers';
import { refusedItem } from '../../../shared/door';
import { binaryOf, withBinary } from '../../../shared/files';
import { nodeOf } from '../../../shared/run-node';
import { StartOutcome, type StartOrResumeResponse } from '../../../shared/transport';
import { nodeParameter, noteHeldInstances, type InstanceRef } from '../../../shared/upstream';
import { warnOfAnEarlyAnswer } from './earlyAnswer';
import { prepareItems } from './prepare';
import {
	differentDeliveryRefused,
	FIXED_OUTPUTS,
	OUTPUT_IN_PROGRESS,
	refusesVersion,
	route,
	routeResponse,
	smallInstanceMeta,
	versionRefused,
	type RouteSettings,
} from './routing';
import { startOrResumeAll, type StartRun } from './start';
import type { ResumeVersion } from './version';

export async function execute(
	ctx: IExecuteFunctions,
	version: ResumeVersion,
): Promise<INodeExecutionData[][]> {
	// A delivery refused for good must never run as a new order (nor a Respond to Webhook on Start
	// answer it 200): every item leaves refused by In Progress, which under an error output n8n moves
	// to the error output (the door's Not Accepted).
	return await failingTogether(
		ctx,
		() => layoutOf(ctx, version).count,
		OUTPUT_IN_PROGRESS,
		refusedItem,
		async () => await startOrResume(ctx, version),
	);
}

async function startOrResume(
	ctx: IExecuteFunctions,
	version: ResumeVersion,
): Promise<INodeExecutionData[][]> {
	const items = ctx.getInputData();
	const node = nodeOf(ctx);
	// Read once per run: the parameters it reads are evaluated by n8n at every read.
	const { stepNames, onDifferent, mismatchIndex, eventIndex, differentIndex, count } = layoutOf(
		ctx,
		version,
	);
	const outputs: INodeExecutionData[][] = Array.from({ length: count }, () => []);
	if (items.length === 0) return outputs;
	warnOfAnEarlyAnswer(ctx);

	const client = await sidecarFor(ctx);
	const workflowId = workflowIdOf(ctx);
	const executionId = executionIdOf(ctx);
	if (nodeParameter(ctx, 'options.registerVersion', 0, false) as boolean) {
		try {
			await client.syncVersionFromN8n({ workflowId, actor: `execution ${executionId}` });
		} catch (error) {
			throw sidecarError(node, error, callContext(client, 'Registering the workflow version', 0));
		}
	}
	const prepared = prepareItems(ctx, node, items, workflowId);
	if (!ctx.continueOnFail()) {
		// A refused item fails the run before any call: nothing of this delivery is stored.
		const refused = prepared.find((p) => p.kind === 'error');
		if (refused?.kind === 'error') throw refused.error;
	}
	const run: StartRun = {
		node,
		items,
		client,
		workflowId,
		executionId,
		version,
		onDifferent,
		prepared,
	};
	const { results, ahead } = await startOrResumeAll(ctx, run);
	const settings = { stepNames, mismatchIndex, eventIndex, executionId, version, ahead };
	await suspendRefused(ctx, run, results, mismatchIndex);
	const withFiles = await restoreFiles(ctx, run, results);
	const held = routeAll(
		ctx,
		{ ...run, items: withFiles },
		results,
		outputs,
		settings,
		differentIndex,
	);
	noteHeldInstances(executionId, held);
	return outputs;
}

/** Where each output is: the step outputs' names, and the optional outputs' indexes (-1: off). */
function layoutOf(ctx: IExecuteFunctions, version: ResumeVersion) {
	const stepNames = fieldList(nodeParameter(ctx, 'stepOutputs', 0, '') as string).filter(
		(s, i, all) => all.indexOf(s) === i,
	);
	const mismatchOutput = nodeParameter(ctx, 'versionMismatchOutput', 0, false) as boolean;
	const waitOutputs = nodeParameter(ctx, 'waitOutputs', 0, false) as boolean;
	const onDifferent = version.differentDelivery(ctx);
	const afterSteps = FIXED_OUTPUTS + stepNames.length;
	const mismatchIndex = mismatchOutput ? afterSteps : -1;
	const eventIndex = waitOutputs ? afterSteps + (mismatchOutput ? 1 : 0) : -1;
	const differentIndex =
		onDifferent === 'output' ? afterSteps + (mismatchOutput ? 1 : 0) + (waitOutputs ? 2 : 0) : -1;
	const count =
		afterSteps + (mismatchOutput ? 1 : 0) + (waitOutputs ? 2 : 0) + (differentIndex >= 0 ? 1 : 0);
	return { stepNames, onDifferent, mismatchIndex, eventIndex, differentIndex, count };
}

/**
 * Suspends each resumed instance this Resume Point refuses (bound to another
 * version, no Old Version output) before it fails: no automatic resume can
 * mend that, so it waits for an operator instead of being handed out and
 * refused again until its automatic resumes are used up. A failed call leaves
 * the instance to those resumes, as before.
 */
async function suspendRefused(
	ctx: IExecuteFunctions,
	{ items, client, workflowId, executionId }: StartRun,
	results: Array<StartOrResumeResponse | NodeError | undefined>,
	mismatchIndex: number,
): Promise<void> {
	for (let i = 0; i < items.length; i++) {
		const response = results[i];
		if (
			!response ||
			response instanceof Error ||
			!refusesVersion(items[i], response, mismatchIndex)
		) {
			continue;
		}
		try {
			await client.failInstance({
				workflowId: response.instance?.workflowId || workflowId,
				instanceKey: response.instance?.instanceKey ?? '',
				executionId,
				// What the operator reads (instances show, the console): the reason and the ways on.
				errorMessage: refusalText(versionRefused(ctx, response, i)),
				retry: true,
				suspend: true,
			});
		} catch (error) {
			ctx.logger.warn(
				`Could not suspend instance ${response.instance?.instanceKey ?? ''}: ${(error as Error).message}`,
			);
		}
	}
}

function refusalText(error: NodeOperationError): string {
	return `${error.message}. ${error.description ?? ''}`.slice(0, 4096);
}

/**
 * The items, each resumed instance's with the files its newest checkpoint
 * carries (n8n binary data, beside the restored state). Only a checkpoint
 * saved with files costs a call: ListCheckpointFiles, then a download per file.
 */
async function restoreFiles(
	ctx: IExecuteFunctions,
	{ node, items, client, workflowId }: StartRun,
	results: Array<StartOrResumeResponse | NodeError | undefined>,
): Promise<INodeExecutionData[]> {
	const out = [...items];
	for (let i = 0; i < items.length; i++) {
		const response = results[i];
		if (!response || response instanceof Error) continue;
		const latest = response.latestCheckpoint;
		if (response.outcome !== StartOutcome.START_OUTCOME_RESUMED || !latest?.fileCount) continue;
		try {
			const listed = await client.listCheckpointFiles({
				workflowId: response.instance?.workflowId || workflowId,
				instanceKey: latest.instanceKey,
				sequence: latest.sequence,
			});
			out[i] = withBinary(items[i], await binaryOf(ctx, client, listed.files));
		} catch (error) {
			// The instance is this execution's now: failing here frees it for the next resume.
			throw sidecarError(node, error, callContext(client, "Restoring the checkpoint's files", i));
		}
	}
	return out;
}

/** Puts every item on its output; the instances this execution now holds (noteHeldInstances). */
function routeAll(
	ctx: IExecuteFunctions,
	{ node, items, workflowId, prepared }: StartRun,
	results: Array<StartOrResumeResponse | NodeError | undefined>,
	outputs: INodeExecutionData[][],
	settings: RouteSettings & { ahead?: AheadGuard },
	differentIndex: number,
): InstanceRef[] {
	const held: InstanceRef[] = [];
	for (let i = 0; i < items.length; i++) {
		const item = items[i];
		const prep = prepared[i];
		const result = results[i];
		let failure = prep.kind === 'error' ? prep.error : result instanceof Error ? result : undefined;
		const response = result as StartOrResumeResponse;
		if (
			!failure &&
			prep.kind === 'call' &&
			response.outcome === StartOutcome.START_OUTCOME_DIFFERENT
		) {
			if (differentIndex >= 0) {
				outputs[differentIndex].push(
					route(item, i, {
						...smallInstanceMeta(response.instance),
						outcome: 'different',
						startItem: (fromJsonBytes(response.startItemJson) ?? null) as IDataObject,
					}),
				);
				continue;
			}
			failure = differentDeliveryRefused(node, response, i);
		}
		if (failure) {
			// In Progress runs nothing: a failed item must never take the Start path.
			if (!ctx.continueOnFail()) throw failure;
			outputs[OUTPUT_IN_PROGRESS].push(refusedItem(failure, i));
			continue;
		}
		if (prep.kind === 'duplicate') {
			outputs[OUTPUT_IN_PROGRESS].push(
				route(item, i, {
					instanceKey: prep.key,
					workflowId,
					outcome: 'busy',
					reason: 'An earlier item of this execution has the same instance key',
				}),
			);
			continue;
		}
		try {
			routeResponse(ctx, item, i, response, outputs, settings);
		} catch (error) {
			// A refusal (a version this execution must not run, a wait without its outputs) is the item's,
			// as any other: thrown, n8n would send the input items out of Start under an error output.
			const refusal = asNodeError(node, error, i);
			if (!ctx.continueOnFail()) throw refusal;
			outputs[OUTPUT_IN_PROGRESS].push(refusedItem(refusal, i));
			continue;
		}
		const taken =
			response.outcome === StartOutcome.START_OUTCOME_STARTED ||
			response.outcome === StartOutcome.START_OUTCOME_RESUMED;
		if (taken && response.instance) {
			held.push({
				workflowId: response.instance.workflowId || workflowId,
				instanceKey: response.instance.instanceKey,
				leaseSeconds: response.instance.leaseSeconds,
			});
		}
	}
	return held;
}
