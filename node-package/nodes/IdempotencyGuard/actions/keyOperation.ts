/** Record Result and Release: one call per item on the key its Claim took. */
import { NodeOperationError, type IExecuteFunctions, type INodeExecutionData } from 'n8n-workflow';

import { failuresOf, perItem, settledItems } from '../../../shared/batch';
import {
	failForSetup,
	failInstanceForGood,
	IDEMPOTENCY_FIELD,
	isLimitRefusal,
	isObject,
} from '../../../shared/node-helpers';
import type { IdempotencyKey } from '../../../shared/transport';
import { nodeParameter, noteGuardRun } from '../../../shared/upstream';
import { withIdempotency, type GuardRun } from './run';

/** The key an item acts on: given, or from the Claim it descends from. */
export interface ClaimedKey {
	scope: string;
	key: string;
	attempt: number;
}

/**
 * Runs `call` on each item's key; the output items carry the key's metadata and `outcome`.
 * `refused`: what an item's instance is failed with when the sidecar refuses its call for a limit
 * (RESOURCE_EXHAUSTED), which every resume would meet again (as a Save's refusal, refused.ts).
 */
export async function onClaimedKeys(
	ctx: IExecuteFunctions,
	run: GuardRun,
	action: string,
	outcome: string,
	call: (i: number, claimed: ClaimedKey) => Promise<IdempotencyKey | undefined>,
	refused?: (claimed: ClaimedKey, error: Error) => string,
): Promise<INodeExecutionData[][]> {
	const { items, client, node, executionId, version } = run;
	const keys = new Map<number, ClaimedKey>();
	const settled = await perItem(ctx, client, action, items.length, async (i) => {
		const claimed = claimedKey(ctx, run, i);
		keys.set(i, claimed);
		return await call(i, claimed);
	});
	for (let i = 0; refused && i < items.length; i++) {
		const result = settled[i];
		const claimed = keys.get(i);
		if (result.ok || !claimed || !isLimitRefusal(result.error)) continue;
		let target;
		try {
			target = run.targetAt(i);
		} catch {
			continue; // no instance to fail: the refusal is what the author sees
		}
		if (target) await failInstanceForGood(client, target, refused(claimed, result.error));
	}
	if (!ctx.continueOnFail()) {
		await failForSetup(client, node, failuresOf(settled), run.targetAt);
	}
	const out = settledItems(ctx, items, settled, (key, i) =>
		withIdempotency(items[i], { ...version.keyMeta(key), outcome }, i),
	);
	noteGuardRun(executionId, node.name, [out]);
	return [out];
}

function claimedKey(ctx: IExecuteFunctions, run: GuardRun, i: number): ClaimedKey {
	const { items, node, text } = run;
	const claim = run.version.claimOf(run, i);
	const scope = text('scope', i, !claim) || claim!.scope;
	const key = text('key', i, !claim) || claim!.key;
	const given = Number(nodeParameter(ctx, 'attempt', i, 0));
	const fromItem = items[i].json[IDEMPOTENCY_FIELD];
	const attempt =
		given || (claim ? claim.attempt : Number(isObject(fromItem) ? fromItem.attempt : 0));
	if (!Number.isInteger(attempt) || attempt < 1) {
		throw new NodeOperationError(
			node,
			`Attempt must be the claim's attempt number (1 or more), got ${String(attempt)}`,
			{
				itemIndex: i,
				description:
					"Set Attempt to {{ $json.idempotency.attempt }} from the Claim, or reach it with $('Idempotency Guard').item.json.idempotency.attempt.",
			},
		);
	}
	return { scope, key, attempt };
}
