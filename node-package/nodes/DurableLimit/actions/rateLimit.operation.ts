/**
 * Rate Limit: at most N items per period per key, across every n8n process. An item whose slot is
 * near waits in this execution (only when the run makes one call: items of one run leave the node
 * together); a later slot is reserved and the item parked until it, or it leaves by Busy.
 *
 * The items of one instance at one key (an order's lines after a Split Out) are one call for all of
 * them: n8n sends them on together, so they take that many slots at one time, which the Burst must
 * allow, and the instance goes on or is parked as a whole. (Parked while one of its items went on,
 * the instance was resumed, saved anew, and parked again, never finishing.)
 */
import { NodeOperationError, sleep } from 'n8n-workflow';

import { FAILED_FOR_GOOD, failInstanceForGood } from '../../../shared/node-helpers';
import { OverLimit, ThrottleOutcome, type ThrottleResponse } from '../../../shared/transport';
import { nodeParameter, type Target } from '../../../shared/upstream';
import {
	millisecondsOf,
	oncePerCall,
	rateCallsOf,
	routeItems,
	waitMs,
	wholeNumber,
	type LimitOperation,
} from './run';

const ALLOWED = 0;
const BUSY = 1;

export const execute: LimitOperation = async (ctx, run) => {
	const busy = nodeParameter(ctx, 'overLimit', 0, 'wait') === 'busy';
	// Items by the call they make: their instance and the limit's key.
	const { callOfItem, itemsOfCall } = rateCallsOf(run);
	const alone = itemsOfCall.size <= 1;
	const throttle = async (i: number, target: Target, call: string): Promise<ThrottleResponse> => {
		const { limitName, limitKey } = run.limitOf(i);
		const limit = wholeNumber(ctx, 'maxItems', 'Most Items', i, 10, [1, 1_000_000]);
		const burst = Math.max(1, wholeNumber(ctx, 'options.burst', 'Burst', i, 1, [0, limit])); // 0 means 1
		const calls = itemsOfCall.get(call) ?? 1;
		if (calls > burst) {
			const message =
				`${run.node.name}: ${calls} items of instance '${target.instanceKey}' reached the Rate Limit ` +
				`'${limitName}' [${limitKey}] in one run. n8n sends them on together, so their calls would go ` +
				`out at one time, and Burst is ${burst}.`;
			const description =
				`Set the option Burst to at least the most items one instance brings (at most Most Items, ${limit}), ` +
				'or place the Rate Limit before the node that splits an instance into items (Split Out). ' +
				FAILED_FOR_GOOD;
			await failInstanceForGood(run.client, target, `${message} ${description}`);
			throw new NodeOperationError(run.node, message, { itemIndex: i, description });
		}
		return await run.client.throttle({
			...target,
			limitName,
			limitKey,
			limit,
			periodMs: millisecondsOf(ctx, run.node, i, 'periodAmount', 'periodUnit', 'Per'),
			burst,
			maxWaitMs: alone ? waitMs(ctx, i) : 0,
			overLimit: busy ? OverLimit.OVER_LIMIT_REFUSE : OverLimit.OVER_LIMIT_WAIT,
			calls,
		});
	};
	const answerOf = oncePerCall(
		callOfItem,
		async (i, call) => await throttle(i, run.target(i), call),
	);
	return await routeItems(
		ctx,
		run,
		'Rate limiting',
		busy ? 2 : 1,
		busy ? BUSY : ALLOWED,
		async (i) => {
			const answer = await answerOf(i);
			const { limitName, limitKey } = run.limitOf(i);
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
