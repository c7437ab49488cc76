/**
 * Version 2 beside n8n's own nodes: a Webhook that answers Immediately before
 * the Resume Point (a warning on its output), and n8n's Wait node after a
 * Save (the renewal covers the wait).
 */
import {
	NodeOperationError,
	type IDataObject,
	type INodeExecutionData,
	type NodeExecutionHint,
} from 'n8n-workflow';

import { OUTPUT_START } from '../nodes/ResumePoint/ResumePoint.node';
import { getSidecarClient } from '../shared/transport';
import { executeContext, type UpstreamNode } from './support/n8n';
import {
	durable,
	resumePoint,
	RP,
	runResumePoint,
	runSave,
	sidecar,
	useSidecar,
} from './support/version2';

useSidecar();

describe('a Webhook that answers Immediately before the Resume Point: a warning on its output', () => {
	const webhook = (parameters: Record<string, unknown>): UpstreamNode => ({
		name: 'Webhook',
		type: 'n8n-nodes-base.webhook',
		typeVersion: 2.1,
		parameters: parameters as UpstreamNode['parameters'],
	});
	const run = async (upstream: UpstreamNode[], key: string): Promise<NodeExecutionHint[]> => {
		const hints: NodeExecutionHint[] = [];
		const out = await resumePoint.execute.call(
			executeContext({
				items: [{ body: { orderId: key } }],
				params: {
					instanceKey: (_i: number, item: INodeExecutionData) =>
						(item.json.body as IDataObject).orderId,
				},
				credentials: sidecar.credentials(),
				workflowId: 'wf-hints',
				executionId: `e-${key}`,
				nodeName: RP.name,
				typeVersion: 2,
				description: resumePoint.description,
				upstream,
				hints,
			}),
		);
		// The run goes on as before: the instance is started.
		expect(out[OUTPUT_START]).toHaveLength(1);
		return hints;
	};

	test("the Webhook's default Respond (Immediately), also through a Split Out: one warning naming it", async () => {
		const direct = await run([webhook({ httpMethod: 'POST', path: 'orders' })], 'o-hint-1');
		expect(direct).toHaveLength(1);
		expect(direct[0]).toMatchObject({ type: 'warning', location: 'outputPane' });
		expect(direct[0].message).toMatch(/The Webhook 'Webhook' answers Immediately/);
		const split = await run(
			[
				{ name: 'Split Out', type: 'n8n-nodes-base.splitOut' },
				webhook({ responseMode: 'onReceived' }),
			],
			'o-hint-2',
		);
		expect(split).toHaveLength(1);
	});

	test('Respond to Webhook, When Last Node Finishes, a disabled Webhook or the Resume Trigger: no warning', async () => {
		expect(await run([webhook({ responseMode: 'responseNode' })], 'o-hint-3')).toEqual([]);
		expect(await run([webhook({ responseMode: 'lastNode' })], 'o-hint-4')).toEqual([]);
		expect(await run([{ ...webhook({}), disabled: true }], 'o-hint-5')).toEqual([]);
		expect(
			await run([{ name: 'Resume Trigger', type: 'n8n-nodes-durable.resumeTrigger' }], 'o-hint-6'),
		).toEqual([]);
	});
});

