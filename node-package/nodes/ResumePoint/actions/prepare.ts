/** The Resume Point's items before any call: each one's instance key, or why it is refused. */
import {
	NodeOperationError,
	type IExecuteFunctions,
	type INode,
	type INodeExecutionData,
	type NodeApiError,
} from 'n8n-workflow';

import { businessKey } from '../../../shared/door';
import { asNodeError, durableOf, searchFieldsOf } from '../../../shared/node-helpers';
import { parameterReader } from '../../../shared/upstream';

export type Prepared =
	| { kind: 'call'; key: string; claimToken: string; searchFields: Buffer }
	| { kind: 'duplicate'; key: string }
	| { kind: 'error'; error: NodeOperationError | NodeApiError };

export function prepareItems(
	ctx: IExecuteFunctions,
	node: INode,
	items: INodeExecutionData[],
	workflowId: string,
): Prepared[] {
	// {{ $json.… }} keys are read from the item, without n8n's expression engine.
	const instanceKeyOf = parameterReader<string>(ctx, 'instanceKey', '');
	const seen = new Set<string>();
	return items.map((item, i) => {
		try {
			const meta = durableOf(item);
			let key: string;
			let claimToken = '';
			if (
				typeof meta.claimToken === 'string' &&
				meta.claimToken &&
				typeof meta.instanceKey === 'string'
			) {
				// An item from the Resume Trigger: its claim names the instance.
				if (meta.workflowId !== undefined && String(meta.workflowId) !== workflowId) {
					throw new NodeOperationError(
						node,
						`The item was claimed for workflow ${String(meta.workflowId)}, not this one (${workflowId})`,
						{
							itemIndex: i,
							description:
								'Connect a Resume Trigger only to the Resume Point of the workflow it watches.',
						},
					);
				}
				key = meta.instanceKey;
				claimToken = meta.claimToken;
			} else {
				key = businessKey(node, instanceKeyOf(i), 'Instance Key', i);
			}
			if (seen.has(key)) return { kind: 'duplicate', key };
			seen.add(key);
			// A delivery's search fields; a Resume Trigger item has no delivery to read them from.
			const searchFields = claimToken ? Buffer.alloc(0) : searchFieldsOf(ctx, node, i);
			return { kind: 'call', key, claimToken, searchFields };
		} catch (error) {
			return { kind: 'error', error: asNodeError(node, error, i) };
		}
	});
}
