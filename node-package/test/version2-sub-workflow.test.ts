/**
 * Version 2 in a sub-workflow: it acts for its caller's instance.
 */
import { NodeOperationError, type IDataObject, type INodeExecutionData } from 'n8n-workflow';

import { OUTPUT_FIRST_RUN } from '../nodes/IdempotencyGuard/IdempotencyGuard.node';
import { OUTPUT_RESUME, OUTPUT_START } from '../nodes/ResumePoint/ResumePoint.node';
import { getSidecarClient } from '../shared/transport';
import type { UpstreamNode } from './support/n8n';
import {
	CHARGE,
	durable,
	GUARD,
	HTTP,
	httpResponse,
	runGuard,
	runResumePoint,
	runSave,
	sidecar,
	useSidecar,
	type Run,
} from './support/version2';

useSidecar();

describe("a sub-workflow acts for its caller's instance", () => {
	const TRIGGER: UpstreamNode = {
		name: 'When Executed by Another Workflow',
		type: 'n8n-nodes-base.executeWorkflowTrigger',
	};
	/** What Execute Workflow hands a sub-workflow whose trigger accepts all data: the JSON, no pairing. */
	const handedOn = (items: INodeExecutionData[]): INodeExecutionData[] =>
		items.map((item) => ({ json: structuredClone(item.json) }));
	/** The sub-workflow's Claim → charge → Save on `items`: what the Save put out, and the key's row. */
	const chargeInSub = async (
		sub: Run,
		items: INodeExecutionData[],
		key: string,
	): Promise<{ saved: INodeExecutionData[]; row: Record<string, unknown> }> => {
		const claimed = await runGuard(sub, items, [TRIGGER]);
		expect(claimed[OUTPUT_FIRST_RUN]).toHaveLength(1);
		const saved = await runSave(sub, httpResponse(claimed[OUTPUT_FIRST_RUN], CHARGE), [
			HTTP,
			{ ...GUARD, output: claimed[OUTPUT_FIRST_RUN] },
			TRIGGER,
		]);
		expect(durable(saved[0])).toMatchObject({
			workflowId: 'wf-caller',
			instanceKey: key,
			lastStep: 'charge',
			completedKey: { scope: 'payment', key },
		});
		const [row] = await sidecar.sql(
			"SELECT holder, status, attempt FROM durable_idempotency_keys WHERE scope = 'payment' AND key = $1",
			[key],
		);
		return { saved, row };
	};

	test("the Claim and the Save in the sub-workflow claim, save and complete on the caller's instance, as the caller", async () => {
		const parent = { workflowId: 'wf-caller', executionId: 'p1' };
		const sub = { workflowId: 'wf-charge-sub', executionId: 's1', parentExecutionId: 'p1' };
		const started = await runResumePoint(parent, [{ body: { orderId: 'o-sub-1' } }]);
		const { saved, row } = await chargeInSub(sub, handedOn(started[OUTPUT_START]), 'o-sub-1');
		expect(row).toMatchObject({ holder: 'p1', status: 'completed' });
		const [instance] = await sidecar.sql(
			"SELECT lease_owner, last_step FROM durable_instances WHERE workflow_id = 'wf-caller' AND instance_key = 'o-sub-1'",
		);
		expect(instance).toMatchObject({ lease_owner: 'p1', last_step: 'charge' });
		expect(
			await sidecar.sql("SELECT 1 FROM durable_instances WHERE workflow_id = 'wf-charge-sub'"),
		).toHaveLength(0);
		// Back in the caller, the next durable node finds the same instance on the returned item.
		const next = await runGuard(
			parent,
			handedOn(saved),
			[{ name: 'Execute Workflow', type: 'n8n-nodes-base.executeWorkflow' }],
			{ scope: 'notify' },
		);
		expect((next[OUTPUT_FIRST_RUN][0].json.idempotency as IDataObject).key).toBe('o-sub-1');
	});

	test("after a crash, the resumed caller's sub-workflow takes the dead claim over at once (attempt 2)", async () => {
		const first = { workflowId: 'wf-caller', executionId: 'p-dead' };
		const started = await runResumePoint(first, [{ body: { orderId: 'o-sub-2' } }]);
		await runGuard(
			{ workflowId: 'wf-charge-sub', executionId: 's-dead', parentExecutionId: 'p-dead' },
			handedOn(started[OUTPUT_START]),
			[TRIGGER],
		);
		// n8n died during the charge; the instance's lease lapsed and another execution resumed it.
		await sidecar.expireLease('wf-caller', 'o-sub-2');
		const second = { workflowId: 'wf-caller', executionId: 'p-next' };
		const resumed = await runResumePoint(second, [{ body: { orderId: 'o-sub-2' } }]);
		expect(resumed[OUTPUT_RESUME]).toHaveLength(1);
		const again = await runGuard(
			{ workflowId: 'wf-charge-sub', executionId: 's-next', parentExecutionId: 'p-next' },
			handedOn(resumed[OUTPUT_RESUME]),
			[TRIGGER],
		);
		expect(again[OUTPUT_FIRST_RUN]).toHaveLength(1);
		expect(again[OUTPUT_FIRST_RUN][0].json.idempotency).toMatchObject({
			key: 'o-sub-2',
			attempt: 2,
		});
	});

	test("another workflow's instance outside a sub-workflow is an author error; nothing is saved or claimed", async () => {
		const started = await runResumePoint({ workflowId: 'wf-owner', executionId: 'o1' }, [
			{ body: { orderId: 'o-foreign' } },
		]);
		const elsewhere = { workflowId: 'wf-elsewhere', executionId: 'x1' };
		const client = getSidecarClient(sidecar.connection());
		const save = jest.spyOn(client, 'saveCheckpoints');
		const claim = jest.spyOn(client, 'claim');
		try {
			await expect(runSave(elsewhere, handedOn(started[OUTPUT_START]), [TRIGGER])).rejects.toThrow(
				/belongs to instance 'o-foreign' of workflow wf-owner, not of this workflow/,
			);
			await expect(runGuard(elsewhere, handedOn(started[OUTPUT_START]), [TRIGGER])).rejects.toThrow(
				/belongs to instance 'o-foreign' of workflow wf-owner/,
			);
			expect(save).not.toHaveBeenCalled();
			expect(claim).not.toHaveBeenCalled();
		} finally {
			save.mockRestore();
			claim.mockRestore();
		}
	});

	test('an item that lost its durable field in the caller (a Split Out at its default): the sub-workflow acts on the one instance the caller took', async () => {
		const parent = { workflowId: 'wf-caller', executionId: 'p4' };
		const sub = { workflowId: 'wf-charge-sub', executionId: 's4', parentExecutionId: 'p4' };
		await runResumePoint(parent, [{ body: { orderId: 'o-sub-4' } }]);
		// Split Out (Include: No Other Fields) made a new item of the line: no durable field.
		const { row } = await chargeInSub(
			sub,
			[{ json: { line: { sku: 'sku-a', price: 10 } } }],
			'o-sub-4',
		);
		expect(row).toMatchObject({ holder: 'p4', status: 'completed', attempt: '1' }); // int8 as text
	});

	test('a caller that took several instances: an item without its durable field is an error naming them, nothing is claimed', async () => {
		const parent = { workflowId: 'wf-caller', executionId: 'p5' };
		const sub = { workflowId: 'wf-charge-sub', executionId: 's5', parentExecutionId: 'p5' };
		await runResumePoint(parent, [
			{ body: { orderId: 'o-sub-5a' } },
			{ body: { orderId: 'o-sub-5b' } },
		]);
		const claim = jest.spyOn(getSidecarClient(sidecar.connection()), 'claim');
		try {
			const error: unknown = await runGuard(
				sub,
				[{ json: { line: { sku: 'sku-a' } } }],
				[TRIGGER],
			).catch((e: unknown) => e);
			if (!(error instanceof NodeOperationError)) throw new Error('expected a NodeOperationError');
			expect(error.message).toMatch(/came into this sub-workflow without its instance/);
			expect(error.description).toMatch(/holds 2 instances/);
			expect(claim).not.toHaveBeenCalled();
		} finally {
			claim.mockRestore();
		}
	});

	test('a sub-workflow item without its durable field: the error says how to hand it on', async () => {
		const sub = { workflowId: 'wf-charge-sub', executionId: 's3', parentExecutionId: 'p3' };
		const error: unknown = await runGuard(
			sub,
			[{ json: { orderId: 'o-fields' } }],
			[TRIGGER],
		).catch((e: unknown) => e);
		if (!(error instanceof NodeOperationError)) throw new Error('expected a NodeOperationError');
		expect(error.message).toMatch(/came into this sub-workflow without its instance/);
		expect(error.description).toMatch(/Accept All Data/);
		// The caller's other way to lose it: a Split Out at its default (n8n's "No Other Fields").
		expect(error.description).toMatch(/Split Out with Include: No Other Fields/);
	});
});
