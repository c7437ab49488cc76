/**
 * Save, version 2: the item becomes the instance's state as stored, so the next node
 * sees the start fields and every step's result; the metadata stays small.
 */
import type { IDataObject, INodeExecutionData } from 'n8n-workflow';

import { keepAheadAnswer } from '../../../../shared/claim-ahead';
import { DURABLE_FIELD, fromJsonBytes, isObject } from '../../../../shared/node-helpers';
import { StateMode } from '../../../../shared/transport';
import { shareUnchanged } from '../../../../shared/upstream';
import { instanceSummary } from '../../actions/run';
import { saveCheckpoints, type SavedItem } from '../../actions/save';
import type { OperationFn } from '../../actions/operations';

export const execute: OperationFn = async (ctx, run) => {
	return await saveCheckpoints(ctx, run, {
		defaultSaveWhat: 'stepResult',
		followsInstance: true,
		outputItem,
	});
};

function outputItem({ run, index: i, sent, result, ahead }: SavedItem): INodeExecutionData {
	const { items, upstream, executionId } = run;
	const cp = result.checkpoint;
	const stored =
		sent.request.stateMode === StateMode.STATE_MODE_ADD_STEP_RESULT
			? fromJsonBytes(result.stateJson)
			: sent.state;
	const json: IDataObject = isObject(stored)
		? { ...stored }
		: { state: (stored ?? null) as IDataObject[string] };
	// Unchanged fields keep the objects the item came with (a small execution record).
	shareUnchanged(json, (upstream.claimItem(i, items[i]) ?? items[i]).json, DURABLE_FIELD);
	const meta: IDataObject = {
		workflowId: sent.request.workflowId,
		instanceKey: sent.request.instanceKey,
		leaseSeconds: sent.leaseSeconds,
		lastStep: cp?.stepName ?? sent.request.stepName,
		lastSequence: cp?.sequence ?? 0,
		deduplicated: result.deduplicated,
	};
	const completed = result.completedKey;
	if (completed) meta.completedKey = { scope: completed.scope, key: completed.key };
	const finished = result.completedInstance;
	if (finished) {
		// As the Complete Instance operation says it.
		const summary = instanceSummary(finished);
		meta.status = summary.status;
		meta.finishedAt = summary.finishedAt;
	}
	if (ahead) keepAheadAnswer(ahead, executionId, result.nextClaim);
	json[DURABLE_FIELD] = meta;
	return { json, binary: items[i].binary, pairedItem: { item: i } };
}
