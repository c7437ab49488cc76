/**
 * The door: which business keys an item may carry, and the HTTP status a
 * webhook sender should get for an item that failed at the Resume Point.
 *
 * A delivery that can never succeed (a key that is an object, an array,
 * empty, too long, with control characters; another delivery under a key in
 * use) is refused before any call, with a status in the 4xx range, so the
 * sender stops retrying it; one that may succeed later (the sidecar or its
 * database unreachable, a workflow the author must fix) gets a 5xx, so the
 * sender delivers it again.
 */
import {
	NodeOperationError,
	type INode,
	type INodeExecutionData,
	type NodeApiError,
} from 'n8n-workflow';

import { GrpcStatus } from './errors';

/** The sidecar's limit on identifiers (characters, as the contract counts them: code points). */
export const MAX_KEY_LENGTH = 255;

/** C0 controls, DEL and C1 controls: never in a key (the contract's identifier rule). */
// eslint-disable-next-line no-control-regex
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/;
/** What JavaScript's String() makes of an object: a key that collapsed upstream. */
const OBJECT_TEXT = /^\[object [A-Za-z]*\]$/;

/** A NodeOperationError whose item a webhook sender should be answered `httpStatus` for. */
export function refusal(
	node: INode,
	message: string,
	description: string,
	itemIndex: number,
	httpStatus: number,
): NodeOperationError {
	const error = new NodeOperationError(node, message, { itemIndex, description });
	error.context.httpStatus = httpStatus;
	return error;
}

function hasLoneSurrogate(text: string): boolean {
	for (let i = 0; i < text.length; i++) {
		const unit = text.charCodeAt(i);
		if (unit >= 0xd800 && unit <= 0xdbff) {
			const next = text.charCodeAt(i + 1);
			if (next >= 0xdc00 && next <= 0xdfff) {
				i++;
				continue;
			}
			return true;
		}
		if (unit >= 0xdc00 && unit <= 0xdfff) return true;
	}
	return false;
}

/**
 * Why a value is no key, as `kind`: a list, an object, a boolean or a number that is not finite, or text that
 * String() made of an object upstream.
 */
export type NotAKey = { why: string; kind: 'list' | 'object' | 'value' | 'objectText' };

/**
 * The text a key parameter gives ('' when empty): a string trimmed, a finite number's decimal text (12345 and
 * "12345" are one key); or why it is no key, `noun` naming what it should be. Never String() of an object: two
 * items whose ids are objects would both become "[object Object]". Shared by every node that reads a key.
 */
export function keyText(raw: unknown, noun: string): { text: string } | NotAKey {
	if (Array.isArray(raw)) return { why: `is a list, not ${noun}`, kind: 'list' };
	if (typeof raw === 'object' && raw !== null) {
		return { why: `is an object, not ${noun}`, kind: 'object' };
	}
	if (typeof raw === 'boolean' || (typeof raw === 'number' && !Number.isFinite(raw))) {
		return { why: `is ${String(raw)}, not ${noun}`, kind: 'value' };
	}
	const text =
		raw === undefined || raw === null ? '' : typeof raw === 'string' ? raw.trim() : String(raw);
	if (OBJECT_TEXT.test(text)) {
		return {
			why: `reads "${text}": an object was turned into text before this node`,
			kind: 'objectText',
		};
	}
	return { text };
}

/**
 * The business key an item gives for `field` ("Instance Key"), or a refusal
 * (HTTP 400) saying why it is none (keyText's rules, and never empty, too
 * long or with control characters).
 */
