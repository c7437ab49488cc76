/** Record Result: the side effect ran; its result is the key's, replayed to later claims. */
import type { IExecuteFunctions, INodeExecutionData } from 'n8n-workflow';

import { jsonParameter, toJsonBytes, userJson } from '../../../shared/node-helpers';
import { nodeParameter } from '../../../shared/upstream';
import { onClaimedKeys } from './keyOperation';
import type { GuardRun } from './run';

export async function execute(
	ctx: IExecuteFunctions,
	run: GuardRun,
): Promise<INodeExecutionData[][]> {
	const { node, items, client } = run;
	return await onClaimedKeys(
		ctx,
		run,
		'Recording the result',
		'recorded',
		async (i, claimed) => {
			const what = nodeParameter(ctx, 'resultWhat', i, 'item') as string;
			const result =
				what === 'json'
					? jsonParameter(node, ctx.getNodeParameter('resultJson', i, '{}'), 'Result (JSON)', i)
					: userJson(items[i]);
			return (await client.completeKey({ ...claimed, resultJson: toJsonBytes(result) })).key;
		},
		// The side effect ran but its key stays claimed: a retry of the instance runs it again.
		({ scope, key }, error) =>
			`${node.name}: the result of key '${key}' of scope '${scope}' not recorded. ${error.message}. ` +
			'Refused by the sidecar. The side effect before it ran, but its key is not completed, so a retry ' +
			'of the instance runs it again: check it was done before you retry, or record a smaller result.',
	);
}
