/**
 * Leave Section: the places the item's instance holds under the limit's name go back, whatever their key
 * (or the item leaves the queue); the oldest waiting items are given them at once. The item passes on as it came, so a Save after this node records what the call
 * before it answered.
 */
import { routeItems, type LimitOperation } from './run';

export const execute: LimitOperation = async (ctx, run) =>
	await routeItems(ctx, run, 'Leaving the section', 1, 0, async (i, target) => {
		const { limitName } = run.limitOf(i);
		// Every key of the limit the instance is at: the item here is often a call's answer, without the key.
		await run.client.releaseSlot({ ...target, limitName, limitKey: '' });
		return { output: 0 };
	});
