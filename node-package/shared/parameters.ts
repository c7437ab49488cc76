/**
 * Reading node parameters cheaply: from the node's stored parameters when
 * nothing needs evaluating, straight from the item for an expression that
 * only reads one of its fields, and through n8n otherwise (with the same
 * answer). n8n's own resolution and expression engine are the largest CPU
 * cost of a durable node run (profiled in n8n 2.41).
 */
import type { IExecuteFunctions, NodeParameterValueType } from 'n8n-workflow';

import { isObject } from './node-helpers';
import { nodeOf } from './run-node';

/** `={{ $json.a.b }}`, `={{ $json["a b"][0] }}`: the whole parameter is one path into the item's JSON. */
const JSON_PATH_EXPRESSION =
	/^=\{\{\s*\$json((?:\s*\.\s*[A-Za-z_$][\w$]*|\s*\[\s*(?:'[^'\\]*'|"[^"\\]*"|\d+)\s*\])+)\s*\}\}$/;
const JSON_PATH_PART = /\.\s*([A-Za-z_$][\w$]*)|\[\s*(?:'([^'\\]*)'|"([^"\\]*)"|(\d+))\s*\]/g;

/**
 * The path of an expression that only reads a field of the item's own JSON
 * (`{{ $json.body.orderId }}`, the usual Instance Key), or undefined for any
 * other expression.
 */
export function jsonPathOf(expression: string): string[] | undefined {
	const match = JSON_PATH_EXPRESSION.exec(expression);
	if (!match) return undefined;
	const path: string[] = [];
	for (const part of match[1].matchAll(JSON_PATH_PART)) {
		path.push(part[1] ?? part[2] ?? part[3] ?? part[4]);
	}
	return path.length ? path : undefined;
}

/**
 * The value at `path` in `json` when it is a string, number or boolean;
 * undefined otherwise (a missing field, an object), where n8n's own
 * evaluation decides (its value, or its error).
 */
export function scalarAt(json: unknown, path: string[]): string | number | boolean | undefined {
	let value: unknown = json;
	for (const part of path) {
		if (!isObject(value) && !Array.isArray(value)) return undefined;
		if (!Object.prototype.hasOwnProperty.call(value, part)) return undefined;
		value = (value as Record<string, unknown>)[part];
	}
	return typeof value === 'string' || typeof value === 'number' || typeof value === 'boolean'
		? value
		: undefined;
}

/**
 * What the node stores for parameter `name` ("options.key" names an option of
 * a collection), as it is, expressions unevaluated; and, for an option, the
 * collection that holds it (undefined for a top-level parameter).
 */
function storedParameter(
	ctx: IExecuteFunctions,
	name: string,
): { stored: unknown; collection: unknown } {
	const parts = name.split('.');
	let parent: unknown;
	let stored: unknown = nodeOf(ctx).parameters;
	for (const part of parts) {
		parent = stored;
		stored = isObject(stored) ? stored[part] : undefined;
	}
	return { stored, collection: parts.length > 1 ? parent : undefined };
}

/**
 * A parameter read once per node run unless the author made it an expression
 * (then per item, as n8n resolves it): keeps expression evaluation off the
 * per-item path for the usual plain values. An expression that only reads a
 * field of the item (`{{ $json.body.orderId }}`) is read from the item
 * directly: the same value n8n's expression engine would give, without
 * starting it (in n8n 2.41 one evaluation costs milliseconds of CPU).
 */
export function parameterReader<T extends NodeParameterValueType | object>(
	ctx: IExecuteFunctions,
	name: string,
	fallback: T,
): (itemIndex: number) => T {
	const raw = storedParameter(ctx, name).stored;
	if (typeof raw === 'string' && raw.startsWith('=')) {
		const path = jsonPathOf(raw);
		if (path) {
			const items = ctx.getInputData();
			return (itemIndex) => {
				const value = scalarAt(items[itemIndex]?.json, path);
				return value !== undefined
					? (value as T)
					: (ctx.getNodeParameter(name, itemIndex, fallback) as T);
			};
		}
		return (itemIndex) => ctx.getNodeParameter(name, itemIndex, fallback) as T;
	}
	let once: { value: T } | undefined;
	return () => {
		once ??= { value: nodeParameter<T>(ctx, name, 0, fallback) };
		return once.value;
	};
}

/** A string that is no expression, a number, a boolean, null, or arrays and objects of these. */
function isPlain(value: unknown): boolean {
	if (value === null || typeof value === 'number' || typeof value === 'boolean') return true;
	if (typeof value === 'string') return value.charAt(0) !== '=';
	if (Array.isArray(value)) return value.every(isPlain);
	if (isObject(value)) return Object.values(value).every(isPlain);
	return false;
}

/**
 * What ctx.getNodeParameter(name, itemIndex, fallback) answers, read from the
 * node itself when nothing needs evaluating: a stored value that holds no
 * expression (n8n returns it as it is: our properties declare no validateType),
 * or an option missing from a collection that is there (n8n's lookup gives the
 * fallback). Anything else (an expression, a parameter the node does not
 * have) goes to n8n. Saves n8n's resolution and its search of the description
 * per call; profiled in n8n 2.41 a few hundredths of a millisecond each, about
 * 45 calls per durable order.
 */
export function nodeParameter<T = unknown>(
	ctx: IExecuteFunctions,
	name: string,
	itemIndex: number,
	fallback?: unknown,
): T {
	const { stored: raw, collection } = storedParameter(ctx, name);
	if (raw !== undefined && isPlain(raw)) {
		return (typeof raw === 'object' && raw !== null ? structuredClone(raw) : raw) as T;
	}
	if (raw === undefined && isObject(collection) && fallback !== undefined) {
		if (isPlain(fallback)) return fallback as T;
	}
	return (
		fallback === undefined
			? ctx.getNodeParameter(name, itemIndex)
			: ctx.getNodeParameter(name, itemIndex, fallback as NodeParameterValueType | object)
	) as T;
}
