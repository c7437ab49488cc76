/** Enter Section: at most N items per key between here and Leave Section; an item over the limit waits parked, or leaves by Busy. */
import { AcquireOutcome, OverLimit } from '../../../shared/transport';
import { nodeParameter } from '../../../shared/upstream';
import { routeItems, type LimitOperation } from './run';

const ENTERED = 0;
const BUSY = 1;

export const execute: LimitOperation = async (ctx, run) => {
	const busy = nodeParameter(ctx, 'overLimit', 0, 'wait') === 'busy';
	return await routeItems(
		ctx,
		run,
		'Entering the section',
		busy ? 2 : 1,
		busy ? BUSY : ENTERED,
		async (i, target) => {
			const { limitName, limitKey } = run.limitOf(i);
			const answer = await run.client.acquireSlot({
				...target,
				limitName,
				limitKey,
				maxHolders: Number(nodeParameter(ctx, 'maxHolders', i, 1)),
				overLimit: busy ? OverLimit.OVER_LIMIT_REFUSE : OverLimit.OVER_LIMIT_WAIT,
			});
			const limit = {
				name: limitName,
				key: limitKey,
				holders: answer.holders,
				waiters: answer.waiters,
			};
			switch (answer.outcome) {
				case AcquireOutcome.ACQUIRE_OUTCOME_ACQUIRED:
					return { output: ENTERED, limit: { ...limit, outcome: 'entered' } };
				case AcquireOutcome.ACQUIRE_OUTCOME_BUSY:
					return { output: BUSY, limit: { ...limit, outcome: 'busy' } };
				default:
					// Queued and parked: the item comes back through the Resume Point when a place is its.
					return undefined;
			}
		},
	);
};
