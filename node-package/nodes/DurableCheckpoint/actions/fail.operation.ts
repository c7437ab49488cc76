/** Fail Instance: the instance ends failed with a reason, or is retried per its policy. */
import { NodeOperationError } from 'n8n-workflow';

import { withDurable } from '../../../shared/node-helpers';
import { nodeParameter } from '../../../shared/upstream';
import { instanceSummary, perInstance } from './run';
import type { OperationFn } from './operations';

export const execute: OperationFn = async (ctx, run) => {
	const { node, items, client } = run;
	return await perInstance(ctx, run, 'Failing the instance', async (i, target) => {
		const message = (nodeParameter(ctx, 'errorMessage', i, '') as string).trim();
		if (!message) {
			throw new NodeOperationError(node, 'Reason is empty', {
				itemIndex: i,
				description: 'Say why the instance failed, e.g. {{ $json.error }}.',
			});
		}
		const response = await client.failInstance({
			...target,
			errorMessage: message,
			retry: nodeParameter(ctx, 'options.retry', i, false) as boolean,
		});
		return withDurable(items[i], instanceSummary(response.instance), i);
	});
};
