/**
 * Enter Section: at most N items per key between here and Leave Section. An item over the limit waits for
 * its place in the execution for a while (a lone item), then parked in the sidecar; or it leaves by Busy.
 *
 * With Rate Limit Too, an item given its place takes a slot of the rate of the same name and key in the
 * same sidecar call (one node and one call where Enter Section and Rate Limit took two): it waits for a
 * near slot in the execution, and is parked until a later one. The items of one instance at one key are one
 * call, as in Rate Limit; more than one would go out at one time, which a rate of one at a time refuses.
 */
import { sleep } from 'n8n-workflow';

import { setupError } from '../../../shared/node-helpers';
import { AcquireOutcome, OverLimit } from '../../../shared/transport';
import { nodeParameter } from '../../../shared/upstream';
import {
	millisecondsOf,
	oncePerCall,
	rateCallsOf,
	routeItems,
	waitMs,
	wholeNumber,
	type LimitOperation,
} from './run';

const ENTERED = 0;
const BUSY = 1;

export const execute: LimitOperation = async (ctx, run) => {
	const busy = nodeParameter(ctx, 'overLimit', 0, 'wait') === 'busy';
	const withRate = nodeParameter(ctx, 'rateToo', 0, false) === true;
	// Items by the call they make: with a rate, an instance's items at one key are one call; without, each
	// item asks (an instance's second item finds its place held). With Busy, a rate is refused (rateOf).
	const grouped = withRate && !busy;
	const { callOfItem, itemsOfCall } = grouped
		? rateCallsOf(run)
		: { callOfItem: run.items.map((_, i) => String(i)), itemsOfCall: new Map<string, number>() };
	// Only a lone call waits inside the execution: the items of one run leave together, so one that got a
	// place would sit on it while another of the run waits.
	const alone = grouped ? itemsOfCall.size <= 1 : run.items.length === 1;
	const rateOf = (i: number, call: string) => {
		if (!withRate) return undefined;
		if (busy) {
			throw setupError(
				run.node,
				'Rate Limit Too needs Over the Limit: Wait',
				i,
				'An item refused its slot would keep its place. Set Over the Limit to Wait, or turn Rate Limit Too off and place a Rate Limit (with Leave by Busy) after this node.',
			);
		}
		const calls = itemsOfCall.get(call) ?? 1;
		if (calls > 1) {
			const { limitName, limitKey } = run.limitOf(i);
			throw setupError(
				run.node,
				`${calls} items of instance '${run.target(i).instanceKey}' reached the section '${limitName}' [${limitKey}] with Rate Limit Too in one run. n8n sends them on together, so their calls would go out at one time, over a rate of one at a time`,
				i,
				'Turn Rate Limit Too off and place a Rate Limit with the option Burst after this node, or enter the section before the node that splits an instance into items (Split Out).',
			);
		}
		return {
			limit: wholeNumber(ctx, 'maxItems', 'Most Items', i, 10, [1, 1_000_000]),
			periodMs: millisecondsOf(ctx, run.node, i, 'periodAmount', 'periodUnit', 'Per'),
			burst: 1,
			calls,
		};
	};
	const answerOf = oncePerCall(callOfItem, async (i, call) => {
		const { limitName, limitKey } = run.limitOf(i);
		return await run.client.acquireSlot({
			...run.target(i),
			limitName,
			limitKey,
			maxHolders: wholeNumber(ctx, 'maxHolders', 'Most at Once', i, 1, [1, 10_000]),
			overLimit: busy ? OverLimit.OVER_LIMIT_REFUSE : OverLimit.OVER_LIMIT_WAIT,
			maxWaitMs: alone && !busy ? waitMs(ctx, i) : 0,
			rate: rateOf(i, call),
		});
	});
	return await routeItems(
		ctx,
		run,
		'Entering the section',
		busy ? 2 : 1,
		busy ? BUSY : ENTERED,
		async (i) => {
			const answer = await answerOf(i);
			const { limitName, limitKey } = run.limitOf(i);
			const limit = {
				name: limitName,
				key: limitKey,
				holders: answer.holders,
				waiters: answer.waiters,
				...(withRate ? { slotAt: answer.slotAt?.toISOString() ?? null } : {}),
			};
			switch (answer.outcome) {
				case AcquireOutcome.ACQUIRE_OUTCOME_ACQUIRED:
					if (answer.waitMs > 0) await sleep(answer.waitMs);
					return {
						output: ENTERED,
						limit: withRate
							? { ...limit, outcome: 'entered', waitedMs: answer.waitMs }
							: { ...limit, outcome: 'entered' },
					};
				case AcquireOutcome.ACQUIRE_OUTCOME_BUSY:
					return { output: BUSY, limit: { ...limit, outcome: 'busy' } };
				default:
					// Queued (or its rate slot reserved) and parked: the item comes back through the Resume
					// Point when a place (or the slot) is its.
					return undefined;
			}
		},
	);
};
