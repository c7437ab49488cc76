/** Save, version 1: the item goes on as it came, with the checkpoint's metadata under durable. */
import type { INodeExecutionData } from 'n8n-workflow';

import { withDurable } from '../../../../shared/node-helpers';
import { saveCheckpoints, type SavedItem } from '../../actions/save';
import type { OperationFn } from '../../actions/operations';

export const execute: OperationFn = async (ctx, run) => {
	return await saveCheckpoints(ctx, run, {
		defaultSaveWhat: 'item',
		followsInstance: false,
		outputItem,
	});
};

function outputItem({ run, index, sent, result }: SavedItem): INodeExecutionData {
	const cp = result.checkpoint;
	const stepName = cp?.stepName ?? sent.request.stepName;
	return withDurable(
		run.items[index],
		{
			workflowId: sent.request.workflowId,
			instanceKey: sent.request.instanceKey,
			lastSequence: cp?.sequence ?? 0,
			lastStep: stepName,
			checkpoint: {
				sequence: cp?.sequence ?? 0,
				stepName,
				sha256: cp?.sha256 ?? '',
				sizeBytes: cp?.sizeBytes ?? 0,
				deduplicated: result.deduplicated,
				createdAt: cp?.createdAt ? cp.createdAt.toISOString() : null,
			},
		},
		index,
	);
}
