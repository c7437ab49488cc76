/** The Durable Checkpoint's one execute, for every version: the version's operation on all items. */
import type { IExecuteFunctions, INodeExecutionData } from 'n8n-workflow';

import { failingTogether } from '../../../shared/node-helpers';
import { refusedItem } from '../../../shared/door';
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
	// A Save that failed as a whole must never send its items on as saved (n8n would, out of its output).
	return await failingTogether(
		this,
		() => 1,
		0,
		refusedItem,
		async () => [
			await version.operations[operation](this, await runOf(this, version.findInstance)),
		],
	);
}
