/**
 * The one mapping from sidecar gRPC status codes to n8n errors: what the
 * author can fix becomes a NodeOperationError, a remote failure a
 * NodeApiError; both name the item and carry a hint the author can act on.
 */
import { NodeApiError, NodeOperationError, type INode, type JsonObject } from 'n8n-workflow';

/** The gRPC status codes (grpc/doc/statuscodes.md); numbers are the wire values. */
export enum GrpcStatus {
	OK = 0,
	CANCELLED = 1,
	UNKNOWN = 2,
	INVALID_ARGUMENT = 3,
	DEADLINE_EXCEEDED = 4,
	NOT_FOUND = 5,
	ALREADY_EXISTS = 6,
	PERMISSION_DENIED = 7,
	RESOURCE_EXHAUSTED = 8,
	FAILED_PRECONDITION = 9,
	ABORTED = 10,
	OUT_OF_RANGE = 11,
	UNIMPLEMENTED = 12,
	INTERNAL = 13,
	UNAVAILABLE = 14,
	DATA_LOSS = 15,
	UNAUTHENTICATED = 16,
}

/** A gRPC failure as grpc-js reports it. */
export interface GrpcFailure {
	code: number;
	details: string;
}

export function isGrpcFailure(error: unknown): error is GrpcFailure {
	return (
		typeof error === 'object' &&
		error !== null &&
		typeof (error as { code?: unknown }).code === 'number' &&
		typeof (error as { details?: unknown }).details === 'string'
	);
}

/**
 * The transport's answer when the deadline passed while the sidecar could not
 * be reached (SidecarUnreachableError in grpc/unary.ts; recognised by shape so
 * this module need not load the bundled transport).
 */
export interface SidecarUnreachable extends GrpcFailure {
	target: string;
	unreachableWithinSeconds: number;
}

export function isSidecarUnreachable(error: unknown): error is SidecarUnreachable {
	return (
		isGrpcFailure(error) &&
		typeof (error as { unreachableWithinSeconds?: unknown }).unreachableWithinSeconds === 'number'
	);
}

/** Codes the author can act on by changing the workflow or its input. */
const AUTHOR_FIXABLE = new Set<number>([
	GrpcStatus.INVALID_ARGUMENT,
	GrpcStatus.NOT_FOUND,
	GrpcStatus.ALREADY_EXISTS,
	GrpcStatus.PERMISSION_DENIED,
	GrpcStatus.RESOURCE_EXHAUSTED,
	GrpcStatus.FAILED_PRECONDITION,
	GrpcStatus.ABORTED,
	GrpcStatus.OUT_OF_RANGE,
	GrpcStatus.UNAUTHENTICATED,
]);

/** Codes that concern one item of a batch (the batch can be retried item by item). */
export const ITEM_SCOPED = new Set<number>([
	GrpcStatus.INVALID_ARGUMENT,
	GrpcStatus.NOT_FOUND,
	GrpcStatus.ALREADY_EXISTS,
	GrpcStatus.RESOURCE_EXHAUSTED,
	GrpcStatus.FAILED_PRECONDITION,
	GrpcStatus.ABORTED,
	GrpcStatus.OUT_OF_RANGE,
]);

function looksLikeTls(details: string): boolean {
	return /ssl|tls|certificate|handshake|wrong version number|self[- ]signed|unable to verify/i.test(
		details,
	);
}

