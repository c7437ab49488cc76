/** Version 2.1: a Key the author set counts within its instance. */
import type { INode } from 'n8n-workflow';

import { MAX_KEY_LENGTH } from '../../../../shared/door';
import { setupError } from '../../../../shared/node-helpers';

/**
 * A Key the author set, made unique to its instance: the JSON array [instance key, key], so
 * no two (instance, key) pairs meet in one stored key and the derived key sent downstream
 * differs per instance too (two orders with line sku-1 are two charges).
 */
export function keyWithinInstance(
	node: INode,
	instanceKey: string,
	key: string,
	itemIndex: number,
): string {
	const scoped = JSON.stringify([instanceKey, key]);
	if (scoped.length > MAX_KEY_LENGTH) {
		throw setupError(
			node,
			`The Key with its instance key is ${scoped.length} characters long; the limit is ${MAX_KEY_LENGTH}`,
			itemIndex,
			'Use a shorter Key, or turn on the option Share Key Across Instances when the Key alone is unique (e.g. a line item ID from your shop).',
		);
	}
	return scoped;
}
