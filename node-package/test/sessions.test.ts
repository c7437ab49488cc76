/* eslint-disable @n8n/community-nodes/no-restricted-globals -- test code runs in Node, never inside n8n */
/**
 * The node package's session with a real sidecar (issue 39): the first call
 * opens it, heartbeats keep it alive, an execution keeps the session it began
 * in (fencing once that session ended), and new work moves to a new session.
 */
import { sleep } from 'n8n-workflow';

import { SessionServiceClient } from '../shared/gen/durable/v1/session';
import { InstanceServiceClient } from '../shared/gen/durable/v1/instance';
import { modeOf } from '../shared/grpc/identity';
import { executionEnded } from '../shared/grpc/session';
import { closeAllSidecarClients, getSidecarClient, type SidecarClient } from '../shared/transport';
import { TestSidecar } from './support/sidecar';

let sidecar: TestSidecar;

beforeAll(async () => {
	// One second of grace (documented: DURABLE_SESSION_GRACE_SECONDS), so expiry is quick to see.
	sidecar = await TestSidecar.start({ env: { DURABLE_SESSION_GRACE_SECONDS: '1' } });
});

afterAll(async () => {
	closeAllSidecarClients();
	await sidecar?.stop();
});

interface Listed {
	sessionId: string;
	pid: number;
	mode: string;
	host: string;
	endReason: string;
	leasesFreed: number;
}

async function sessions(client: SidecarClient): Promise<Listed[]> {
	const raw = client.sessions as SessionServiceClient;
	return await new Promise((resolve, reject) => {
		raw.listSessions({ pageSize: 100 }, client.metadata(), (error, response) => {
			if (error) reject(error);
			else resolve(response.sessions as Listed[]);
		});
	});
}

async function closeSession(client: SidecarClient, sessionId: string): Promise<void> {
	const raw = client.sessions as SessionServiceClient;
	await new Promise<void>((resolve, reject) => {
		raw.closeSession({ sessionId }, client.metadata(), (error) =>
			error ? reject(error) : resolve(),
		);
	});
}

function start(client: SidecarClient, key: string, executionId: string) {
	return client.startOrResume({ workflowId: 'wf-sessions', instanceKey: key, executionId });
}

