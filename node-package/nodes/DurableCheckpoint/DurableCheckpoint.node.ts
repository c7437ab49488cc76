/** The Durable Checkpoint: one class per version (v1/, v2/), one file per operation (actions/). */
import { VersionedNodeType, type INodeTypeDescription } from 'n8n-workflow';

import { sidecarNodeMethods } from '../../shared/credential-test';
import { router } from './actions/router';
import { durableCheckpointDescription } from './DurableCheckpointDescription';
import { DurableCheckpointV1 } from './v1/DurableCheckpointV1.node';
import { DurableCheckpointV2 } from './v2/DurableCheckpointV2.node';

export { resumePointsWithoutWaitOutputs } from './actions/awaitEvent.operation';

export class DurableCheckpoint extends VersionedNodeType {
	/** Every version's parameters, `@version` rules included: what each version's own is cut from. */
	description: INodeTypeDescription = durableCheckpointDescription;

	/** Each version runs the router; the node keeps it for callers that hold the node itself. */
	readonly execute = router;

	readonly methods = sidecarNodeMethods;

	constructor() {
		super(
			{ 1: new DurableCheckpointV1(), 2: new DurableCheckpointV2() },
			durableCheckpointDescription,
		);
	}
}
