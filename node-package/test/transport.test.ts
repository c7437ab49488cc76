/* eslint-disable @n8n/community-nodes/no-restricted-globals -- test code runs in Node, never inside n8n */
import { NodeApiError, type INodeExecutionData } from 'n8n-workflow';

import {
	OUTPUT_IN_PROGRESS,
	OUTPUT_START,
	ResumePoint,
} from '../nodes/ResumePoint/ResumePoint.node';
import { closeAllSidecarClients, getSidecarClient } from '../shared/transport';
import { executeContext } from './support/n8n';
import { TestSidecar } from './support/sidecar';

let sidecar: TestSidecar;
const resumePoint = new ResumePoint();

beforeAll(async () => {
	sidecar = await TestSidecar.start();
});

afterAll(async () => {
	closeAllSidecarClients();
	await sidecar?.stop();
});

async function start(
	keys: string[],
	deadlineSeconds: number,
	opts: { continueOnFail?: boolean; executionId?: string } = {},
): Promise<INodeExecutionData[][]> {
	return await resumePoint.execute.call(
		executeContext({
			items: keys.map((orderId) => ({ orderId })),
			params: { instanceKey: (_i: number, item: INodeExecutionData) => item.json.orderId },
			credentials: sidecar.credentials({ deadlineSeconds }),
			workflowId: 'wf-transport',
			executionId: opts.executionId ?? 'e1',
			continueOnFail: opts.continueOnFail,
			typeVersion: 2,
		}),
	);
}

describe('transport: waiting for the sidecar', () => {
	test('a sidecar restarted under a running client: calls succeed without error', async () => {
		// The client's channel is connected before the restart.
		expect((await start(['before-restart'], 30))[OUTPUT_START]).toHaveLength(1);
		const client = getSidecarClient(sidecar.connection({ deadlineSeconds: 30 }));
		const failures: unknown[] = [];
		let calls = 0;
		let restarting = true;
		const restart = sidecar.restart().finally(() => {
			restarting = false;
		});
		// Calls keep coming (three callers, so some are in flight at the stop)
		// while the sidecar stops, is down and starts again.
		const caller = async (lane: number) => {
			for (let n = 0; restarting || n < 3; n++) {
				try {
					const out = await start([`during-restart-${lane}-${n}`], 30);
					expect(out[OUTPUT_START]).toHaveLength(1);
					calls++;
				} catch (error) {
					failures.push(error);
				}
				await new Promise((r) => setTimeout(r, 20));
			}
		};
		const callers = Promise.all([0, 1, 2].map(caller));
		await restart;
		await callers;
		expect(failures).toEqual([]);
		expect(calls).toBeGreaterThanOrEqual(9);
		// The same cached client still serves after the restart.
		expect(getSidecarClient(sidecar.connection({ deadlineSeconds: 30 }))).toBe(client);
	}, 120_000);

	test('a call to a sidecar that stays down fails with the clear error after the deadline', async () => {
		expect((await start(['before-stop'], 3))[OUTPUT_START]).toHaveLength(1);
		await sidecar.stopProcess();
		try {
			const began = Date.now();
			const error = await start(['while-down'], 3).catch((e: unknown) => e);
			const waited = Date.now() - began;
			expect(error).toBeInstanceOf(NodeApiError);
			const apiError = error as NodeApiError;
			expect(apiError.message).toContain(
				`could not reach the durable sidecar at 127.0.0.1:${sidecar.port} within 3 s`,
			);
			expect(apiError.context).toMatchObject({ itemIndex: 0, grpcCode: 'UNAVAILABLE' });
			expect(apiError.description).toContain(`127.0.0.1:${sidecar.port}`);
			expect(waited).toBeGreaterThanOrEqual(2_900);
			expect(waited).toBeLessThan(6_000);

			// Many items: once the sidecar proved unreachable, the rest fail at once
			// instead of each waiting out its deadline.
			const many = Array.from({ length: 20 }, (_, i) => `down-${i}`);
			const began2 = Date.now();
			const out = await start(many, 2, { continueOnFail: true });
			expect(Date.now() - began2).toBeLessThan(5_000);
			expect(out[OUTPUT_IN_PROGRESS]).toHaveLength(20);
			expect(
				out[OUTPUT_IN_PROGRESS].every(
					(i) => (i.json.details as { httpStatus?: number } | undefined)?.httpStatus === 503,
				),
			).toBe(true);
		} finally {
			await sidecar.launch();
		}
		// And it serves again once it is back.
		expect((await start(['after-relaunch'], 30))[OUTPUT_START]).toHaveLength(1);
	}, 60_000);
});
