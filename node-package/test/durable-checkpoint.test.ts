import { NodeOperationError, type IDataObject, type INodeExecutionData } from 'n8n-workflow';

import { DurableCheckpoint } from '../nodes/DurableCheckpoint/DurableCheckpoint.node';
import { OUTPUT_START, ResumePoint } from '../nodes/ResumePoint/ResumePoint.node';
import { closeAllSidecarClients, getSidecarClient } from '../shared/transport';
import { asN8nHandsOn, executeContext, type ParamValue } from './support/n8n';
import { TestSidecar } from './support/sidecar';

let sidecar: TestSidecar;
const node = new DurableCheckpoint();

beforeAll(async () => {
	sidecar = await TestSidecar.start();
});

afterAll(async () => {
	closeAllSidecarClients();
	await sidecar?.stop();
});

async function start(
	workflowId: string,
	keys: string[],
	executionId = 'e1',
): Promise<INodeExecutionData[]> {
	const out = await new ResumePoint().execute.call(
		executeContext({
			items: keys.map((orderId) => ({ orderId })),
			params: { instanceKey: (_i: number, item: INodeExecutionData) => item.json.orderId },
			credentials: sidecar.credentials(),
			workflowId,
			executionId,
		}),
	);
	return out[OUTPUT_START];
}

async function run(
	items: Array<IDataObject | INodeExecutionData>,
	params: Record<string, ParamValue>,
	opts: { workflowId: string; executionId?: string; continueOnFail?: boolean },
): Promise<INodeExecutionData[]> {
	const [out] = await node.execute.call(
		executeContext({
			items,
			params,
			credentials: sidecar.credentials(),
			executionId: 'e1',
			...opts,
		}),
	);
	return out;
}

async function states(
	workflowId: string,
	key: string,
): Promise<Array<{ sequence: string; step_name: string }>> {
	return await sidecar.sql(
		'SELECT sequence::text, step_name FROM durable_checkpoints WHERE workflow_id = $1 AND instance_key = $2 ORDER BY sequence',
		[workflowId, key],
	);
}

