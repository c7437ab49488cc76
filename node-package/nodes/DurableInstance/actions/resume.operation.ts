/** Resume: a suspended or waiting instance goes on now. */
import { instanceAction } from './instanceAction';
import type { InstanceOperation } from './run';

export const execute: InstanceOperation = async (ctx, run) =>
	await instanceAction(ctx, run, 'resume', 'Resuming the instance', (r) =>
		run.client.resumeInstance(r),
	);
