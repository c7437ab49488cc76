/**
 * The one canonical JSON, RFC 8785 (JSON Canonicalization Scheme), and the
 * idempotency fingerprint built on it: the same bytes the sidecar computes
 * (sidecar/src/durable_sidecar/canonical.py), so a fingerprint made here
 * matches one the sidecar makes from the same document.
 *
 * Values are taken as JSON.stringify takes them (toJSON is called, undefined
 * and functions are left out of objects and become null in arrays); numbers
 * are written in ECMAScript form (1e16 as 10000000000000000, 1e21 as 1e+21),
 * object keys sorted by UTF-16 code units. NaN, Infinity, BigInt and strings
 * with a lone surrogate have no canonical form: a TypeError.
 */

import { createHash } from 'crypto';

// In a 'u' regular expression a surrogate pair is one code point, so this
// matches only a lone (unpaired) surrogate.
const LONE_SURROGATE = /\p{Cs}/u;

function serializeString(value: string): string {
	if (LONE_SURROGATE.test(value)) {
		throw new TypeError('canonical JSON: a string contains a lone surrogate (not Unicode text)');
	}
	// JSON.stringify escapes exactly as RFC 8785 asks: \b \f \n \r \t \" \\,
	// other controls as \u00xx in lower case, everything else as it is.
	return JSON.stringify(value);
}

function serialize(value: unknown, key: string, seen: Set<object>): string | undefined {
	let v = value;
	if (
		v !== null &&
		typeof v === 'object' &&
		typeof (v as { toJSON?: unknown }).toJSON === 'function'
	) {
		v = (v as { toJSON: (k: string) => unknown }).toJSON(key);
	}
	if (v === null) return 'null';
	switch (typeof v) {
		case 'boolean':
			return v ? 'true' : 'false';
		case 'number':
			if (!Number.isFinite(v)) {
				throw new TypeError(`canonical JSON: ${String(v)} is not a JSON number`);
			}
			// Number::toString is the RFC's number form; -0 is written 0.
			return Object.is(v, -0) ? '0' : String(v);
		case 'string':
			return serializeString(v);
		case 'bigint':
			throw new TypeError(
				'canonical JSON: a BigInt has no JSON form; convert it to a number or a string',
			);
		case 'undefined':
		case 'function':
		case 'symbol':
			return undefined;
		default:
			break;
	}
	const obj = v as object;
	if (seen.has(obj)) throw new TypeError('canonical JSON: the value contains a cycle');
	seen.add(obj);
	try {
		if (Array.isArray(obj)) {
			const parts = obj.map((item, i) => serialize(item, String(i), seen) ?? 'null');
			return `[${parts.join(',')}]`;
		}
		const record = obj as Record<string, unknown>;
		// The default sort compares UTF-16 code units, which is what RFC 8785 asks.
		const keys = Object.keys(record).sort();
		const parts: string[] = [];
		for (const k of keys) {
			const item = serialize(record[k], k, seen);
			if (item !== undefined) parts.push(`${serializeString(k)}:${item}`);
		}
		return `{${parts.join(',')}}`;
	} finally {
		seen.delete(obj);
	}
}

/** The RFC 8785 canonical JSON text of a value. */
export function canonicalJson(value: unknown): string {
	const out = serialize(value, '', new Set());
	if (out === undefined) throw new TypeError('canonical JSON: the value has no JSON form');
	return out;
}

/** Lower-case hex SHA-256 of the value's canonical JSON (UTF-8): the sidecar's fingerprint of the same document. */
export function fingerprintOf(value: unknown): string {
	return createHash('sha256').update(canonicalJson(value), 'utf8').digest('hex');
}
