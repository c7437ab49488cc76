import { NodeOperationError, type IDataObject, type INodeExecutionData } from 'n8n-workflow';

import {
	IdempotencyGuard,
	OUTPUT_ALREADY_DONE,
	OUTPUT_FIRST_RUN,
	OUTPUT_IN_PROGRESS,
} from '../nodes/IdempotencyGuard/IdempotencyGuard.node';
import { closeAllSidecarClients, getSidecarClient } from '../shared/transport';
import { asN8nHandsOn, executeContext, type ParamValue } from './support/n8n';
import { TestSidecar } from './support/sidecar';

let sidecar: TestSidecar;
const node = new IdempotencyGuard();

beforeAll(async () => {
	sidecar = await TestSidecar.start();
});

afterAll(async () => {
	closeAllSidecarClients();
	await sidecar?.stop();
});

async function guard(
	items: Array<IDataObject | INodeExecutionData>,
	params: Record<string, ParamValue>,
	opts: { executionId?: string; continueOnFail?: boolean } = {},
): Promise<INodeExecutionData[][]> {
	return await node.execute.call(
		executeContext({
			items,
			params,
			credentials: sidecar.credentials(),
			workflowId: 'wf-guard',
			executionId: 'e1',
			...opts,
		}),
	);
}

const claimParams = (extra: Record<string, ParamValue> = {}): Record<string, ParamValue> => ({
	operation: 'claim',
	scope: 'payment',
	key: (_i: number, item: INodeExecutionData) => `${String(item.json.orderId)}-charge`,
	fingerprintFrom: 'fields',
	fingerprintFields: 'orderId, amount',
	...extra,
});

function meta(item: INodeExecutionData): IDataObject {
	return item.json.idempotency as IDataObject;
}

