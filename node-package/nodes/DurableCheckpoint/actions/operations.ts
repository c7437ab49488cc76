/** What a version of the Durable Checkpoint is made of: its operations and how it finds an item's instance. */
import type { IExecuteFunctions, INodeExecutionData } from 'n8n-workflow';

import type { Operation } from '../DurableCheckpointDescription';
import type { CheckpointRun, InstanceFinder } from './run';

export type OperationFn = (
	ctx: IExecuteFunctions,
	run: CheckpointRun,
) => Promise<INodeExecutionData[]>;

export interface CheckpointVersion {
	findInstance: InstanceFinder;
	operations: Record<Operation, OperationFn>;
}
