/** Complete Instance: the instance is finished, with a result when one is given. */
import { jsonParameter, toJsonBytes, userJson, withDurable } from '../../../shared/node-helpers';
import { nodeParameter } from '../../../shared/upstream';
import { instanceSummary, perInstance } from './run';
import type { OperationFn } from './operations';

export const execute: OperationFn = async (ctx, run) => {
	const { node, items, client } = run;
	return await perInstance(ctx, run, 'Completing the instance', async (i, target) => {
		const what = nodeParameter(ctx, 'resultWhat', i, 'none') as string;
		const result =
			what === 'item'
				? userJson(items[i])
				: what === 'json'
					? jsonParameter(node, ctx.getNodeParameter('resultJson', i, '{}'), 'Result (JSON)', i)
					: undefined;
		const response = await client.completeInstance({
			...target,
			resultJson: result === undefined ? Buffer.alloc(0) : toJsonBytes(result),
		});
		return withDurable(items[i], instanceSummary(response.instance), i);
	});
};
