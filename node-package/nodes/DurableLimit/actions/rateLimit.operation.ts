/**
 * Rate Limit: at most N items per period per key, across every n8n process. An item whose slot is
 * near waits in this execution (only when the run has one item: items of one run leave the node
 * together); a later slot is reserved and the item parked until it, or it leaves by Busy.
 */
import { sleep } from 'n8n-workflow';

import { OverLimit, ThrottleOutcome } from '../../../shared/transport';
import { nodeParameter } from '../../../shared/upstream';
import { millisecondsOf, routeItems, waitMs, type LimitOperation } from './run';

const ALLOWED = 0;
const BUSY = 1;

export const execute: LimitOperation = async (ctx, run) => {
	const busy = nodeParameter(ctx, 'overLimit', 0, 'wait') === 'busy';
	const alone = run.items.length === 1;
	return await routeItems(
		ctx,
		run,
		'Rate limiting',
		busy ? 2 : 1,
		busy ? BUSY : ALLOWED,
		async (i, target) => {
			const { limitName, limitKey } = run.limitOf(i);
			const answer = await run.client.throttle({
				...target,
				limitName,
				limitKey,
				limit: Number(nodeParameter(ctx, 'maxItems', i, 10)),
				periodMs: millisecondsOf(ctx, run.node, i, 'periodAmount', 'periodUnit', 'Per'),
				burst: Number(nodeParameter(ctx, 'options.burst', i, 1)),
				maxWaitMs: alone ? waitMs(ctx, i) : 0,
				overLimit: busy ? OverLimit.OVER_LIMIT_REFUSE : OverLimit.OVER_LIMIT_WAIT,
			});
			const limit = {
				name: limitName,
				key: limitKey,
				slotAt: answer.slotAt?.toISOString() ?? null,
			};
			switch (answer.outcome) {
				case ThrottleOutcome.THROTTLE_OUTCOME_ALLOWED:
					if (answer.waitMs > 0) await sleep(answer.waitMs);
					return {
						output: ALLOWED,
						limit: { ...limit, outcome: 'allowed', waitedMs: answer.waitMs },
					};
				case ThrottleOutcome.THROTTLE_OUTCOME_BUSY:
					return { output: BUSY, limit: { ...limit, outcome: 'busy' } };
				default:
					// Its slot is reserved; the item comes back through the Resume Point at that time.
					return undefined;
			}
		},
	);
};