describe("n8n's Wait node after a Save: the renewal covers the wait", () => {
	const wait = (parameters: Record<string, unknown>, typeVersion = 1.1): UpstreamNode => ({
		name: 'Wait',
		type: 'n8n-nodes-base.wait',
		typeVersion,
		parameters: parameters as UpstreamNode['parameters'],
	});

	async function startedWithLease(wf: string, key: string, lease = 60) {
		const run = { workflowId: wf, executionId: 'e1' };
		const started = await runResumePoint(run, [{ body: { orderId: key } }], {
			options: { leaseSeconds: lease },
		});
		return {
			run,
			items: started[OUTPUT_START],
			upstream: [{ ...RP, output: started[OUTPUT_START] }],
		};
	}

	async function leaseLeft(wf: string, key: string): Promise<number> {
		const [row] = await sidecar.sql<{ s: number }>(
			'SELECT extract(epoch FROM lease_expires_at - now())::float AS s FROM durable_instances WHERE workflow_id = $1 AND instance_key = $2',
			[wf, key],
		);
		return row.s;
	}

	test('a Wait of 10 minutes: the lease runs the wait plus the instance lease; the next Save renews as usual', async () => {
		const { run, items, upstream } = await startedWithLease('wf-wait-10', 'o-w10');
		await runSave(run, items, upstream, { stepName: 'charged' }, [
			wait({ resume: 'timeInterval', amount: 10, unit: 'minutes' }),
		]);
		const left = await leaseLeft('wf-wait-10', 'o-w10');
		expect(left).toBeGreaterThan(650);
		expect(left).toBeLessThanOrEqual(661);
		await runSave(run, items, upstream, { stepName: 'notified' });
		expect(await leaseLeft('wf-wait-10', 'o-w10')).toBeLessThanOrEqual(61);
	});

	test('a Wait with no limit, or longer than a day with the lease: an error naming the way out; nothing is saved', async () => {
		const { run, items, upstream } = await startedWithLease('wf-wait-bad', 'o-wbad');
		const client = getSidecarClient(sidecar.connection());
		const spy = jest.spyOn(client, 'saveCheckpoints');
		try {
			await expect(
				runSave(run, items, upstream, { stepName: 'charged' }, [wait({ resume: 'webhook' })]),
			).rejects.toThrow(
				/The Wait node 'Wait' after this Save waits for a webhook call or a form with no Limit Wait Time/,
			);
			await expect(
				runSave(run, items, upstream, { stepName: 'charged' }, [
					wait({ resume: 'timeInterval', amount: '={{ $json.days }}', unit: 'days' }),
				]),
			).rejects.toThrow(/takes its time from an expression/);
			const tooLong = await runSave(run, items, upstream, { stepName: 'charged' }, [
				wait({ resume: 'timeInterval', amount: 2, unit: 'days' }),
			]).catch((e: unknown) => e);
			if (!(tooLong instanceof NodeOperationError))
				throw new Error('expected a NodeOperationError');
			expect(tooLong.message).toMatch(/waits 2 days: .* longer than a lease can be \(1 day\)/);
			expect(tooLong.description).toMatch(/Schedule Resume/);
			expect(spy).not.toHaveBeenCalled();
		} finally {
			spy.mockRestore();
		}
	});

	test('a Save that completes the instance is not checked: nothing holds a lease after it', async () => {
		const { run, items, upstream } = await startedWithLease('wf-wait-done', 'o-wdone');
		const [saved] = await runSave(
			run,
			items,
			upstream,
			{ stepName: 'done', options: { completeInstance: true } },
			[wait({ resume: 'webhook' })],
		);
		expect(durable(saved).status).toBe('completed');
	});

	test('a Wait right after the Resume Point: the lease it takes covers the wait; the instance keeps its length', async () => {
		const run = { workflowId: 'wf-wait-rp', executionId: 'e1' };
		const started = await runResumePoint(
			run,
			[{ body: { orderId: 'o-wrp' } }],
			{ options: { leaseSeconds: 60 } },
			[wait({ resume: 'timeInterval', amount: 5, unit: 'minutes' })],
		);
		expect(durable(started[OUTPUT_START][0]).leaseSeconds).toBe(60);
		const left = await leaseLeft('wf-wait-rp', 'o-wrp');
		expect(left).toBeGreaterThan(350);
		expect(left).toBeLessThanOrEqual(361);
		// Without a Lease option, a Wait no lease can cover is refused before anything starts.
		const client = getSidecarClient(sidecar.connection());
		const spy = jest.spyOn(client, 'startOrResume');
		try {
			await expect(
				runResumePoint(run, [{ body: { orderId: 'o-wrp-2' } }], {}, [wait({ resume: 'form' })]),
			).rejects.toThrow(
				/The Wait node 'Wait' after this Resume Point waits for a webhook call or a form/,
			);
			expect(spy).not.toHaveBeenCalled();
		} finally {
			spy.mockRestore();
		}
	});

	test("the Save's own Lease option is the author's choice: no check, that lease", async () => {
		const { run, items, upstream } = await startedWithLease('wf-wait-own', 'o-wown');
		await runSave(run, items, upstream, { stepName: 'charged', options: { leaseSeconds: 7200 } }, [
			wait({ resume: 'webhook' }),
		]);
		expect(await leaseLeft('wf-wait-own', 'o-wown')).toBeGreaterThan(7100);
	});
});
