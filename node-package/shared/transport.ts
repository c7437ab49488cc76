/**
 * The one gRPC transport of the package, as the nodes import it: the
 * process-wide client per credential (grpc/clients.ts) with its channel
 * (grpc/channel.ts), retried unary calls within a deadline (grpc/unary.ts),
 * the health check (grpc/health.ts), the credential's connection
 * (grpc/connection.ts), and the generated enums and messages the nodes use.
 *
 * The modules under ./grpc and the generated code under ./gen are the only
 * code that imports @grpc/grpc-js, and only this module imports them: the
 * build bundles them all into dist/shared/transport.js (then drops their own
 * files from dist), so the installed package has no runtime dependencies.
 */
export { SidecarClient } from './grpc/client';
export {
	closeAllSidecarClients,
	getSidecarClient,
	newSidecarClient,
	sidecarClientFor,
} from './grpc/clients';
export {
	addressesOf,
	connectionFromCredentials,
	DEFAULT_DEADLINE_SECONDS,
	targetOf,
	type SidecarAddress,
	type SidecarConnection,
} from './grpc/connection';
export { ServingStatus } from './grpc/health';
export { SidecarUnreachableError } from './grpc/unary';

export { InstanceStatus, RunState } from './gen/durable/v1/common';
export type { Checkpoint, Event, FileRef, Instance, RetryPolicy } from './gen/durable/v1/common';
export { AwaitOutcome, SignalOutcome } from './gen/durable/v1/events';
export type { AwaitEventResponse, SignalInstanceResponse } from './gen/durable/v1/events';
export { ClaimOutcome, KeyStatus } from './gen/durable/v1/idempotency';
export type { IdempotencyKey, ClaimItem, ClaimResult } from './gen/durable/v1/idempotency';
export { ResumeReason, StartOutcome } from './gen/durable/v1/instance';
export {
	AcquireOutcome,
	DebounceKeep,
	DebounceOutcome,
	OverLimit,
	ThrottleOutcome,
} from './gen/durable/v1/limits';
export type { ThrottleResponse } from './gen/durable/v1/limits';
export type {
	ResumableInstance,
	StartOrResumeResponse,
	WatchResumableResponse,
} from './gen/durable/v1/instance';
export { StateMode } from './gen/durable/v1/checkpoint';
export type { KeyCompletion, SaveCheckpointItem } from './gen/durable/v1/checkpoint';
export type { Version } from './gen/durable/v1/version';

export type { ServiceError, ClientReadableStream } from '@grpc/grpc-js';