describe('Durable Checkpoint: Save', () => {
	test('saves many items in one SaveCheckpoints call and passes them through with the checkpoint metadata', async () => {
		const wf = 'wf-batch';
		const keys = Array.from({ length: 60 }, (_, i) => `order-${i}`);
		const started = await start(wf, keys);
		const client = getSidecarClient(sidecar.connection());
		const spy = jest.spyOn(client, 'saveCheckpoints');
		try {
			const out = await run(
				started,
				{
					operation: 'save',
					instanceKey: (_i: number, item: INodeExecutionData) =>
						(item.json.durable as IDataObject).instanceKey,
					stepName: 'paid',
					saveWhat: 'item',
				},
				{ workflowId: wf },
			);
			expect(spy).toHaveBeenCalledTimes(1);
			expect(spy.mock.calls[0][0].items).toHaveLength(60);
			expect(out).toHaveLength(60);
			expect(out.map((i) => i.pairedItem)).toEqual(keys.map((_, i) => ({ item: i })));
			expect(out[7].json.orderId).toBe('order-7');
			expect(out[7].json.durable).toMatchObject({
				instanceKey: 'order-7',
				lastSequence: 1,
				lastStep: 'paid',
				checkpoint: { sequence: 1, stepName: 'paid', deduplicated: false },
			});
		} finally {
			spy.mockRestore();
		}
	});

	test('saving the same step and state again is deduplicated, not appended', async () => {
		const wf = 'wf-dedupe';
		await start(wf, ['d-1']);
		const params = {
			operation: 'save',
			instanceKey: 'd-1',
			stepName: 'paid',
			saveWhat: 'json',
			stateJson: '{"a":1}',
		};
		await run([{}], params, { workflowId: wf });
		const again = await run([{}], params, { workflowId: wf });
		expect((again[0].json.durable as IDataObject).checkpoint).toMatchObject({
			sequence: 1,
			deduplicated: true,
		});
		expect(await states(wf, 'd-1')).toHaveLength(1);
	});

	test('chosen fields save only those paths; the durable metadata is never saved', async () => {
		const wf = 'wf-fields';
		const [item] = await start(wf, ['f-1']);
		item.json.payment = { id: 'p1', card: 'secret' };
		await run(
			[item],
			{
				operation: 'save',
				instanceKey: 'f-1',
				stepName: 'paid',
				saveWhat: 'fields',
				fields: 'orderId, payment.id',
			},
			{ workflowId: wf },
		);
		const [row] = await sidecar.sql<{ state: unknown }>(
			"SELECT convert_from(state, 'UTF8')::jsonb AS state FROM durable_checkpoints WHERE workflow_id = $1",
			[wf],
		);
		expect(JSON.stringify(row.state)).toContain('"p1"');
		expect(JSON.stringify(row.state)).not.toContain('secret');
		expect(JSON.stringify(row.state)).not.toContain('durable');
	});

	test('Continue On Fail off: one unknown instance fails the batch with NOT_FOUND as NodeOperationError for that item; nothing is saved', async () => {
		const wf = 'wf-notfound';
		await start(wf, ['n-0', 'n-2']);
		const keys = ['n-0', 'missing', 'n-2'];
		const error = await run(
			keys.map((k) => ({ k })),
			{ operation: 'save', instanceKey: (i: number) => keys[i], stepName: 's', saveWhat: 'item' },
			{ workflowId: wf },
		).catch((e: unknown) => e);
		expect(error).toBeInstanceOf(NodeOperationError);
		expect((error as NodeOperationError).context).toMatchObject({
			itemIndex: 1,
			grpcCode: 'NOT_FOUND',
		});
		expect((error as NodeOperationError).description).toMatch(/Resume Point/);
		expect(await states(wf, 'n-0')).toHaveLength(0);
	});

	test('Continue On Fail on: the failing item becomes an error item, the others are saved', async () => {
		const wf = 'wf-cof';
		await start(wf, ['c-0', 'c-2']);
		const keys = ['c-0', 'missing', 'c-2'];
		const out = await run(
			keys.map((k) => ({ k })),
			{ operation: 'save', instanceKey: (i: number) => keys[i], stepName: 's', saveWhat: 'item' },
			{ workflowId: wf, continueOnFail: true },
		);
		expect(out).toHaveLength(3);
		expect(out[1].json.error).toMatch(/does not exist/);
		expect(out[1].pairedItem).toEqual({ item: 1 });
		expect(asN8nHandsOn(out[1], [], true).routed).toBe(true); // by the error output, in n8n
		expect((out[0].json.durable as IDataObject).lastSequence).toBe(1);
		expect((out[2].json.durable as IDataObject).lastSequence).toBe(1);
	});

	test('a stale Expected Sequence is refused (ABORTED) as a NodeOperationError', async () => {
		const wf = 'wf-fence';
		await start(wf, ['x-1']);
		await run(
			[{ v: 1 }],
			{
				operation: 'save',
				instanceKey: 'x-1',
				stepName: 'a',
				saveWhat: 'item',
				options: { expectedSequence: 0 },
			},
			{ workflowId: wf },
		);
		const error = await run(
			[{ v: 2 }],
			{
				operation: 'save',
				instanceKey: 'x-1',
				stepName: 'b',
				saveWhat: 'item',
				options: { expectedSequence: 0 },
			},
			{ workflowId: wf },
		).catch((e: unknown) => e);
		expect(error).toBeInstanceOf(NodeOperationError);
		expect((error as NodeOperationError).context.grpcCode).toBe('ABORTED');
		await run(
			[{ v: 2 }],
			{
				operation: 'save',
				instanceKey: 'x-1',
				stepName: 'b',
				saveWhat: 'item',
				options: { expectedSequence: 1 },
			},
			{ workflowId: wf },
		);
		expect(await states(wf, 'x-1')).toHaveLength(2);
	});

	test('an empty Instance Key is an author error naming the item', async () => {
		const error = await run(
			[{ a: 1 }, { a: 2 }],
			{
				operation: 'save',
				instanceKey: (i: number) => (i === 1 ? '' : 'k'),
				stepName: 's',
				saveWhat: 'item',
			},
			{ workflowId: 'wf-empty' },
		).catch((e: unknown) => e);
		expect(error).toBeInstanceOf(NodeOperationError);
		expect((error as NodeOperationError).context.itemIndex).toBe(1);
	});
});

