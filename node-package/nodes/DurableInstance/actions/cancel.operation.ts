/** Cancel: an unfinished instance ends, cancelled. */
import { instanceAction } from './instanceAction';
import type { InstanceOperation } from './run';

export const execute: InstanceOperation = async (ctx, run) =>
	await instanceAction(ctx, run, 'cancel', 'Cancelling the instance', (r) =>
		run.client.cancelInstance(r),
	);
