/* eslint-disable @n8n/community-nodes/no-restricted-globals, @n8n/community-nodes/no-restricted-imports, @n8n/community-nodes/no-dangerous-functions -- test code runs in Node, never inside n8n */
/**
 * RFC 8785 in TypeScript: the RFC's vectors, and the same fingerprint as the
 * sidecar's Python (sidecar/src/durable_sidecar/canonical.py) for every
 * document of a shared list and of a seeded random corpus.
 */

import { execFileSync } from 'child_process';
import { readFileSync } from 'fs';
import { join } from 'path';

import { canonicalJson, fingerprintOf } from '../shared/canonical';

interface Vectors {
	rfc: Array<{ input: string; expected: string }>;
	numbers: Array<{ ieee754: string; expected: string }>;
	refused: string[];
	documents: string[];
}

const ROOT = join(__dirname, '..', '..');
const VECTORS = JSON.parse(
	readFileSync(join(ROOT, 'tests', 'fixtures', 'jcs_vectors.json'), 'utf8'),
) as Vectors;
const PYTHON = process.env.DURABLE_TEST_PYTHON ?? join(ROOT, '.venv', 'bin', 'python');

function fromBits(hex: string): number {
	const view = new DataView(new ArrayBuffer(8));
	view.setBigUint64(0, BigInt(`0x${hex}`));
	return view.getFloat64(0);
}

/** Python's fingerprint (the sidecar's own function) of each JSON text, in order. */
function pythonFingerprints(texts: string[]): string[] {
	const script = [
		'import json, sys',
		'from durable_sidecar.canonical import fingerprint_of',
		'texts = json.loads(sys.stdin.buffer.read())',
		'print(json.dumps([fingerprint_of(t.encode("utf-8")) for t in texts]))',
	].join('\n');
	const out = execFileSync(PYTHON, ['-c', script], {
		input: JSON.stringify(texts),
		maxBuffer: 64 * 1024 * 1024,
	});
	return JSON.parse(out.toString('utf8')) as string[];
}

/** A small seeded generator (mulberry32), so the random corpus is the same on every run. */
function random(seed: number): () => number {
	let a = seed;
	return () => {
		a = (a + 0x6d2b79f5) | 0;
		let t = Math.imul(a ^ (a >>> 15), 1 | a);
		t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
		return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
	};
}

const ALPHABET = [
	'a',
	'Z',
	'0',
	' ',
	'"',
	'\\',
	'/',
	'\n',
	'\t',
	'\u0001',
	'\u001f',
	'\u007f',
	'\u0080',
	'é',
	'€',
	'\ufb33',
	'\uffff',
	'😀',
	'𝄞',
	'\u2028',
];

function randomString(next: () => number): string {
	let s = '';
	const n = Math.floor(next() * 8);
	for (let i = 0; i < n; i++) s += ALPHABET[Math.floor(next() * ALPHABET.length)];
	return s;
}

function randomNumber(next: () => number): number {
	const pick = Math.floor(next() * 6);
	if (pick === 0) return Math.floor((next() - 0.5) * 2 ** 53);
	if (pick === 1) return (next() - 0.5) * 10 ** Math.floor(next() * 40 - 20);
	if (pick === 2) return 10 ** Math.floor(next() * 600 - 300);
	if (pick === 3) return Math.floor(next() * 1000) / 100;
	if (pick === 4) return -0;
	return next();
}

function randomValue(next: () => number, depth: number): unknown {
	const pick = Math.floor(next() * (depth > 3 ? 5 : 7));
	switch (pick) {
		case 0:
			return null;
		case 1:
			return next() < 0.5;
		case 2:
			return randomNumber(next);
		case 3:
		case 4:
			return randomString(next);
		case 5:
			return Array.from({ length: Math.floor(next() * 4) }, () => randomValue(next, depth + 1));
		default: {
			const obj: Record<string, unknown> = {};
			const n = Math.floor(next() * 5);
			for (let i = 0; i < n; i++) obj[randomString(next)] = randomValue(next, depth + 1);
			return obj;
		}
	}
}

describe('canonicalJson (RFC 8785)', () => {
	it.each(VECTORS.rfc.map((c, i) => [i, c] as const))(
		'gives the RFC output for example %i',
		(_i, c) => {
			expect(canonicalJson(JSON.parse(c.input))).toBe(c.expected);
		},
	);

	it.each(VECTORS.numbers.map((c) => [c.ieee754, c.expected] as const))(
		'writes IEEE %s as %s',
		(hex, expected) => {
			expect(canonicalJson(fromBits(hex))).toBe(expected);
		},
	);

	it('refuses values with no canonical form', () => {
		expect(() => canonicalJson(NaN)).toThrow(TypeError);
		expect(() => canonicalJson([Infinity])).toThrow(TypeError);
		expect(() => canonicalJson({ a: '\ud800' })).toThrow(TypeError);
		expect(() => canonicalJson(10n)).toThrow(TypeError);
		expect(canonicalJson({ a: undefined, b: [undefined], c: new Date(0) })).toBe(
			'{"b":[null],"c":"1970-01-01T00:00:00.000Z"}',
		);
	});

	it('gives a fingerprint independent of key order and number spelling', () => {
		expect(fingerprintOf({ x: 1e16, amount: 42 })).toBe(
			fingerprintOf(JSON.parse('{"amount":42.0,"x":10000000000000000}')),
		);
		expect(fingerprintOf({ amount: 42 })).toMatch(/^[0-9a-f]{64}$/);
	});
});

describe('fingerprintOf matches the sidecar', () => {
	it('on the shared documents', () => {
		const texts = VECTORS.documents;
		const python = pythonFingerprints(texts);
		texts.forEach((text, i) =>
			expect([text, fingerprintOf(JSON.parse(text))]).toEqual([text, python[i]]),
		);
	});

	it('on 500 seeded random documents, written with and without whitespace', () => {
		const next = random(20261201);
		const values = Array.from({ length: 500 }, () => randomValue(next, 0));
		const texts = values.flatMap((v) => [JSON.stringify(v), JSON.stringify(v, null, 2)]);
		const python = pythonFingerprints(texts);
		texts.forEach((text, i) =>
			expect([text, fingerprintOf(values[Math.floor(i / 2)])]).toEqual([text, python[i]]),
		);
	});

	it('refuses what the sidecar refuses: numbers beyond doubles, lone surrogates (tests/sidecar/test_canonical.py)', () => {
		for (const text of VECTORS.refused) {
			expect(() => fingerprintOf(JSON.parse(text))).toThrow(TypeError);
		}
	});
});
