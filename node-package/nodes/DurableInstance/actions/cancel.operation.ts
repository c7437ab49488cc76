/** Cancel: an unfinished instance ends, cancelled. */
import type { IExecuteFunctions, INodeExecutionData } from 'n8n-workflow';

import { instanceAction } from './instanceAction';
import type { InstanceRun } from './run';

export async function execute(
	ctx: IExecuteFunctions,
	run: InstanceRun,
): Promise<INodeExecutionData[][]> {
	return await instanceAction(ctx, run, 'cancel', 'Cancelling the instance', (request) =>
		run.client.cancelInstance(request),
	);
}
