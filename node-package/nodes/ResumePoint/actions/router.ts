/** The Resume Point's one execute, for every version: Start or Resume with the version's rules. */
import type { IExecuteFunctions, INodeExecutionData } from 'n8n-workflow';

import { nodeOf } from '../../../shared/run-node';
import { version1 } from '../v1/actions/version';
import { version2 } from '../v2/actions/version';
import { execute as startOrResume } from './startOrResume.operation';

export async function router(this: IExecuteFunctions): Promise<INodeExecutionData[][]> {
	return await startOrResume(this, nodeOf(this).typeVersion >= 2 ? version2 : version1);
}
