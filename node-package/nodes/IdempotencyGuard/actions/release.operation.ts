/** Release: the side effect failed; the key may be claimed again. */
import type { IExecuteFunctions, INodeExecutionData } from 'n8n-workflow';

import { nodeParameter } from '../../../shared/upstream';
import { onClaimedKeys } from './keyOperation';
import type { GuardRun } from './run';

export async function execute(
	ctx: IExecuteFunctions,
	run: GuardRun,
): Promise<INodeExecutionData[][]> {
	const { client } = run;
	return await onClaimedKeys(ctx, run, 'Releasing the key', 'released', async (i, claimed) => {
		const message = nodeParameter(ctx, 'errorMessage', i, '') as string;
		return (await client.releaseKey({ ...claimed, errorMessage: message })).key;
	});
}
