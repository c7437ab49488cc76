import { sidecarNodeMethods } from '../../../shared/credential-test';
import { NodeVersion } from '../../../shared/versions';
import { router } from '../actions/router';
import { versionDescription } from './versionDescription';

export class IdempotencyGuardV2 extends NodeVersion {
	constructor(version: 2 | 2.1) {
		super(versionDescription(version), router, sidecarNodeMethods);
	}
}
