/** Debounce: of a burst of items per key, one goes on (the last or the first) once the burst went quiet; the others leave by Debounced. */
import { DebounceKeep, DebounceOutcome } from '../../../shared/transport';
import { nodeParameter } from '../../../shared/upstream';
import { millisecondsOf, routeItems, type LimitOperation } from './run';

const RUN = 0;
const DEBOUNCED = 1;

export const execute: LimitOperation = async (ctx, run) =>
	await routeItems(ctx, run, 'Debouncing', 2, DEBOUNCED, async (i, target) => {
		const { limitName, limitKey } = run.limitOf(i);
		const answer = await run.client.debounce({
			...target,
			limitName,
			limitKey,
			quietMs: millisecondsOf(ctx, run.node, i, 'quietAmount', 'quietUnit', 'Quiet For'),
			maxWaitMs: millisecondsOf(
				ctx,
				run.node,
				i,
				'options.maxWaitAmount',
				'quietUnit',
				'Longest Burst',
				{
					zero: true,
				},
			),
			keep:
				nodeParameter(ctx, 'keep', i, 'last') === 'first'
					? DebounceKeep.DEBOUNCE_KEEP_FIRST
					: DebounceKeep.DEBOUNCE_KEEP_LAST,
		});
		const limit = { name: limitName, key: limitKey };
		switch (answer.outcome) {
			case DebounceOutcome.DEBOUNCE_OUTCOME_RUN:
				return { output: RUN, limit: { ...limit, outcome: 'run' } };
			case DebounceOutcome.DEBOUNCE_OUTCOME_DEBOUNCED:
				return { output: DEBOUNCED, limit: { ...limit, outcome: 'debounced' } };
			default:
				// Parked until its burst ends; it comes back through the Resume Point to learn its fate.
				return undefined;
		}
	});