/** A sentence the author can act on, per status code. */
export function hintFor(
	code: number,
	details: string,
	target: string,
	deadlineSeconds: number,
): string {
	switch (code) {
		case GrpcStatus.INVALID_ARGUMENT:
			return "Check this item's parameters: keys, step names and execution ids must be 1 to 255 characters without control characters, and JSON fields must hold valid JSON.";
		case GrpcStatus.NOT_FOUND:
			return "The instance, key or version does not exist in this credential's namespace. Put a Resume Point before this node so the instance exists, and check that the Instance Key expression gives the same key as on the Resume Point.";
		case GrpcStatus.ALREADY_EXISTS:
			return 'The record to create already exists; use the existing one or a new key.';
		case GrpcStatus.FAILED_PRECONDITION:
			if (/^session /.test(details)) {
				return 'The sidecar ended the session of this n8n process (it sent no heartbeat for the grace period: it was frozen, overloaded or cut off from the sidecar) and freed its leases, so another execution may have resumed these instances. This execution stops here and changes nothing; new executions of this process work in a new session.';
			}
			if (/a finished instance starts no more side effects/.test(details)) {
				return "This execution went on for an instance that is already finished (failed, completed or cancelled), for example past a refused Save whose On Error is 'Continue' (regular output), so the side effect was not started: nothing would resume the instance to record it. Route a Save's errors by its error output (On Error: Continue (using error output)) or an If on {{ $json.error }}, and retry the instance if it should run again.";
			}
			return 'The instance or key is in a state that forbids this operation (for example it is already completed or failed, or the idempotency key was used before with a different payload). Route such items with Continue On Fail, or use a new key.';
		case GrpcStatus.ABORTED:
			return 'Another execution moved on first (a stale expected sequence or idempotency attempt): this execution no longer holds the instance or key. Stop this branch; the newer execution continues the work.';
		case GrpcStatus.RESOURCE_EXHAUSTED:
			if (
				/DURABLE_MAX_(CHECKPOINT_FILE_BYTES|CHECKPOINT_FILES|FILE_BYTES|NAMESPACE_FILE_BYTES)/.test(
					details,
				)
			) {
				return 'A file (binary data) is over a limit the sidecar sets, named in the message; nothing of this save was stored. Raise that setting on the sidecar, or turn off Save Files on this Save if the files need not come back after a crash. Every resume would be refused the same way, so the Save fails the instance with this reason: retry it (console or CLI) after the change.';
			}
			return 'The payload is larger than the sidecar accepts (DURABLE_MAX_STATE_BYTES). Keep less (on a Save: chosen fields, or a smaller step result), or raise the limit on the sidecar. A Save, Claim or Record Result refused this way fails its instance, since every resume would be refused alike: retry it (console or CLI) after the change.';
		case GrpcStatus.OUT_OF_RANGE:
			return 'A number in this item is outside the range the sidecar accepts.';
		case GrpcStatus.UNAUTHENTICATED:
			return "The sidecar rejected the token. Set the Auth Token of the Durable Sidecar API credential to a token listed in the sidecar's DURABLE_AUTH_TOKENS.";
		case GrpcStatus.PERMISSION_DENIED:
			return 'The token may not do this. Use a token of the right namespace.';
		case GrpcStatus.UNAVAILABLE:
			if (looksLikeTls(details)) {
				return `The TLS handshake with ${target} failed. Turn TLS on in the credential only when the sidecar has DURABLE_TLS_CERT_FILE set, and give the CA certificate that signed the sidecar's certificate.`;
			}
			return `The sidecar at ${target} (or its database) cannot be reached. Check that it is running and that the credential's host, port and TLS setting match it. Retrying is safe.`;
		case GrpcStatus.DEADLINE_EXCEEDED:
			return `The sidecar did not answer within ${deadlineSeconds} s. Check the sidecar and its PostgreSQL, or raise Call Deadline in the credential. Retrying is safe.`;
		case GrpcStatus.UNIMPLEMENTED:
			return 'The sidecar does not offer this call: upgrade the sidecar to the version of this node package.';
		case GrpcStatus.CANCELLED:
			return 'The call was cancelled before the sidecar answered. Retrying is safe.';
		default:
			return 'The sidecar failed unexpectedly; its log has the details (search for the request). Retrying is safe.';
	}
}

/**
 * Errors of a batched call name the failing item as `items[N]: ...` (the
 * contract's convention); returns N, or undefined when the error is not
 * about one item.
 */
export function batchItemIndex(details: string): number | undefined {
	const match = /^items\[(\d+)\]/.exec(details);
	return match ? Number(match[1]) : undefined;
}

export interface ErrorContext {
	/** What the node was doing, e.g. "Saving the checkpoint". */
	action: string;
	/** host:port of the sidecar. */
	target: string;
	deadlineSeconds: number;
	itemIndex?: number;
	/** A sentence per status code that says more than the generic hint (e.g. for Signal's NOT_FOUND). */
	hints?: Partial<Record<number, string>>;
}

/** Turns any failure of a sidecar call into the n8n error the author should see. */
export function sidecarError(
	node: INode,
	error: unknown,
	context: ErrorContext,
): NodeOperationError | NodeApiError {
	if (error instanceof NodeOperationError || error instanceof NodeApiError) {
		return error;
	}
	const itemIndex = context.itemIndex;
	if (!isGrpcFailure(error)) {
		const message = error instanceof Error ? error.message : String(error);
		return new NodeOperationError(node, `${context.action} failed: ${message}`, { itemIndex });
	}
	const codeName = GrpcStatus[error.code] ?? `code ${error.code}`;
	if (isSidecarUnreachable(error)) {
		// A remote failure: the execution fails, so a webhook sender waiting for
		// the answer gets an error status and delivers again.
		const message = `${context.action} failed: ${error.details}`;
		const description = `The durable sidecar at ${error.target} did not accept a connection for ${error.unreachableWithinSeconds} s (the credential's Call Deadline), The call was not answered. Check that the sidecar is running and that the credential's host, port and TLS setting match it (the credential's Test button names the exact cause). Retrying the execution is safe: every call is repeat-safe.`;
		const out = new NodeApiError(
			node,
			{ code: codeName, message: error.details },
			{ message, description, itemIndex },
		);
		out.context.grpcCode = codeName;
		out.context.sidecarUnreachable = true;
		return out;
	}
	const details = error.details || codeName;
	const description =
		context.hints?.[error.code] ??
		hintFor(error.code, details, context.target, context.deadlineSeconds);
	const message = `${context.action} failed: ${details}`;
	if (AUTHOR_FIXABLE.has(error.code)) {
		const out = new NodeOperationError(node, message, { itemIndex, description });
		out.context.grpcCode = codeName;
		out.context.grpcDetails = details;
		return out;
	}
	const response: JsonObject = { code: codeName, message: details };
	const out = new NodeApiError(node, response, { message, description, itemIndex });
	out.context.grpcCode = codeName;
	out.context.grpcDetails = details;
	return out;
}
