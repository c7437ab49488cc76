/** Versions 2 and 2.1 of the Idempotency Guard as n8n sees them (2.1: a Key counts within its instance). */
import { describeVersion } from '../../../shared/versions';
import { idempotencyGuardDescription } from '../IdempotencyGuardDescription';

export const versionDescription = (version: 2 | 2.1) =>
	describeVersion(idempotencyGuardDescription, version);
