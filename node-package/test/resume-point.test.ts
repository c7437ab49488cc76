import { NodeOperationError, type IDataObject, type INodeExecutionData } from 'n8n-workflow';

import { DurableCheckpoint } from '../nodes/DurableCheckpoint/DurableCheckpoint.node';
import {
	OUTPUT_COMPLETED,
	OUTPUT_IN_PROGRESS,
	OUTPUT_RESUME,
	OUTPUT_START,
	ResumePoint,
} from '../nodes/ResumePoint/ResumePoint.node';
import { closeAllSidecarClients, getSidecarClient, InstanceStatus } from '../shared/transport';
import { executeContext, unary, type ParamValue } from './support/n8n';
import { TestSidecar } from './support/sidecar';

let sidecar: TestSidecar;
const node = new ResumePoint();
const checkpoint = new DurableCheckpoint();

beforeAll(async () => {
	sidecar = await TestSidecar.start();
});

afterAll(async () => {
	closeAllSidecarClients();
	await sidecar?.stop();
});

function durable(item: INodeExecutionData): IDataObject {
	return item.json.durable as IDataObject;
}

async function runResumePoint(
	items: IDataObject[],
	params: Record<string, ParamValue>,
	opts: { executionId: string; workflowId?: string; continueOnFail?: boolean },
): Promise<INodeExecutionData[][]> {
	const ctx = executeContext({
		items,
		params: { instanceKey: (_i: number, item: INodeExecutionData) => item.json.orderId, ...params },
		credentials: sidecar.credentials(),
		...opts,
	});
	return await node.execute.call(ctx);
}

async function save(
	workflowId: string,
	executionId: string,
	key: string,
	step: string,
	state: IDataObject,
	leaseSeconds = 0,
): Promise<void> {
	const ctx = executeContext({
		items: [{ ...state, durable: { instanceKey: key } }],
		params: {
			operation: 'save',
			instanceKey: key,
			stepName: step,
			saveWhat: 'item',
			options: leaseSeconds ? { leaseSeconds } : {},
		},
		credentials: sidecar.credentials(),
		workflowId,
		executionId,
	});
	await checkpoint.execute.call(ctx);
}