describe('Idempotency Guard', () => {
	test('claims many keys in one Claim call; each leaves by First Run with attempt and derived key', async () => {
		const client = getSidecarClient(sidecar.connection());
		const spy = jest.spyOn(client, 'claim');
		try {
			const items = Array.from({ length: 40 }, (_, i) => ({ orderId: `batch-${i}`, amount: i }));
			const out = await guard(items, claimParams());
			expect(spy).toHaveBeenCalledTimes(1);
			expect(spy.mock.calls[0][0].items).toHaveLength(40);
			expect(out[OUTPUT_FIRST_RUN]).toHaveLength(40);
			expect(out[OUTPUT_FIRST_RUN][3].pairedItem).toEqual({ item: 3 });
			const m = meta(out[OUTPUT_FIRST_RUN][3]);
			expect(m).toMatchObject({
				scope: 'payment',
				key: 'batch-3-charge',
				outcome: 'acquired',
				attempt: 1,
				status: 'in_progress',
			});
			expect(typeof m.derivedKey).toBe('string');
			expect((m.derivedKey as string).length).toBeGreaterThan(0);
		} finally {
			spy.mockRestore();
		}
	});

	test('First Run, then In Progress while held, Already Done with the replayed result after Record Result', async () => {
		const item = { orderId: 'o-1', amount: 100 };
		const first = await guard([item], claimParams());
		expect(first[OUTPUT_FIRST_RUN]).toHaveLength(1);
		const held = await guard([item], claimParams(), { executionId: 'e2' });
		expect(held[OUTPUT_IN_PROGRESS]).toHaveLength(1);
		expect(meta(held[OUTPUT_IN_PROGRESS][0]).outcome).toBe('in_progress');

		// The side effect answered; Record Result reads scope, key and attempt from the item.
		const response: INodeExecutionData = {
			json: { chargeId: 'ch_1', idempotency: meta(first[OUTPUT_FIRST_RUN][0]) },
		};
		const [recorded] = await guard([response], {
			operation: 'recordResult',
			scope: 'payment',
			key: 'o-1-charge',
			attempt: 0,
			resultWhat: 'item',
		});
		expect(meta(recorded[0])).toMatchObject({ outcome: 'recorded', status: 'completed' });

		const again = await guard([item], claimParams(), { executionId: 'e3' });
		expect(again[OUTPUT_ALREADY_DONE]).toHaveLength(1);
		expect(meta(again[OUTPUT_ALREADY_DONE][0])).toMatchObject({
			outcome: 'duplicate',
			result: { chargeId: 'ch_1' },
		});
		expect(meta(again[OUTPUT_ALREADY_DONE][0]).derivedKey).toBe(
			meta(first[OUTPUT_FIRST_RUN][0]).derivedKey,
		);
	});

	test('Release lets a retry claim the key again with the next attempt; a stale attempt is ABORTED', async () => {
		const item = { orderId: 'o-2', amount: 5 };
		const first = await guard([item], claimParams());
		const m = meta(first[OUTPUT_FIRST_RUN][0]);
		const [released] = await guard([{ idempotency: m }], {
			operation: 'release',
			scope: 'payment',
			key: 'o-2-charge',
			attempt: 0,
			errorMessage: 'timeout',
		});
		expect(meta(released[0])).toMatchObject({ outcome: 'released', status: 'failed' });
		const retry = await guard([item], claimParams(), { executionId: 'e2' });
		expect(meta(retry[OUTPUT_FIRST_RUN][0]).attempt).toBe(2);
		const error = await guard([{}], {
			operation: 'recordResult',
			scope: 'payment',
			key: 'o-2-charge',
			attempt: 1,
			resultWhat: 'item',
		}).catch((e: unknown) => e);
		expect(error).toBeInstanceOf(NodeOperationError);
		expect((error as NodeOperationError).context).toMatchObject({
			grpcCode: 'ABORTED',
			itemIndex: 0,
		});
	});

	test('the same key twice in one execution: the second item leaves by In Progress', async () => {
		const out = await guard(
			[
				{ orderId: 'twice', amount: 1 },
				{ orderId: 'twice', amount: 1 },
			],
			claimParams(),
		);
		expect(out[OUTPUT_FIRST_RUN].map((i) => i.pairedItem)).toEqual([{ item: 0 }]);
		expect(out[OUTPUT_IN_PROGRESS].map((i) => i.pairedItem)).toEqual([{ item: 1 }]);
	});

	test('a fingerprint mismatch is FAILED_PRECONDITION: thrown without Continue On Fail, and nothing in the batch is claimed', async () => {
		await guard([{ orderId: 'fp', amount: 1 }], claimParams());
		const error = await guard(
			[
				{ orderId: 'fresh-a', amount: 1 },
				{ orderId: 'fp', amount: 999 },
			],
			claimParams(),
		).catch((e: unknown) => e);
		expect(error).toBeInstanceOf(NodeOperationError);
		expect((error as NodeOperationError).context).toMatchObject({
			grpcCode: 'FAILED_PRECONDITION',
			itemIndex: 1,
		});
		expect((error as NodeOperationError).message).toMatch(/fp-charge/);
		const rows = await sidecar.sql(
			"SELECT key FROM durable_idempotency_keys WHERE key = 'fresh-a-charge'",
		);
		expect(rows).toHaveLength(0);
	});

	test('with Continue On Fail the mismatching item leaves by In Progress with the error; the others are claimed', async () => {
		await guard([{ orderId: 'fp2', amount: 1 }], claimParams());
		const out = await guard(
			[
				{ orderId: 'fresh-b', amount: 1 },
				{ orderId: 'fp2', amount: 999 },
				{ orderId: 'fresh-c', amount: 1 },
			],
			claimParams(),
			{ continueOnFail: true },
		);
		expect(out[OUTPUT_FIRST_RUN].map((i) => i.pairedItem)).toEqual([{ item: 0 }, { item: 2 }]);
		expect(out[OUTPUT_IN_PROGRESS]).toHaveLength(1);
		expect(out[OUTPUT_IN_PROGRESS][0].pairedItem).toEqual({ item: 1 });
		expect(asN8nHandsOn(out[OUTPUT_IN_PROGRESS][0], [], true).routed).toBe(true); // by the error output, in n8n
		expect(out[OUTPUT_IN_PROGRESS][0].json.error).toMatch(/fp2-charge/);
	});

	test('under Continue On Fail a Claim that fails as a whole sends no item on by First Run', async () => {
		// Thrown, n8n would send the items out of the first output, First Run: the call, unclaimed.
		const items = [{ orderId: 'whole-a' }, { orderId: 'whole-b' }];
		const credentials = { ...sidecar.credentials(), host: '127.0.0.1:99999' };
		const run = (continueOnFail: boolean) =>
			node.execute.call(
				executeContext({
					items,
					params: claimParams(),
					credentials,
					workflowId: 'wf-guard',
					executionId: 'e1',
					continueOnFail,
				}),
			);
		const out = await run(true);
		expect(out[OUTPUT_FIRST_RUN]).toHaveLength(0);
		expect(out[OUTPUT_IN_PROGRESS].map((i) => i.pairedItem)).toEqual([{ item: 0 }, { item: 1 }]);
		expect(out[OUTPUT_IN_PROGRESS][0].json.error).toContain('port must be 1 to 65535');
		await expect(run(false)).rejects.toThrow('port must be 1 to 65535');
	});

	test('an empty key is an author error; Attempt 0 without a claim on the item is refused', async () => {
		const error = await guard([{ orderId: '' }], claimParams({ key: '' })).catch((e: unknown) => e);
		expect(error).toBeInstanceOf(NodeOperationError);
		const [out] = await guard(
			[{}],
			{ operation: 'release', scope: 'payment', key: 'x', attempt: 0 },
			{ continueOnFail: true },
		);
		expect(out[0].json.error).toMatch(/Attempt/);
	});
});
