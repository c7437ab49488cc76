/** The Durable Checkpoint: one class per version (v1/, v2/), one file per operation (actions/). */
import { VersionedSidecarNode } from '../../shared/versions';
import { router } from './actions/router';
import { durableCheckpointDescription } from './DurableCheckpointDescription';
import { DurableCheckpointV1 } from './v1/DurableCheckpointV1.node';
import { DurableCheckpointV2 } from './v2/DurableCheckpointV2.node';

export { resumePointsWithoutWaitOutputs } from './actions/awaitEvent.operation';

export class DurableCheckpoint extends VersionedSidecarNode {
	constructor() {
		super(durableCheckpointDescription, router, {
			1: new DurableCheckpointV1(),
			2: new DurableCheckpointV2(),
		});
	}
}