/** Lets an instance's lease lapse without waiting for it. */
describe('Resume Point', () => {
	test('a new key leaves by Start with its instance metadata and paired item', async () => {
		const out = await runResumePoint(
			[{ orderId: 'order-1', amount: 10 }],
			{},
			{ executionId: 'e1', workflowId: 'wf-start' },
		);
		expect(out).toHaveLength(4);
		expect(out[OUTPUT_START]).toHaveLength(1);
		const item = out[OUTPUT_START][0];
		expect(item.pairedItem).toEqual({ item: 0 });
		expect(item.json.amount).toBe(10);
		expect(durable(item)).toMatchObject({
			instanceKey: 'order-1',
			workflowId: 'wf-start',
			outcome: 'started',
			status: 'running',
			leaseOwner: 'e1',
		});
	});

	test('a re-delivered trigger while another execution holds the lease leaves by In Progress (BUSY), not Start', async () => {
		const wf = 'wf-busy';
		await runResumePoint([{ orderId: 'order-b' }], {}, { executionId: 'e1', workflowId: wf });
		const out = await runResumePoint(
			[{ orderId: 'order-b' }],
			{},
			{ executionId: 'e2', workflowId: wf },
		);
		expect(out[OUTPUT_START]).toHaveLength(0);
		expect(out[OUTPUT_IN_PROGRESS]).toHaveLength(1);
		expect(durable(out[OUTPUT_IN_PROGRESS][0])).toMatchObject({
			outcome: 'busy',
			leaseOwner: 'e1',
		});
	});

	test('the same key twice in one execution: the second item leaves by In Progress', async () => {
		const out = await runResumePoint(
			[{ orderId: 'dup-1' }, { orderId: 'dup-1' }, { orderId: 'dup-2' }],
			{},
			{ executionId: 'e1', workflowId: 'wf-dup' },
		);
		expect(out[OUTPUT_START].map((i) => i.pairedItem)).toEqual([{ item: 0 }, { item: 2 }]);
		expect(out[OUTPUT_IN_PROGRESS]).toHaveLength(1);
		expect(out[OUTPUT_IN_PROGRESS][0].pairedItem).toEqual({ item: 1 });
	});

	test('a crashed instance resumes with its saved state merged into the item', async () => {
		const wf = 'wf-resume';
		await runResumePoint([{ orderId: 'order-r' }], {}, { executionId: 'e1', workflowId: wf });
		await save(wf, 'e1', 'order-r', 'payment-captured', { paymentId: 'pay-9', total: 42 });
		await sidecar.expireLease(wf, 'order-r');
		const out = await runResumePoint(
			[{ orderId: 'order-r', total: 1 }],
			{},
			{ executionId: 'e2', workflowId: wf },
		);
		expect(out[OUTPUT_RESUME]).toHaveLength(1);
		const item = out[OUTPUT_RESUME][0];
		expect(item.json).toMatchObject({ orderId: 'order-r', paymentId: 'pay-9', total: 42 });
		expect(durable(item)).toMatchObject({
			outcome: 'resumed',
			lastStep: 'payment-captured',
			lastSequence: 1,
			resumeCount: 1,
		});
	});

	test('restore modes: replace the item, or keep it and put the state under durable.state', async () => {
		const wf = 'wf-modes';
		for (const key of ['m-replace', 'm-field']) {
			await runResumePoint([{ orderId: key }], {}, { executionId: 'e1', workflowId: wf });
			await save(wf, 'e1', key, 'step-a', { saved: true, orderId: key });
			await sidecar.expireLease(wf, key);
		}
		const replaced = await runResumePoint(
			[{ orderId: 'm-replace', extra: 1 }],
			{ options: { stateMerge: 'replace' } },
			{ executionId: 'e2', workflowId: wf },
		);
		expect(replaced[OUTPUT_RESUME][0].json.extra).toBeUndefined();
		expect(replaced[OUTPUT_RESUME][0].json.saved).toBe(true);
		const field = await runResumePoint(
			[{ orderId: 'm-field', extra: 1 }],
			{ options: { stateMerge: 'field' } },
			{ executionId: 'e2', workflowId: wf },
		);
		expect(field[OUTPUT_RESUME][0].json.extra).toBe(1);
		expect(field[OUTPUT_RESUME][0].json.saved).toBeUndefined();
		expect(durable(field[OUTPUT_RESUME][0]).state).toEqual({ saved: true, orderId: 'm-field' });
	});

	test('step outputs route a resumed instance by its last step; other steps leave by Resume', async () => {
		const wf = 'wf-steps';
		await runResumePoint(
			[{ orderId: 's-1' }, { orderId: 's-2' }],
			{},
			{ executionId: 'e1', workflowId: wf },
		);
		await save(wf, 'e1', 's-1', 'shipped', { a: 1 });
		await save(wf, 'e1', 's-2', 'unlisted', { a: 2 });
		await sidecar.expireLease(wf, 's-1');
		await sidecar.expireLease(wf, 's-2');
		const out = await runResumePoint(
			[{ orderId: 's-1' }, { orderId: 's-2' }],
			{ stepOutputs: 'paid, shipped' },
			{ executionId: 'e2', workflowId: wf },
		);
		expect(out).toHaveLength(6);
		expect(out[5].map((i) => i.json.orderId)).toEqual(['s-1']); // "Resume at shipped"
		expect(out[4]).toHaveLength(0); // "Resume at paid"
		expect(out[OUTPUT_RESUME].map((i) => i.json.orderId)).toEqual(['s-2']);
	});

	test('a completed instance leaves by Completed with its result, and nothing changes', async () => {
		const wf = 'wf-done';
		await runResumePoint([{ orderId: 'done-1' }], {}, { executionId: 'e1', workflowId: wf });
		await checkpoint.execute.call(
			executeContext({
				items: [{ durable: { instanceKey: 'done-1' } }],
				params: {
					operation: 'complete',
					instanceKey: 'done-1',
					resultWhat: 'json',
					resultJson: '{"invoice":"inv-1"}',
				},
				credentials: sidecar.credentials(),
				workflowId: wf,
				executionId: 'e1',
			}),
		);
		const out = await runResumePoint(
			[{ orderId: 'done-1' }],
			{},
			{ executionId: 'e9', workflowId: wf },
		);
		expect(out[OUTPUT_COMPLETED]).toHaveLength(1);
		expect(durable(out[OUTPUT_COMPLETED][0])).toMatchObject({
			outcome: 'finished',
			status: 'completed',
			result: { invoice: 'inv-1' },
		});
	});

	test('an item from the Resume Trigger takes over the claim named by durable.claimToken', async () => {
		const wf = 'wf-claim';
		await runResumePoint([{ orderId: 'c-1' }], {}, { executionId: 'e1', workflowId: wf });
		await save(wf, 'e1', 'c-1', 'waiting', { x: 1 });
		await sidecar.expireLease(wf, 'c-1');
		const client = getSidecarClient(sidecar.connection());
		const claimed = (
			await unary(client.instances, client.instances.claimResumable, client, {
				workflowIds: [wf],
				claimant: 'test',
				maxInstances: 10,
				leaseSeconds: 60,
			})
		).instances[0];
		expect(claimed.claimToken).toBeTruthy();
		// Without the token another execution is told BUSY (the claim holds the lease) ...
		const busy = await runResumePoint(
			[{ orderId: 'c-1' }],
			{},
			{ executionId: 'e2', workflowId: wf },
		);
		expect(busy[OUTPUT_IN_PROGRESS]).toHaveLength(1);
		// ... with it, the instance resumes, whatever the Instance Key expression gives.
		const out = await runResumePoint(
			[
				{
					durable: {
						source: 'resumeTrigger',
						claimToken: claimed.claimToken,
						instanceKey: 'c-1',
						workflowId: wf,
					},
				},
			],
			{ instanceKey: 'ignored' },
			{ executionId: 'e3', workflowId: wf },
		);
		expect(out[OUTPUT_RESUME]).toHaveLength(1);
		expect(durable(out[OUTPUT_RESUME][0])).toMatchObject({
			instanceKey: 'c-1',
			leaseOwner: 'e3',
			outcome: 'resumed',
		});
		expect(durable(out[OUTPUT_RESUME][0]).claimToken).toBeUndefined();
		expect(out[OUTPUT_RESUME][0].json.x).toBe(1);
	});

	test('Continue On Fail off: an empty key throws a NodeOperationError naming the item', async () => {
		await expect(
			runResumePoint(
				[{ orderId: 'ok' }, { orderId: '' }],
				{},
				{ executionId: 'e1', workflowId: 'wf-err' },
			),
		).rejects.toMatchObject({ constructor: NodeOperationError, context: { itemIndex: 1 } });
	});

	test('Continue On Fail on: failed items leave by In Progress with the error; the others are routed', async () => {
		const tooLong = 'k'.repeat(300);
		const out = await runResumePoint(
			[{ orderId: 'cof-ok' }, { orderId: '' }, { orderId: tooLong }],
			{},
			{ executionId: 'e1', workflowId: 'wf-cof', continueOnFail: true },
		);
		expect(out[OUTPUT_START].map((i) => i.pairedItem)).toEqual([{ item: 0 }]);
		expect(out[OUTPUT_IN_PROGRESS].map((i) => i.pairedItem)).toEqual([{ item: 1 }, { item: 2 }]);
		expect(out[OUTPUT_IN_PROGRESS][1].json.error).toMatch(/Instance Key is 300 characters long/);
		// No `error` object on the item: n8n would replace its JSON with { error } (see refusedItem).
		expect(out[OUTPUT_IN_PROGRESS][1].json.details).toMatchObject({ httpStatus: 400 });
	});

	/** The instance as the sidecar has it now. */
	const instanceOf = async (workflowId: string, instanceKey: string) => {
		const client = getSidecarClient(sidecar.connection());
		return await unary(client.instances, client.instances.getInstance, client, {
			workflowId,
			instanceKey,
		});
	};

	/**
	 * Registers a workflow version of `nodes` (as a sync from n8n would) under `label`: a Webhook and,
	 * unless `handOff` is false, an Execute Workflow Trigger feeding the Resume Point (what lets the
	 * version run as the Old Version output's sub-workflow).
	 */
	const registerVersion = async (wf: string, nodes: string[], label: string, handOff = true) => {
		const client = getSidecarClient(sidecar.connection());
		const typed = nodes.map((name) => ({
			name,
			type: name === 'Resume Point' ? 'n8n-nodes-durable.resumePoint' : 'n8n-nodes-base.noOp',
		}));
		const trigger = { name: 'Hand-off', type: 'n8n-nodes-base.executeWorkflowTrigger' };
		const connections = {
			[trigger.name]: { main: [[{ node: 'Resume Point', type: 'main', index: 0 }]] },
		};
		return await unary(client.versions, client.versions.registerVersion, client, {
			workflowId: wf,
			definitionJson: Buffer.from(
				JSON.stringify(
					handOff ? { nodes: [...typed, trigger], connections } : { nodes: typed, connections: {} },
				),
			),
			n8nVersionId: '',
			label,
			note: '',
			actor: 'test',
		});
	};

	test('without Version Mismatch Output an instance bound to an older version is refused, not run on the new logic', async () => {
		const wf = 'wf-versions-off';
		const register = (nodes: string[], label: string) => registerVersion(wf, nodes, label);
		await register(['Webhook', 'Resume Point'], '1.0.0');
		await runResumePoint([{ orderId: 'v-off' }], {}, { executionId: 'e1', workflowId: wf });
		await register(['Webhook', 'Resume Point', 'Charge'], '1.1.0');
		await sidecar.expireLease(wf, 'v-off');
		await expect(
			runResumePoint([{ orderId: 'v-off' }], {}, { executionId: 'e2', workflowId: wf }),
		).rejects.toMatchObject({
			message: expect.stringContaining('is bound to version 1 (1.0.0) of this workflow'),
			description: expect.stringContaining('turn on Version Mismatch Output'),
		});
		// Suspended at once with the reason: no automatic resume would mend it.
		const got = await instanceOf(wf, 'v-off');
		expect(got.instance).toMatchObject({
			status: InstanceStatus.INSTANCE_STATUS_SUSPENDED,
			leaseOwner: '',
			attempt: 0,
			lastError: expect.stringContaining('is bound to version 1 (1.0.0) of this workflow'),
		});
		const again = await runResumePoint(
			[{ orderId: 'v-off' }],
			{},
			{ executionId: 'e2b', workflowId: wf },
		);
		expect(again[OUTPUT_IN_PROGRESS]).toHaveLength(1);
		// An instance bound to the current version resumes as before.
		await runResumePoint([{ orderId: 'v-new' }], {}, { executionId: 'e3', workflowId: wf });
		await sidecar.expireLease(wf, 'v-new');
		const out = await runResumePoint(
			[{ orderId: 'v-new' }],
			{},
			{ executionId: 'e4', workflowId: wf },
		);
		expect(out[OUTPUT_RESUME]).toHaveLength(1);
	});

	test('Version Mismatch output carries the bound snapshot for an instance on an older version', async () => {
		const wf = 'wf-versions';
		const register = (nodes: string[], label: string) => registerVersion(wf, nodes, label);
		await register(['Webhook', 'Resume Point'], '1.0.0');
		await runResumePoint(
			[{ orderId: 'v-1' }],
			{ versionMismatchOutput: true },
			{ executionId: 'e1', workflowId: wf },
		);
		await register(['Webhook', 'Resume Point', 'Charge'], '1.1.0');
		await sidecar.expireLease(wf, 'v-1');
		const out = await runResumePoint(
			[{ orderId: 'v-1' }],
			{ versionMismatchOutput: true },
			{ executionId: 'e2', workflowId: wf },
		);
		expect(out).toHaveLength(5);
		expect(out[4]).toHaveLength(1);
		const meta = durable(out[4][0]);
		expect(meta).toMatchObject({ versionMismatch: true, boundVersion: 1, currentVersion: 2 });
		expect(meta.boundVersionSnapshot).toMatchObject({ version: 1, label: '1.0.0' });
		expect((meta.boundVersionSnapshot as IDataObject).workflow).toMatchObject({
			nodes: [{ name: 'Webhook' }, { name: 'Resume Point' }, { name: 'Hand-off' }],
		});
		// The lease goes with the item: e2 holds it and hands it over for version 1.
		expect(meta).toMatchObject({ claimToken: 'e2', runsBoundVersion: 1 });

		// The sub-workflow that runs version 1 (Execute Workflow, JSON source) feeds the item to
		// its own Resume Point: it takes the lease and routes by step, not to Version Mismatch again.
		await save(wf, 'e2', 'v-1', 'paid', { orderId: 'v-1', paid: true });
		const sub = await runResumePoint(
			[out[4][0].json],
			{ versionMismatchOutput: true, stepOutputs: 'paid' },
			{ executionId: 'e3', workflowId: wf },
		);
		expect(sub[4]).toHaveLength(1); // the "paid" step output
		expect(sub[5]).toHaveLength(0); // Version Mismatch
		const handed = durable(sub[4][0]);
		expect(handed).toMatchObject({
			outcome: 'resumed',
			boundVersion: 1,
			versionMismatch: true,
			runsBoundVersion: 1,
			leaseOwner: 'e3',
		});
		expect(handed.claimToken).toBeUndefined();
		expect(handed.boundVersionSnapshot).toBeUndefined();
		expect(sub[4][0].json.paid).toBe(true);

		// A plain re-delivery (no hand-off) while e3 holds the lease is In Progress, and the
		// used claim cannot be replayed by another execution: e2 no longer owns the lease.
		const again = await runResumePoint(
			[out[4][0].json],
			{ versionMismatchOutput: true, stepOutputs: 'paid' },
			{ executionId: 'e4', workflowId: wf },
		);
		expect(again[OUTPUT_IN_PROGRESS]).toHaveLength(1);
	});
	test('under Continue On Fail (the door: an error output) a refused instance leaves refused, never by Start', async () => {
		// n8n sends a throwing node's input items on out of its first output under an error output: a
		// version refusal thrown for the whole node sent the resumed order out of Start (a trial found it).
		const wf = 'wf-versions-door';
		await registerVersion(wf, ['Webhook', 'Resume Point'], '1.0.0');
		await runResumePoint([{ orderId: 'v-door' }], {}, { executionId: 'e1', workflowId: wf });
		await registerVersion(wf, ['Webhook', 'Resume Point', 'Charge'], '1.1.0');
		await sidecar.expireLease(wf, 'v-door');
		await runResumePoint([{ orderId: 'v-fresh' }], {}, { executionId: 'e1b', workflowId: wf });
		await sidecar.expireLease(wf, 'v-fresh');
		const out = await runResumePoint(
			[{ orderId: 'v-door' }, { orderId: 'v-fresh' }],
			{},
			{ executionId: 'e2', workflowId: wf, continueOnFail: true },
		);
		expect(out[OUTPUT_START]).toHaveLength(0);
		expect(out[OUTPUT_RESUME]).toHaveLength(1); // the other item goes on
		expect(out[OUTPUT_IN_PROGRESS]).toHaveLength(1);
		expect(out[OUTPUT_IN_PROGRESS][0]).toMatchObject({
			json: {
				error: expect.stringContaining('is bound to version 1 (1.0.0) of this workflow'),
				details: { httpStatus: 500 },
			},
			pairedItem: { item: 0 },
		});
		expect((await instanceOf(wf, 'v-door')).instance?.status).toBe(
			InstanceStatus.INSTANCE_STATUS_SUSPENDED,
		);
	});

	test('under Continue On Fail an error of the whole run leaves every item refused, none by Start', async () => {
		// Register Version asks the sidecar to read the workflow from n8n's API, which this sidecar has not.
		const out = await runResumePoint(
			[{ orderId: 'whole-1' }, { orderId: 'whole-2' }],
			{ options: { registerVersion: true } },
			{ executionId: 'e1', workflowId: 'wf-whole-run', continueOnFail: true },
		);
		expect(out[OUTPUT_START]).toHaveLength(0);
		expect(out[OUTPUT_IN_PROGRESS].map((i) => i.pairedItem)).toEqual([{ item: 0 }, { item: 1 }]);
		expect(out[OUTPUT_IN_PROGRESS][0].json.error).toContain('Registering the workflow version');
		await expect(
			runResumePoint(
				[{ orderId: 'whole-1' }],
				{ options: { registerVersion: true } },
				{ executionId: 'e2', workflowId: 'wf-whole-run' },
			),
		).rejects.toThrow('Registering the workflow version');
	});

	test('Version Mismatch Output on, a bound version without an Execute Workflow Trigger is refused: it could not run as a sub-workflow', async () => {
		const wf = 'wf-versions-no-handoff';
		await registerVersion(wf, ['Webhook', 'Resume Point'], '1.0.0', false);
		await runResumePoint(
			[{ orderId: 'v-nh' }],
			{ versionMismatchOutput: true },
			{ executionId: 'e1', workflowId: wf },
		);
		await registerVersion(wf, ['Webhook', 'Resume Point', 'Charge'], '1.1.0');
		await sidecar.expireLease(wf, 'v-nh');
		await expect(
			runResumePoint(
				[{ orderId: 'v-nh' }],
				{ versionMismatchOutput: true },
				{ executionId: 'e2', workflowId: wf },
			),
		).rejects.toMatchObject({
			message: expect.stringContaining('is bound to version 1 (1.0.0) of this workflow'),
			description: expect.stringContaining('Version 1 has no Execute Workflow Trigger'),
		});
		// Suspended with what the operator needs, the workflow's id filled in.
		const got = await instanceOf(wf, 'v-nh');
		expect(got.instance?.status).toBe(InstanceStatus.INSTANCE_STATUS_SUSPENDED);
		expect(got.instance?.lastError).toContain(
			`durable-sidecar instances move ${wf} --to 2 --key v-nh`,
		);
		expect(got.instance?.lastError).toContain(`durable-sidecar instances resume ${wf} v-nh`);
	});
});
