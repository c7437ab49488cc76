import {
	sleep,
	type IDataObject,
	type INodeExecutionData,
	type ITriggerResponse,
} from 'n8n-workflow';

import { OUTPUT_RESUME, OUTPUT_START, ResumePoint } from '../nodes/ResumePoint/ResumePoint.node';
import { ResumeTrigger } from '../nodes/ResumeTrigger/ResumeTrigger.node';
import { DurableCheckpoint } from '../nodes/DurableCheckpoint/DurableCheckpoint.node';
import { closeAllSidecarClients } from '../shared/transport';
import { executeContext, triggerContext, waitFor, type TriggerHarness } from './support/n8n';
import { TestSidecar } from './support/sidecar';

let sidecar: TestSidecar;
const open: ITriggerResponse[] = [];

beforeAll(async () => {
	sidecar = await TestSidecar.start();
});

afterAll(async () => {
	for (const response of open) await response.closeFunction?.();
	closeAllSidecarClients();
	await sidecar?.stop();
});

async function startInstances(workflowId: string, keys: string[]): Promise<void> {
	const out = await new ResumePoint().execute.call(
		executeContext({
			items: keys.map((orderId) => ({ orderId })),
			params: { instanceKey: (_i: number, item: INodeExecutionData) => item.json.orderId },
			credentials: sidecar.credentials(),
			workflowId,
			executionId: 'first-execution',
		}),
	);
	expect(out[OUTPUT_START]).toHaveLength(keys.length);
}

async function activate(
	workflowId: string,
	extra: Partial<Parameters<typeof triggerContext>[0]> = {},
): Promise<{ harness: TriggerHarness; response: ITriggerResponse }> {
	const harness = triggerContext({
		params: { pollIntervalSeconds: 0.2, options: { claimLeaseSeconds: 30 } },
		credentials: sidecar.credentials(),
		workflowId,
		...extra,
	});
	const response = await new ResumeTrigger().trigger.call(harness.context);
	open.push(response);
	return { harness, response };
}

function durable(item: INodeExecutionData): IDataObject {
	return item.json.durable as IDataObject;
}

describe('Resume Trigger', () => {
	test('emits a stalled instance once, with its claim token as deduplication key, and the Resume Point takes the claim over', async () => {
		const wf = 'wf-stalled';
		await startInstances(wf, ['s-1']);
		await startInstances('wf-other', ['not-mine']);
		await sidecar.expireLease(wf);
		await sidecar.expireLease('wf-other');
		const { harness, response } = await activate(wf);
		await waitFor(() => harness.emitted.length >= 1, 15_000, 'the stalled instance');
		// A few more polls: the claim holds, so nothing is emitted twice, and other workflows are never emitted.
		await sleep(800);
		expect(harness.emitted).toHaveLength(1);
		const [{ item, deduplicationKey }] = harness.emitted;
		expect(durable(item)).toMatchObject({
			source: 'resumeTrigger',
			instanceKey: 's-1',
			workflowId: wf,
			reason: 'stalled',
		});
		expect(deduplicationKey).toBe(durable(item).claimToken);

		const out = await new ResumePoint().execute.call(
			executeContext({
				items: [item],
				params: { instanceKey: '' },
				credentials: sidecar.credentials(),
				workflowId: wf,
				executionId: 'recovery',
			}),
		);
		expect(out[OUTPUT_RESUME]).toHaveLength(1);
		expect(durable(out[OUTPUT_RESUME][0])).toMatchObject({
			instanceKey: 's-1',
			leaseOwner: 'recovery',
			outcome: 'resumed',
		});
		await response.closeFunction?.();
	});

	test('emits a due wake-up scheduled by Durable Checkpoint', async () => {
		const wf = 'wf-wake';
		await startInstances(wf, ['w-1']);
		await new DurableCheckpoint().execute.call(
			executeContext({
				items: [{}],
				params: {
					operation: 'scheduleResume',
					instanceKey: 'w-1',
					resumeWhen: 'after',
					amount: 1,
					unit: 'seconds',
				},
				credentials: sidecar.credentials(),
				workflowId: wf,
				executionId: 'first-execution',
			}),
		);
		const { harness, response } = await activate(wf);
		await waitFor(() => harness.emitted.length >= 1, 15_000, 'the wake-up');
		expect(durable(harness.emitted[0].item)).toMatchObject({
			instanceKey: 'w-1',
			reason: 'wakeUp',
		});
		await response.closeFunction?.();
	});

	test('reconnects with backoff when the sidecar restarts, and closes cleanly', async () => {
		const wf = 'wf-restart';
		const { harness, response } = await activate(wf);
		await sleep(500);
		await sidecar.restart();
		await startInstances(wf, ['r-1']);
		await sidecar.expireLease(wf);
		await waitFor(() => harness.emitted.length >= 1, 45_000, 'an emit after the restart');
		expect(durable(harness.emitted[0].item).instanceKey).toBe('r-1');
		expect(harness.logs.some((l) => l.level === 'warn' && /reconnecting/.test(l.message))).toBe(
			true,
		);
		expect(harness.errors).toHaveLength(0);

		await response.closeFunction?.();
		// After close nothing is claimed or emitted any more.
		await startInstances(wf, ['r-2']);
		await sidecar.expireLease(wf);
		await sleep(1000);
		expect(harness.emitted).toHaveLength(1);
		const [row] = await sidecar.sql<{ lease_owner: string }>(
			"SELECT lease_owner FROM durable_instances WHERE workflow_id = $1 AND instance_key = 'r-2'",
			[wf],
		);
		expect(row.lease_owner).toBe('first-execution');
	}, 90_000);

	test('a wrong token is reported with emitError instead of retried silently', async () => {
		const { harness, response } = await activate('wf-token', {
			credentials: sidecar.credentials({ token: 'wrong-token-1' }),
		});
		await waitFor(() => harness.errors.length >= 1, 15_000, 'emitError');
		expect(harness.errors[0].message).toMatch(/DURABLE_AUTH_TOKENS/);
		await response.closeFunction?.();
	});

	test('manual mode emits the first due instance and stops', async () => {
		const wf = 'wf-manual';
		await startInstances(wf, ['m-1']);
		await sidecar.expireLease(wf);
		const { harness, response } = await activate(wf, { mode: 'manual' });
		await response.manualTriggerFunction?.();
		expect(harness.emitted).toHaveLength(1);
		expect(durable(harness.emitted[0].item).instanceKey).toBe('m-1');
		await response.closeFunction?.();
	});
});
