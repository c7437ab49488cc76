/** Fail Instance: the instance ends failed with a reason, or is retried per its policy. */
import { withDurable } from '../../../shared/node-helpers';
import { nodeParameter } from '../../../shared/upstream';
import { instanceSummary, perInstance, requiredText } from './run';
import type { OperationFn } from './operations';

/** What an empty Reason says. */
const REASON_HINT = 'Say why the instance failed, e.g. {{ $json.error }}.';

export const execute: OperationFn = async (ctx, run) => {
	const { items, client } = run;
	return await perInstance(ctx, run, 'Failing the instance', async (i, target) => {
		const message = (nodeParameter(ctx, 'errorMessage', i, '') as string).trim();
		requiredText(run, message, i, 'Reason is empty', REASON_HINT);
		const response = await client.failInstance({
			...target,
			errorMessage: message,
			retry: nodeParameter(ctx, 'options.retry', i, false) as boolean,
		});
		return withDurable(items[i], instanceSummary(response.instance), i);
	});
};
