/**
 * Leave Section: the item's place goes back (or the item leaves the queue); the oldest waiting item is
 * given it at once. The item passes on as it came, so a Save after this node records what the call
 * before it answered.
 */
import { routeItems, type LimitOperation } from './run';

export const execute: LimitOperation = async (ctx, run) =>
	await routeItems(ctx, run, 'Leaving the section', 1, 0, async (i, target) => {
		const { limitName, limitKey } = run.limitOf(i);
		await run.client.releaseSlot({ ...target, limitName, limitKey });
		return { output: 0 };
	});
