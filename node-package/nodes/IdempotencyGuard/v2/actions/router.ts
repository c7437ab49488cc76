/**
 * Version 2: a Claim belongs to the instance found upstream (an empty Key is the instance key);
 * Record Result and Release take what they are not given from the Claim before them.
 */
import { NodeOperationError, type IExecuteFunctions } from 'n8n-workflow';

import { parameterReader, type InstanceRef } from '../../../../shared/upstream';
import { nodeOf } from '../../../../shared/run-node';
import { smallKeyMeta, type ClaimKey, type GuardRun, type GuardVersion } from '../../actions/run';
import { keyWithinInstance } from './keyWithinInstance';

export const version2: GuardVersion = {
	defaultFingerprintFrom: 'instance',
	followsInstance: true,
	claimKeyHint:
		'The Key you set gave nothing for this item: check the field it reads (e.g. {{ $json.line.sku }}), or clear Key to use the instance key.',
	claimKeys,
	claimOf: (run, i) => {
		const claim = run.upstream.claim(i, run.items[i]);
		if (!claim && !(run.text('scope', i, false) && run.text('key', i, false))) {
			throw new NodeOperationError(
				run.node,
				'No Idempotency Guard Claim before this node for this item',
				{
					itemIndex: i,
					description:
						'Connect this node after the First Run output of a Claim (nodes in between may replace the item), or give Scope, Key and Attempt.',
				},
			);
		}
		return claim;
	},
	keyMeta: smallKeyMeta,
};

function claimKeys(ctx: IExecuteFunctions, run: GuardRun) {
	const { node, items, upstream } = run;
	// Version 2 shared a Key across instances; from 2.1 a Key counts within its instance.
	const shareKeyOf = parameterReader<boolean>(
		ctx,
		'options.shareKeyAcrossInstances',
		nodeOf(ctx).typeVersion < 2.1,
	);
	// An empty Key means the instance key, but only when the author left it empty: a Key
	// expression that gives nothing for an item (a misspelt field) would otherwise turn every
	// line's claim into the instance's one claim, and all lines but the first would leave by Busy.
	const keySet = String(node.parameters.key ?? '').trim() !== '';
	return (i: number, from: string): ClaimKey => {
		let key = run.text('key', i, keySet);
		const given = key !== '';
		const instance: InstanceRef | undefined =
			!key || from === 'instance'
				? upstream.requireInstance(
						i,
						items[i],
						from === 'instance'
							? 'Or give a Key and set Fingerprint From to something other than Instance.'
							: 'Or give a Key.',
					)
				: upstream.instance(i, items[i]);
		key ||= instance!.instanceKey;
		if (given && instance && shareKeyOf(i) !== true) {
			key = keyWithinInstance(node, instance.instanceKey, key, i);
		}
		return { key, instance };
	};
}
