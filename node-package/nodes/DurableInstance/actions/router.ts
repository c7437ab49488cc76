/** The Durable Instance's execute: the operation on all items. */
import type { IExecuteFunctions, INodeExecutionData } from 'n8n-workflow';

import { failingTogether } from '../../../shared/node-helpers';
import { refusedItem } from '../../../shared/door';
import { execute as cancel } from './cancel.operation';
import { execute as resume } from './resume.operation';
import { execute as retry } from './retry.operation';
import { runOf, type InstanceOperation, type Operation } from './run';
import { execute as signal } from './signal.operation';

const operations: Record<Operation, InstanceOperation> = { signal, retry, resume, cancel };

export async function router(this: IExecuteFunctions): Promise<INodeExecutionData[][]> {
	if (this.getInputData().length === 0) return [[]];
	const operation = this.getNodeParameter('operation', 0) as Operation;
	// An action that failed as a whole must never send its items on as done (n8n would, out of its output).
	return await failingTogether(
		this,
		() => 1,
		0,
		refusedItem,
		async () => await operations[operation](this, await runOf(this)),
	);
}
