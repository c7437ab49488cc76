/** A warning for a Webhook that answers its sender before the Resume Point stores the delivery. */
import type { IExecuteFunctions } from 'n8n-workflow';

import { nodeOf } from '../../../shared/run-node';

/**
 * A Webhook before this Resume Point that answers Immediately (the Webhook
 * node's default Respond) has told the sender 200 before the delivery is
 * stored: a delivery that meets a sidecar outage then fails here and is lost,
 * and the sender does not retry it. Said as a warning on this node's output
 * (n8n's execution hints: the editor shows it after a run, and it stays in the
 * execution's data), once per run; the run goes on as before.
 */
export function warnOfAnEarlyAnswer(ctx: IExecuteFunctions): void {
	if (typeof ctx.addExecutionHints !== 'function' || typeof ctx.getParentNodes !== 'function') {
		return;
	}
	let early: string[];
	try {
		early = ctx
			.getParentNodes(nodeOf(ctx).name, { includeNodeParameters: true })
			.filter(
				(p) =>
					!p.disabled &&
					p.type === WEBHOOK_TYPE &&
					(p.parameters?.responseMode ?? 'onReceived') === 'onReceived',
			)
			.map((p) => p.name);
	} catch {
		return;
	}
	if (early.length === 0) return;
	ctx.addExecutionHints({
		type: 'warning',
		location: 'outputPane',
		message: `The Webhook '${early.join("', '")}' answers Immediately, before this Resume Point stores the delivery: a delivery that arrives while the sidecar is down is answered 200 and lost. Set its Respond to Using 'Respond to Webhook' Node and put a Respond to Webhook on this node's Start output (or When Last Node Finishes).`,
	});
}

const WEBHOOK_TYPE = 'n8n-nodes-base.webhook';
