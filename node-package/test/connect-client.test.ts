/* eslint-disable @n8n/community-nodes/no-restricted-imports, @n8n/community-nodes/no-dangerous-functions -- test code runs in Node, never inside n8n */
/**
 * The HTTP face with the official Connect client (connect-es, @connectrpc/connect-node) against a real sidecar:
 * JSON and binary protobuf, the GET form of a read, a server-streaming method reported as unimplemented, and
 * the call's timeout. Issue 44: "Test all of this with the official client in make test."
 *
 * The services come from the proto itself (a descriptor set protoc writes at the start), not from code
 * generated for this test, so the client sees exactly what a script in another language would.
 */
import { execFileSync } from 'node:child_process';
import { createServer, request as httpRequest } from 'node:http';
import type { Server } from 'node:http';
import { mkdtempSync, readFileSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { createFileRegistry, fromBinary } from '@bufbuild/protobuf';
import type { DescService } from '@bufbuild/protobuf';
import { FileDescriptorSetSchema } from '@bufbuild/protobuf/wkt';
import { Code, ConnectError, createClient } from '@connectrpc/connect';
import type { CallOptions } from '@connectrpc/connect';
import { createConnectTransport } from '@connectrpc/connect-node';

import { freePort, REPO_ROOT, TestSidecar } from './support/sidecar';

const REPO = REPO_ROOT;
const PYTHON = join(REPO, '.venv', 'bin', 'python');

jest.setTimeout(60_000);

let sidecar: TestSidecar;
let httpPort = 0;
let services: Map<string, DescService>;
// What went over the wire, per call: the HTTP method, the request's content type and its timeout header, as a
// recording proxy between the client and the sidecar saw them.
const seen: { method: string; contentType: string; timeoutMs?: string }[] = [];
let proxy: Server;
let proxyPort = 0;

async function startProxy(): Promise<void> {
	proxy = createServer((req, res) => {
		const timeoutMs = req.headers['connect-timeout-ms'];
		seen.push({
			method: req.method ?? '',
			contentType: String(req.headers['content-type'] ?? ''),
			...(typeof timeoutMs === 'string' ? { timeoutMs } : {}),
		});
		const upstream = httpRequest(
			{
				host: '127.0.0.1',
				port: httpPort,
				path: req.url,
				method: req.method,
				headers: req.headers,
			},
			(answer) => {
				res.writeHead(answer.statusCode ?? 502, answer.headers);
				answer.pipe(res);
			},
		);
		upstream.on('error', () => res.destroy());
		req.pipe(upstream);
	});
	await new Promise<void>((done) => proxy.listen(0, '127.0.0.1', done));
	const address = proxy.address();
	proxyPort = typeof address === 'object' && address ? address.port : 0;
}

function loadServices(): Map<string, DescService> {
	const out = join(mkdtempSync(join(tmpdir(), 'durable-connect-')), 'durable.pb');
	const protos = readdirSync(join(REPO, 'proto', 'durable', 'v1'))
		.filter((f) => f.endsWith('.proto'))
		.map((f) => join('proto', 'durable', 'v1', f));
	execFileSync(
		PYTHON,
		[
			'-m',
			'grpc_tools.protoc',
			'-Iproto',
			'--include_imports',
			`--descriptor_set_out=${out}`,
			...protos,
		],
		{ cwd: REPO },
	);
	const registry = createFileRegistry(fromBinary(FileDescriptorSetSchema, readFileSync(out)));
	const found = new Map<string, DescService>();
	for (const name of ['InstanceService', 'AuditService', 'LimitService']) {
		const service = registry.getService(`durable.v1.${name}`);
		if (!service) throw new Error(`durable.v1.${name} is not in the descriptor set`);
		found.set(name, service);
	}
	return found;
}

// connect-es names a method by its local name: StartOrResume is startOrResume.
const local = (method: string): string => method[0].toLowerCase() + method.slice(1);

// The client built from a descriptor at run time has no static method types: each call's shape is checked here.
type Loose = Record<string, (request: Record<string, unknown>, options?: CallOptions) => unknown>;

async function call<T>(
	c: Loose,
	method: string,
	request: Record<string, unknown>,
	options?: CallOptions,
): Promise<T> {
	return (await c[local(method)](request, options)) as T;
}

function client(name: string, options: { binary?: boolean; get?: boolean } = {}): Loose {
	const transport = createConnectTransport({
		baseUrl: `http://127.0.0.1:${proxyPort}`,
		httpVersion: '1.1',
		useBinaryFormat: options.binary ?? false,
		useHttpGet: options.get ?? false,
	});
	return createClient(services.get(name)!, transport) as unknown as Loose;
}

const auth = (): { headers: Record<string, string> } => ({
	headers: { Authorization: `Bearer ${sidecar.token}` },
});

beforeAll(async () => {
	services = loadServices();
	httpPort = await freePort();
	sidecar = await TestSidecar.start({
		env: { DURABLE_HTTP_LISTEN_ADDRESS: `127.0.0.1:${httpPort}` },
	});
	await startProxy();
});

afterAll(async () => {
	await new Promise((done) => (proxy ? proxy.close(done) : done(undefined)));
	await sidecar?.stop();
});

beforeEach(() => {
	seen.length = 0;
});

async function refused(call: Promise<unknown>): Promise<ConnectError> {
	try {
		await call;
	} catch (error) {
		return ConnectError.from(error);
	}
	throw new Error('the call was not refused');
}

test('JSON and binary protobuf reach the same handler and answer in their own encoding', async () => {
	const key = `connect-${Date.now()}`;
	for (const [binary, suffix] of [
		[false, 'json'],
		[true, 'proto'],
	] as const) {
		const instances = client('InstanceService', { binary });
		const started = await call<{ instance: { instanceKey: string; leaseOwner: string } }>(
			instances,
			'StartOrResume',
			{ workflowId: 'wf-connect', instanceKey: `${key}-${suffix}`, executionId: '41' },
			auth(),
		);
		expect(started.instance.instanceKey).toBe(`${key}-${suffix}`);
		expect(started.instance.leaseOwner).toBe('41');
		expect(seen.at(-1)).toEqual({
			method: 'POST',
			contentType: binary ? 'application/proto' : 'application/json',
		});
	}
	// A refusal is the same in both encodings: the client reads the Connect error.
	for (const binary of [false, true]) {
		const error = await refused(
			call(
				client('InstanceService', { binary }),
				'GetInstance',
				{ workflowId: 'wf-connect', instanceKey: 'no-such-key' },
				auth(),
			),
		);
		expect(error.code).toBe(Code.NotFound);
	}
});

test('a read goes by GET when the client is asked to, a write still by POST', async () => {
	for (const binary of [false, true]) {
		const audit = client('AuditService', { get: true, binary });
		const caller = await call<{ namespace: string; role: string }>(audit, 'GetCaller', {}, auth());
		expect(caller).toMatchObject({ namespace: sidecar.namespace, role: 'admin' });
		expect(seen.at(-1)?.method).toBe('GET');
		const counts = await call<{ total: bigint }>(
			audit,
			'CountInstances',
			{ workflowId: 'wf-connect' },
			auth(),
		);
		expect(Number(counts.total)).toBeGreaterThanOrEqual(2);
		expect(seen.at(-1)?.method).toBe('GET');
	}
	const instances = client('InstanceService', { get: true });
	await call(
		instances,
		'StartOrResume',
		{ workflowId: 'wf-connect', instanceKey: `by-post-${Date.now()}`, executionId: '42' },
		auth(),
	);
	expect(seen.at(-1)?.method).toBe('POST'); // StartOrResume has side effects: never GET
});

test('a server-streaming method is reported as unimplemented, not unknown', async () => {
	const instances = client('InstanceService');
	const error = await refused(
		(async () => {
			const answers = instances[local('WatchResumable')](
				{ workflowIds: ['wf-connect'] },
				auth(),
			) as AsyncIterable<unknown>;
			for await (const answer of answers) {
				return answer;
			}
			return undefined;
		})(),
	);
	expect(error.code).toBe(Code.Unimplemented); // (the sidecar answers 404; before, 501 read as unknown)
});

test('the call timeout goes to the sidecar, which ends a call that waits longer', async () => {
	const key = `connect-timeout-${Date.now()}`;
	const instances = client('InstanceService');
	const limits = client('LimitService');
	for (const [i, execution] of ['51', '52'].entries()) {
		await call(
			instances,
			'StartOrResume',
			{ workflowId: 'wf-connect', instanceKey: `${key}-${i}`, executionId: execution },
			auth(),
		);
	}
	const place = {
		workflowId: 'wf-connect',
		limitName: 'connect-timeout',
		limitKey: 'one',
		maxHolders: 1,
	};
	await call(
		limits,
		'AcquireSlot',
		{ ...place, instanceKey: `${key}-0`, executionId: '51' },
		auth(),
	);
	const started = Date.now();
	const error = await refused(
		call(
			limits,
			'AcquireSlot',
			{ ...place, instanceKey: `${key}-1`, executionId: '52', maxWaitMs: 30_000 },
			{ ...auth(), timeoutMs: 700 },
		),
	);
	expect(error.code).toBe(Code.DeadlineExceeded);
	expect(Date.now() - started).toBeLessThan(10_000);
	// The client told the sidecar (tests/sidecar/test_http_json.py shows the sidecar ending such a call itself).
	expect(Number(seen.at(-1)?.timeoutMs)).toBeGreaterThan(0);
});
