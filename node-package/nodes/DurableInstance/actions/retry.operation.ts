/** Retry: a suspended or failed instance runs again. */
import { instanceAction } from './instanceAction';
import type { InstanceOperation } from './run';

export const execute: InstanceOperation = async (ctx, run) =>
	await instanceAction(ctx, run, 'retry', 'Retrying the instance', (r) =>
		run.client.retryInstance(r),
	);
