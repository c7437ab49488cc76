/** The Idempotency Guard: one class per version (v1/, v2/ for 2 and 2.1), one file per operation (actions/). */
import { VersionedNodeType, type INodeTypeDescription } from 'n8n-workflow';

import { sidecarNodeMethods } from '../../shared/credential-test';
import { router } from './actions/router';
import { idempotencyGuardDescription } from './IdempotencyGuardDescription';
import { IdempotencyGuardV1 } from './v1/IdempotencyGuardV1.node';
import { IdempotencyGuardV2 } from './v2/IdempotencyGuardV2.node';

export { OUTPUT_ALREADY_DONE, OUTPUT_FIRST_RUN, OUTPUT_IN_PROGRESS } from './actions/run';

export class IdempotencyGuard extends VersionedNodeType {
	/** Every version's parameters, `@version` rules included: what each version's own is cut from. */
	description: INodeTypeDescription = idempotencyGuardDescription;

	/** Each version runs the router; the node keeps it for callers that hold the node itself. */
	readonly execute = router;

	readonly methods = sidecarNodeMethods;

	constructor() {
		super(
			{
				1: new IdempotencyGuardV1(),
				2: new IdempotencyGuardV2(2),
				2.1: new IdempotencyGuardV2(2.1),
			},
			idempotencyGuardDescription,
		);
	}
}
