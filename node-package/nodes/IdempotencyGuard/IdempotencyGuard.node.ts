/** The Idempotency Guard: one class per version (v1/, v2/ for 2 and 2.1), one file per operation (actions/). */
import { VersionedSidecarNode } from '../../shared/versions';
import { router } from './actions/router';
import { idempotencyGuardDescription } from './IdempotencyGuardDescription';
import { IdempotencyGuardV1 } from './v1/IdempotencyGuardV1.node';
import { IdempotencyGuardV2 } from './v2/IdempotencyGuardV2.node';

export {
	OUTPUT_ALREADY_DONE,
	OUTPUT_FIRST_RUN,
	OUTPUT_IN_PROGRESS,
} from './actions/claim.operation';

export class IdempotencyGuard extends VersionedSidecarNode {
	constructor() {
		super(idempotencyGuardDescription, router, {
			1: new IdempotencyGuardV1(),
			2: new IdempotencyGuardV2(2),
			2.1: new IdempotencyGuardV2(2.1),
		});
	}
}
