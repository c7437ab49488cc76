/** Version 1 of the Durable Checkpoint as n8n sees it. */
import { describeVersion } from '../../../shared/versions';
import { durableCheckpointDescription } from '../DurableCheckpointDescription';

export const versionDescription = describeVersion(durableCheckpointDescription, 1);
