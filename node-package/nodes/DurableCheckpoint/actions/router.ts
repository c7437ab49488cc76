/** The Durable Checkpoint's one execute, for every version: the version's operation on all items. */
import type { IExecuteFunctions, INodeExecutionData } from 'n8n-workflow';

import { nodeOf } from '../../../shared/run-node';
import { nodeParameter } from '../../../shared/upstream';
import type { Operation } from '../DurableCheckpointDescription';
import { version1 } from '../v1/actions/router';
import { version2 } from '../v2/actions/router';
import { runOf } from './run';

export async function router(this: IExecuteFunctions): Promise<INodeExecutionData[][]> {
	if (this.getInputData().length === 0) return [[]];
	const version = nodeOf(this).typeVersion >= 2 ? version2 : version1;
	const operation = nodeParameter(this, 'operation', 0) as Operation;
	const run = await runOf(this, version.findInstance);
	return [await version.operations[operation](this, run)];
}
