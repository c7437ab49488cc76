/** Version 1: Scope and Key are given on every item; the metadata is the key as stored. */
import { KEY_HINT, keyMeta, type GuardVersion } from '../../actions/run';

export const version1: GuardVersion = {
	defaultFingerprintFrom: 'item',
	followsInstance: false,
	claimKeyHint: KEY_HINT,
	claimKeys: (_ctx, run) => (i) => ({ key: run.text('key', i) }),
	claimOf: () => undefined,
	keyMeta,
};
