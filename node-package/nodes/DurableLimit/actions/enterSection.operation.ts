/**
 * Enter Section: at most N items per key between here and Leave Section. An item over the limit waits for
 * its place in the execution for a while (a lone item), then parked in the sidecar; or it leaves by Busy.
 */
import { AcquireOutcome, OverLimit } from '../../../shared/transport';
import { nodeParameter } from '../../../shared/upstream';
import { routeItems, waitMs, wholeNumber, type LimitOperation } from './run';

const ENTERED = 0;
const BUSY = 1;

export const execute: LimitOperation = async (ctx, run) => {
	const busy = nodeParameter(ctx, 'overLimit', 0, 'wait') === 'busy';
	// Only a lone item waits for its place inside the execution: the items of one run leave together, so one
	// that got a place would sit on it while another of the run waits.
	const alone = run.items.length === 1;
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
				maxHolders: wholeNumber(ctx, 'maxHolders', 'Most at Once', i, 1, [1, 10_000]),
				overLimit: busy ? OverLimit.OVER_LIMIT_REFUSE : OverLimit.OVER_LIMIT_WAIT,
				maxWaitMs: alone && !busy ? waitMs(ctx, i) : 0,
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
