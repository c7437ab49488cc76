/**
 * Keeps n8n's execution record small: a durable node's output item points its
 * unchanged fields at the input item's values instead of equal copies.
 */
import type { IDataObject } from 'n8n-workflow';

/** Deep equality of JSON values (objects, arrays, strings, numbers, booleans, null). */
function sameJson(a: unknown, b: unknown): boolean {
	if (a === b) return true;
	if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return false;
	if (Array.isArray(a) !== Array.isArray(b)) return false;
	const ka = Object.keys(a);
	const kb = Object.keys(b);
	if (ka.length !== kb.length) return false;
	for (const k of ka) {
		if (!Object.prototype.hasOwnProperty.call(b, k)) return false;
		if (!sameJson((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k]))
			return false;
	}
	return true;
}

/**
 * Points the top-level fields of `next` that equal the same field of `before`
 * at `before`'s value instead of an equal copy. n8n stores an execution's
 * items with flatted, which writes an object once however often it is
 * referenced: a Save's output item (the whole instance state, parsed from the
 * sidecar's answer) then adds only what changed to the execution record
 * instead of another copy of the start item and every earlier step result.
 */
export function shareUnchanged(
	next: IDataObject,
	before: IDataObject | undefined,
	skip: string,
): void {
	if (!before) return;
	for (const key of Object.keys(next)) {
		if (key === skip || !Object.prototype.hasOwnProperty.call(before, key)) continue;
		const value = before[key];
		if (value !== next[key] && typeof value === 'object' && sameJson(next[key], value)) {
			next[key] = value;
		}
	}
}
