/** Schedule Resume: a durable wake-up of the instance, at a time or after a delay. */
import { withDurable } from '../../../shared/node-helpers';
import { nodeParameter } from '../../../shared/upstream';
import { instanceSummary, perInstance, secondsOf, timeOf } from './run';
import type { OperationFn } from './operations';

export const execute: OperationFn = async (ctx, run) => {
	const { node, items, client } = run;
	return await perInstance(ctx, run, 'Scheduling the resume', async (i, target) => {
		const when = nodeParameter(ctx, 'resumeWhen', i, 'after') as string;
		const response = await client.scheduleWakeUp({
			...target,
			when:
				when === 'at'
					? {
							$case: 'wakeAt',
							value: timeOf(node, ctx.getNodeParameter('wakeAt', i, '') as string, i),
						}
					: { $case: 'delaySeconds', value: secondsOf(ctx, node, i) },
		});
		return withDurable(items[i], instanceSummary(response.instance), i);
	});
};
