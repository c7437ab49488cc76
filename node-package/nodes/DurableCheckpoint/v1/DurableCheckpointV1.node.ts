import { sidecarNodeMethods } from '../../../shared/credential-test';
import { NodeVersion } from '../../../shared/versions';
import { router } from '../actions/router';
import { versionDescription } from './versionDescription';

export class DurableCheckpointV1 extends NodeVersion {
	constructor() {
		super(versionDescription, router, sidecarNodeMethods);
	}
}
