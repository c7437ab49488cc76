/** Version 1 of the Idempotency Guard as n8n sees it. */
import { describeVersion } from '../../../shared/versions';
import { idempotencyGuardDescription } from '../IdempotencyGuardDescription';

export const versionDescription = describeVersion(idempotencyGuardDescription, 1);
