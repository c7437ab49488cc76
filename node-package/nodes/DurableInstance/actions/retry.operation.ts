/** Retry: a suspended or failed instance runs again. */
import type { IExecuteFunctions, INodeExecutionData } from 'n8n-workflow';

import { instanceAction } from './instanceAction';
import type { InstanceRun } from './run';

export async function execute(
	ctx: IExecuteFunctions,
	run: InstanceRun,
): Promise<INodeExecutionData[][]> {
	return await instanceAction(ctx, run, 'retry', 'Retrying the instance', (request) =>
		run.client.retryInstance(request),
	);
}