export function businessKey(node: INode, raw: unknown, field: string, itemIndex: number): string {
	const refuse = (why: string, fix: string): NodeOperationError =>
		refusal(node, `${field} ${why}`, fix, itemIndex, 400);
	const expression =
		'Set it to an expression that gives the business key as text, e.g. {{ $json.body.orderId }}, and check the body before this node (docs/intake.md: The door).';
	const read = keyText(raw, 'a business key');
	if ('why' in read) {
		const more = {
			list: ' A list never names one instance.',
			object: ' Two objects would otherwise become one key.',
			value: '',
			objectText: " Pick the object's identifying field instead.",
		}[read.kind];
		throw refuse(read.why, `${expression}${more}`);
	}
	const key = read.text;
	if (!key) throw refuse('is empty for this item', expression);
	const length = [...key].length;
	if (length > MAX_KEY_LENGTH) {
		throw refuse(
			`is ${length} characters long; the limit is ${MAX_KEY_LENGTH}`,
			'Use a shorter business key (an id, not a document), or a hash of it.',
		);
	}
	if (CONTROL.test(key) || hasLoneSurrogate(key)) {
		throw refuse(
			'contains control characters or a broken Unicode character',
			'A business key is printable text: check what the sender put in this field.',
		);
	}
	return key;
}

/**
 * Whether an item is a delivery from n8n's Webhook node (its `body` and `headers`): the
 * deliveries Different Delivery judges. Items of other triggers are not deliveries with a
 * sender to answer (a Schedule Trigger that reads an order again sees newer fields, rightly).
 */
export function isWebhookDelivery(item: INodeExecutionData): boolean {
	const json = item.json as Record<string, unknown>;
	const headers = json.headers;
	return (
		'body' in json && typeof headers === 'object' && headers !== null && !Array.isArray(headers)
	);
}

/** Sidecar refusals of what the sender sent (its body, a signal's payload): the same answer every time. */
const SENDER_FIELDS = /^(start_item_json|instance_key|payload_json)\b/;

/** gRPC code names (as errors.ts puts them in context.grpcCode) a node answers with its own status. */
export type SenderStatuses = Partial<Record<keyof typeof GrpcStatus, number>>;

/**
 * The HTTP status a webhook sender should get for an item that failed at the
 * Resume Point or a Durable Instance node: a refusal's own (400, 422), the
 * node's own for a sidecar code (`own`: a signal's 404 and 409), 413 or 400
 * when the sidecar refused the delivery's body itself, 503 for anything that
 * may succeed on a later delivery (the sidecar or its database away, a
 * deadline), 500 for the rest (a workflow its author must fix: the sender
 * should deliver again later).
 */
export function senderStatus(error: NodeOperationError | Error, own: SenderStatuses = {}): number {
	const context = (error as { context?: Record<string, unknown> }).context ?? {};
	if (typeof context.httpStatus === 'number') return context.httpStatus;
	if (context.sidecarUnreachable === true) return 503;
	const code = context.grpcCode;
	const mine = typeof code === 'string' ? own[code as keyof typeof GrpcStatus] : undefined;
	if (mine !== undefined) return mine;
	const details = typeof context.grpcDetails === 'string' ? context.grpcDetails : '';
	if (code === GrpcStatus[GrpcStatus.RESOURCE_EXHAUSTED] && SENDER_FIELDS.test(details)) return 413;
	if (code === GrpcStatus[GrpcStatus.INVALID_ARGUMENT] && SENDER_FIELDS.test(details)) return 400;
	if (
		code === GrpcStatus[GrpcStatus.UNAVAILABLE] ||
		code === GrpcStatus[GrpcStatus.DEADLINE_EXCEEDED] ||
		code === GrpcStatus[GrpcStatus.CANCELLED] ||
		code === GrpcStatus[GrpcStatus.ABORTED]
	) {
		return 503;
	}
	return 500;
}

/**
 * A failed item as n8n's error output keeps it, from any node under Continue
 * On Fail: `error` and `details` only (details.httpStatus: what a Respond to
 * Webhook there answers the sender; details.description: what to do).
 * n8n replaces the JSON of an item that carries an `error` object with
 * `{ error: message }` (WorkflowExecute.normalizeNodeErrors in n8n 2.41), so
 * the status would be lost there; an item whose JSON holds only these keys
 * is routed to the error output all the same, merged with the item it came
 * from (the delivery's body stays readable).
 */
export function refusedItem(
	failure: NodeOperationError | NodeApiError,
	i: number,
	own: SenderStatuses = {},
): INodeExecutionData {
	return {
		json: {
			error: failure.message,
			details: { httpStatus: senderStatus(failure, own), description: failure.description ?? null },
		},
		pairedItem: { item: i },
	};
}
