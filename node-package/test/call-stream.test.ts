/**
 * The nodes' calls travel on one open CallService/Call stream per connection
 * (shared/grpc/call-stream.ts), through a real sidecar: counted there by their
 * own method, carried through a sidecar crash, and sent unary to a sidecar
 * that does not serve the stream.
 */
import { Server, ServerCredentials, status, type sendUnaryData } from '@grpc/grpc-js';

import {
	InstanceServiceService,
	ListInstancesResponse,
	type ListInstancesRequest,
} from '../shared/gen/durable/v1/instance';
import { closeAllSidecarClients, newSidecarClient } from '../shared/transport';
import { freePort, TestSidecar } from './support/sidecar';

let sidecar: TestSidecar;
let metricsPort: number;

beforeAll(async () => {
	metricsPort = await freePort();
	sidecar = await TestSidecar.start({
		env: { DURABLE_METRICS_ADDRESS: `127.0.0.1:${metricsPort}` },
	});
});

afterAll(async () => {
	closeAllSidecarClients();
	await sidecar?.stop();
});

async function metric(name: string, labels = ''): Promise<number> {
	const text = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
	const line = text.split('\n').find((l) => l.startsWith(`${name}${labels} `));
	return line ? Number(line.split(' ')[1]) : 0;
}

const WF = 'wf-call-stream';

describe('the call stream', () => {
	test('calls go on one stream, each counted by its own method, and answer as unary calls do', async () => {
		const client = newSidecarClient(sidecar.connection());
		try {
			const startedOk = '{code="OK",method="StartOrResume"}';
			const before = await metric('durable_rpc_total', startedOk);
			const keys = Array.from({ length: 20 }, (_, n) => `order-${n}`);
			const replies = await Promise.all(
				keys.map(
					async (instanceKey) =>
						await client.startOrResume({ workflowId: WF, instanceKey, executionId: 'e1' }),
				),
			);
			expect(replies.map((r) => r.instance?.instanceKey)).toEqual(keys);
			expect(await metric('durable_rpc_total', startedOk)).toBe(before + 20);
			// The session's open and heartbeats and the starts: one stream, this client's.
			expect(await metric('durable_call_streams')).toBe(1);
			// An error answer is the unary call's: code and message.
			await expect(client.claim({ items: [] })).rejects.toMatchObject({
				code: status.INVALID_ARGUMENT,
				details: expect.stringMatching(/items/),
			});
		} finally {
			client.close();
		}
	});

	test('calls in flight when the sidecar is killed are sent again and answered after its restart', async () => {
		const client = newSidecarClient(sidecar.connection({ deadlineSeconds: 30 }));
		try {
			await client.startOrResume({ workflowId: WF, instanceKey: 'before-kill', executionId: 'e1' });
			const inFlight = Array.from(
				{ length: 10 },
				async (_, n) =>
					await client.listInstances({ workflowId: WF, pageSize: 10 + n }).then(() => n),
			);
			await sidecar.kill();
			const relaunch = sidecar.launch();
			const during = Array.from(
				{ length: 10 },
				async (_, n) =>
					await client.startOrResume({
						workflowId: WF,
						instanceKey: `during-${n}`,
						executionId: 'e1',
					}),
			);
			await relaunch;
			expect(await Promise.all(inFlight)).toHaveLength(10);
			const started = await Promise.all(during);
			expect(started.map((r) => r.instance?.instanceKey)).toEqual(
				Array.from({ length: 10 }, (_, n) => `during-${n}`),
			);
		} finally {
			client.close();
		}
	}, 60_000);

	test('a sidecar without the stream (an older one) gets every call unary', async () => {
		// An older sidecar stands in: a gRPC server with ListInstances and no CallService.
		const older = new Server();
		let served = 0;
		older.addService(InstanceServiceService, {
			listInstances: (
				_call: { request: ListInstancesRequest },
				callback: sendUnaryData<ListInstancesResponse>,
			) => {
				served++;
				callback(null, ListInstancesResponse.fromPartial({ nextPageToken: `page-${served}` }));
			},
		});
		const port = await freePort();
		await new Promise<void>((done, fail) =>
			older.bindAsync(`127.0.0.1:${port}`, ServerCredentials.createInsecure(), (error) =>
				error ? fail(error) : done(),
			),
		);
		const client = newSidecarClient({ ...sidecar.connection(), port });
		try {
			// The first call connects; the next ones find the channel ready and try the stream first.
			for (let n = 1; n <= 3; n++) {
				const reply = await client.listInstances({ workflowId: WF });
				expect(reply.nextPageToken).toBe(`page-${n}`);
			}
			expect(served).toBe(3);
		} finally {
			client.close();
			older.forceShutdown();
		}
	});
});
