/* eslint-disable @n8n/community-nodes/no-restricted-globals -- test code runs in Node, never inside n8n */
import type { INodeExecutionData } from 'n8n-workflow';

import { OUTPUT_START, ResumePoint } from '../nodes/ResumePoint/ResumePoint.node';
import { closeAllSidecarClients, connectionFromCredentials, targetOf } from '../shared/transport';
import { executeContext } from './support/n8n';
import { TestSidecar } from './support/sidecar';

describe('credential: several sidecar addresses', () => {
	const target = (host: string, port = 50051) => targetOf({ host, port });

	test('one host keeps its plain target; a list of IP addresses becomes a multi-address target', () => {
		expect(target('durable.internal')).toBe('durable.internal:50051');
		expect(target('::1')).toBe('[::1]:50051');
		expect(target('10.0.0.5, 10.0.0.6:50052')).toBe('ipv4:10.0.0.5:50051,10.0.0.6:50052');
		expect(target('[fd00::5]:7000,fd00::6')).toBe('ipv6:[fd00::5]:7000,[fd00::6]:50051');
	});

	test('a list with host names, mixed families or a bad port is refused with the reason', () => {
		expect(() => target('a.internal, b.internal')).toThrow(/list their IP addresses/);
		expect(() => target('10.0.0.5, fd00::6')).toThrow(/mixes IPv4 and IPv6/);
		expect(() => target('10.0.0.5:70000, 10.0.0.6')).toThrow(/port must be 1 to 65535/);
		expect(() =>
			connectionFromCredentials({ host: 'a.internal,10.0.0.6', port: 50051, token: 't' }),
		).toThrow(/several sidecars/);
	});
});

describe('transport: two sidecars on one database, one stopped mid-run', () => {
	let a: TestSidecar;
	let b: TestSidecar;
	const resumePoint = new ResumePoint();

	beforeAll(async () => {
		a = await TestSidecar.start();
		// The second sidecar serves the first one's database and namespace: replicas share nothing else.
		b = await TestSidecar.start({
			env: {
				DURABLE_DATABASE_URL: `postgresql://postgres@127.0.0.1:5432/${a.database}`,
				DURABLE_AUTH_TOKENS: `${a.token}=${a.namespace}`,
			},
		});
	}, 60_000);

	afterAll(async () => {
		closeAllSidecarClients();
		await b?.stop();
		await a?.stop();
	});

	async function start(key: string): Promise<INodeExecutionData[][]> {
		return await resumePoint.execute.call(
			executeContext({
				items: [{ orderId: key }],
				params: { instanceKey: (_i: number, item: INodeExecutionData) => item.json.orderId },
				credentials: a.credentials({ host: `127.0.0.1:${a.port}, 127.0.0.1:${b.port}` }),
				workflowId: 'wf-two-sidecars',
				executionId: `e-${key}`,
				typeVersion: 2,
			}),
		);
	}

	test('every call succeeds and every instance starts once while one sidecar stops and returns', async () => {
		const failures: unknown[] = [];
		const started: string[] = [];
		let phase = 'both';
		const caller = async (lane: number) => {
			for (let n = 0; phase !== 'done'; n++) {
				const key = `order-${lane}-${n}`;
				try {
					const out = await start(key);
					expect(out[OUTPUT_START]).toHaveLength(1);
					started.push(key);
				} catch (error) {
					failures.push(error);
				}
				await new Promise((r) => setTimeout(r, 10));
			}
		};
		/** Instances keep starting with one sidecar gone: more than `before` within the deadline (no fixed
		 * window: on a loaded machine the callers' failover takes longer than on a quiet one). */
		const progressed = async (before: number): Promise<number> => {
			const deadline = Date.now() + 15_000;
			while (started.length <= before + 3 && Date.now() < deadline) {
				await new Promise((r) => setTimeout(r, 50));
			}
			return started.length;
		};
		const callers = Promise.all([0, 1, 2].map(caller));
		try {
			await new Promise((r) => setTimeout(r, 500));
			phase = 'b stopped';
			await b.stopProcess();
			const duringStop = started.length;
			expect(await progressed(duringStop)).toBeGreaterThan(duringStop + 3); // a carried the load alone
			await b.launch();
			phase = 'a stopped';
			await a.stopProcess();
			const duringStopA = started.length;
			expect(await progressed(duringStopA)).toBeGreaterThan(duringStopA + 3); // and b alone
			await a.launch();
		} finally {
			// Also when an expectation failed: the callers stop, so jest can end the file.
			phase = 'done';
			await callers;
		}
		expect(failures).toEqual([]);
		const rows = await a.sql<{ n: string }>(
			"SELECT count(*) AS n FROM durable_instances WHERE workflow_id = 'wf-two-sidecars'",
		);
		expect(Number(rows[0].n)).toBe(started.length);
	}, 120_000);
});
