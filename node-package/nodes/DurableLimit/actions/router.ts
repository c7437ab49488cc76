/** The Durable Limit's execute: the operation on all items. */
import type { IExecuteFunctions, INodeExecutionData } from 'n8n-workflow';

import { failingTogether } from '../../../shared/node-helpers';
import { refusedItem } from '../../../shared/door';
import { nodeParameter } from '../../../shared/upstream';
import { configuredOutputs } from '../outputs';
import { execute as debounce } from './debounce.operation';
import { execute as enterSection } from './enterSection.operation';
import { execute as leaveSection } from './leaveSection.operation';
import { execute as rateLimit } from './rateLimit.operation';
import { runOf, type LimitOperation, type Operation } from './run';

const operations: Record<Operation, LimitOperation> = {
	enterSection,
	leaveSection,
	rateLimit,
	debounce,
};

export async function router(this: IExecuteFunctions): Promise<INodeExecutionData[][]> {
	const operation = nodeParameter(this, 'operation', 0, 'enterSection') as Operation;
	const outputs = configuredOutputs({
		operation,
		overLimit: nodeParameter(this, 'overLimit', 0, 'wait'),
	}).length;
	const items = this.getInputData();
	if (items.length === 0) return Array.from({ length: outputs }, () => []);
	// A run that failed as a whole fails its items by the output that runs nothing (Busy, Debounced), as a failed
	// item does; thrown, n8n would send them on out of the first output: into the section, past the rate.
	return await failingTogether(
		this,
		() => outputs,
		outputs - 1,
		refusedItem,
		async () => await operations[operation](this, await runOf(this)),
	);
}