describe('Durable Checkpoint: Complete, Fail, Schedule Resume', () => {
	test('Complete Instance stores the result and finishes the instance', async () => {
		const wf = 'wf-complete';
		await start(wf, ['done']);
		const out = await run(
			[{ total: 5 }],
			{ operation: 'complete', instanceKey: 'done', resultWhat: 'item' },
			{ workflowId: wf },
		);
		expect(out[0].json.durable).toMatchObject({ status: 'completed', instanceKey: 'done' });
		const [row] = await sidecar.sql<{ status: string }>(
			'SELECT status FROM durable_instances WHERE workflow_id = $1',
			[wf],
		);
		expect(row.status).toBe('completed');
	});

	test('Fail Instance needs a reason; failing a completed instance is FAILED_PRECONDITION', async () => {
		const wf = 'wf-fail';
		await start(wf, ['f-1', 'f-2']);
		const out = await run(
			[{}],
			{ operation: 'fail', instanceKey: 'f-1', errorMessage: 'card declined' },
			{ workflowId: wf },
		);
		expect(out[0].json.durable).toMatchObject({ status: 'failed' });
		await run(
			[{}],
			{ operation: 'complete', instanceKey: 'f-2', resultWhat: 'none' },
			{ workflowId: wf },
		);
		const error = await run(
			[{}],
			{ operation: 'fail', instanceKey: 'f-2', errorMessage: 'late' },
			{ workflowId: wf },
		).catch((e: unknown) => e);
		expect(error).toBeInstanceOf(NodeOperationError);
		expect((error as NodeOperationError).context).toMatchObject({
			grpcCode: 'FAILED_PRECONDITION',
			itemIndex: 0,
		});
		const empty = await run(
			[{}],
			{ operation: 'fail', instanceKey: 'f-1', errorMessage: ' ' },
			{ workflowId: wf, continueOnFail: true },
		);
		expect(empty[0].json.error).toMatch(/Reason is empty/);
	});

	test('Schedule Resume after a duration or at a time sets the wake-up and releases the lease', async () => {
		const wf = 'wf-wake';
		await start(wf, ['w-1', 'w-2']);
		const [after] = await run(
			[{}],
			{
				operation: 'scheduleResume',
				instanceKey: 'w-1',
				resumeWhen: 'after',
				amount: 2,
				unit: 'hours',
			},
			{ workflowId: wf },
		);
		const wakeAt = new Date((after.json.durable as IDataObject).wakeAt as string).getTime();
		expect(wakeAt - Date.now()).toBeGreaterThan(2 * 3600_000 - 60_000);
		expect(wakeAt - Date.now()).toBeLessThan(2 * 3600_000 + 60_000);
		const at = '2030-01-02T03:04:05.000Z';
		const [fixed] = await run(
			[{}],
			{ operation: 'scheduleResume', instanceKey: 'w-2', resumeWhen: 'at', wakeAt: at },
			{ workflowId: wf },
		);
		expect((fixed.json.durable as IDataObject).wakeAt).toBe(at);
		const bad = await run(
			[{}],
			{ operation: 'scheduleResume', instanceKey: 'w-2', resumeWhen: 'at', wakeAt: 'soon' },
			{ workflowId: wf, continueOnFail: true },
		);
		expect(bad[0].json.error).toMatch(/not a valid time/);
	});
});
