/** The Idempotency Guard's one execute, for every version: the operation, with the version's rules. */
import type { IExecuteFunctions, INodeExecutionData } from 'n8n-workflow';

import { failingTogether } from '../../../shared/node-helpers';
import { refusedItem } from '../../../shared/door';
import { nodeOf } from '../../../shared/run-node';
import { nodeParameter } from '../../../shared/upstream';
import type { Operation } from '../IdempotencyGuardDescription';
import { version1 } from '../v1/actions/router';
import { version2 } from '../v2/actions/router';
import { execute as claim, OUTPUT_IN_PROGRESS } from './claim.operation';
import { execute as recordResult } from './recordResult.operation';
import { execute as release } from './release.operation';
import { runOf, type OperationFn } from './run';

const operations: Record<Operation, OperationFn> = { claim, recordResult, release };

export async function router(this: IExecuteFunctions): Promise<INodeExecutionData[][]> {
	const operation = nodeParameter(this, 'operation', 0) as Operation;
	if (this.getInputData().length === 0) return operation === 'claim' ? [[], [], []] : [[]];
	const version = nodeOf(this).typeVersion >= 2 ? version2 : version1;
	// A Claim that failed as a whole must never send its items on by First Run, to the call.
	return await failingTogether(
		this,
		() => (operation === 'claim' ? 3 : 1),
		operation === 'claim' ? OUTPUT_IN_PROGRESS : 0,
		refusedItem,
		async () => await operations[operation](this, await runOf(this, version, operation)),
	);
}
