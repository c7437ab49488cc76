/** The Durable Limit's execute: the operation on all items. */
import type { IExecuteFunctions, INodeExecutionData } from 'n8n-workflow';

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
	if (this.getInputData().length === 0) {
		return configuredOutputs({
			operation,
			overLimit: nodeParameter(this, 'overLimit', 0, 'wait'),
		}).map(() => []);
	}
	return await operations[operation](this, await runOf(this));
}