describe('sessions', () => {
	test('the first call opens the process session, named by host, pid and mode', async () => {
		const client = getSidecarClient(sidecar.connection({ deadlineSeconds: 10 }));
		await start(client, 'order-1', 'e1');
		const mine = (await sessions(client)).filter((s) => s.sessionId === client.session.id);
		expect(mine).toHaveLength(1);
		expect(mine[0]).toMatchObject({ pid: process.pid, mode: 'regular', endReason: '' });
		expect(mine[0].host.length).toBeGreaterThan(0);
		// Heartbeats keep it alive well past its grace of one second.
		await sleep(3000);
		expect((await sessions(client)).find((s) => s.sessionId === client.session.id)?.endReason).toBe(
			'',
		);
	});

	test('an execution of an ended session is fenced; new work goes on in a new session', async () => {
		const client = getSidecarClient(sidecar.connection({ deadlineSeconds: 10 }));
		await start(client, 'order-2', 'e2');
		const first = client.session.id;
		// The sidecar declares the session over (as after a SIGSTOP longer than the grace).
		await closeSession(client, first);
		await expect(
			client.saveCheckpoints({
				items: [
					{
						workflowId: 'wf-sessions',
						instanceKey: 'order-2',
						stepName: 'Pay',
						stateJson: Buffer.from('{"paid":true}'),
						executionId: 'e2',
						nodeName: 'Durable Checkpoint',
					},
				],
			}),
		).rejects.toMatchObject({ code: 9, details: expect.stringMatching(/^session ended/) });
		// A new execution in this same process starts at once, in a new session.
		const fresh = await start(client, 'order-3', 'e3');
		expect(fresh.instance?.leaseOwner).toBe('e3');
		expect(client.session.id).not.toBe(first);
		expect(client.session.id).not.toBe('');
		const listed = await sessions(client);
		expect(listed.find((s) => s.sessionId === first)).toMatchObject({
			endReason: 'closed',
			leasesFreed: 2, // order-1 of the test above, and order-2
		});
	});

	test('closing the clients (process shutdown) ends the session soon after, not after the grace', async () => {
		const client = getSidecarClient(sidecar.connection({ deadlineSeconds: 7 }));
		await start(client, 'order-4', 'e4');
		const id = client.session.id;
		closeAllSidecarClients();
		const observer = getSidecarClient(sidecar.connection({ deadlineSeconds: 8 }));
		let reason = '';
		for (let i = 0; i < 100 && !reason; i++) {
			await sleep(100);
			reason = (await sessions(observer)).find((s) => s.sessionId === id)?.endReason ?? '';
		}
		expect(reason).toBe('expired');
	});

	test('an execution that ended in n8n releases its lease; one still running keeps it past its ceiling', async () => {
		const client = getSidecarClient(sidecar.connection({ deadlineSeconds: 9 }));
		await start(client, 'order-failed', 'e-failed');
		// A ceiling of 12 s, shorter than this test: the running execution's lease is renewed past it.
		await client.startOrResume({
			workflowId: 'wf-sessions',
			instanceKey: 'order-running',
			executionId: 'e-running',
			leaseSeconds: 12,
		});
		// What n8n stored: the failed execution has its error, the running one only its start.
		const stored: Record<string, unknown> = {
			'e-failed': {
				resultData: { error: { message: 'the charge failed' }, runData: { Charge: [] } },
			},
			'e-running': { resultData: { runData: {} }, executionData: { nodeExecutionStack: [{}] } },
		};
		client.session.observe(async (id) => await Promise.resolve(stored[id]));
		const raw = client.instances as InstanceServiceClient;
		const claimable = async (): Promise<string[]> =>
			await new Promise((resolve, reject) => {
				raw.claimResumable(
					{ workflowIds: ['wf-sessions'], claimant: 'test', maxInstances: 10, leaseSeconds: 0 },
					client.metadata(),
					(error, response) =>
						error ? reject(error) : resolve(response.instances.map((r) => r.instance!.instanceKey)),
				);
			});
		let got: string[] = [];
		for (let i = 0; i < 60 && !got.includes('order-failed'); i++) {
			await sleep(500);
			got = [...got, ...(await claimable())];
		}
		expect(got).toContain('order-failed');
		// Past its 12 s ceiling: the execution runs (n8n says so), so its lease was renewed, not taken.
		for (let i = 0; i < 40; i++) {
			await sleep(500);
			got = [...got, ...(await claimable())];
		}
		expect(got).not.toContain('order-running');
	});

	test('what n8n stored says whether an execution ended', () => {
		expect(executionEnded(undefined)).toBe(true); // not kept, or pruned
		expect(executionEnded(undefined, false)).toBe(false); // not written by n8n yet
		expect(executionEnded({ resultData: { error: { message: 'x' }, runData: {} } })).toBe(true);
		// Another process's crash recovery marked it, while this process may still run it.
		expect(
			executionEnded({
				resultData: {
					error: { message: 'Workflow did not finish, possible out-of-memory issue' },
					runData: {},
				},
			}),
		).toBe(false);
		expect(
			executionEnded({
				resultData: { runData: { Webhook: [{}], Done: [{}] } },
				executionData: { nodeExecutionStack: [] },
			}),
		).toBe(true);
		expect(
			executionEnded({ resultData: { runData: {} }, executionData: { nodeExecutionStack: [{}] } }),
		).toBe(false); // running: n8n saves the run at its end
		expect(
			executionEnded({
				waitTill: new Date(),
				resultData: { runData: { Wait: [{}] } },
				executionData: { nodeExecutionStack: [] },
			}),
		).toBe(false);
	});

	test('the mode names the n8n command and queue mode', () => {
		expect(modeOf(['node', 'n8n', 'worker', '--concurrency=5'], 'queue')).toBe('worker');
		expect(modeOf(['node', 'n8n', 'webhook'], 'queue')).toBe('webhook');
		expect(modeOf(['node', 'n8n', 'start'], 'queue')).toBe('main');
		expect(modeOf(['node', 'n8n', 'start'], undefined)).toBe('regular');
		expect(modeOf(['node', 'n8n'], 'regular')).toBe('regular');
	});
});
