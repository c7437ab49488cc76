/** Resume: a suspended or waiting instance goes on now. */
import type { IExecuteFunctions, INodeExecutionData } from 'n8n-workflow';

import { instanceAction } from './instanceAction';
import type { InstanceRun } from './run';

export async function execute(
	ctx: IExecuteFunctions,
	run: InstanceRun,
): Promise<INodeExecutionData[][]> {
	return await instanceAction(ctx, run, 'resume', 'Resuming the instance', (request) =>
		run.client.resumeInstance(request),
	);
}
