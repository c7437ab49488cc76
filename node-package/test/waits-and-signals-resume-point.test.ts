/**
 * The Resume Point and waits: its retry policy, and how it routes an instance
 * back from a wait (Event, Timed Out, Busy). Single client calls are replaced
 * (jest.spyOn on the client) to pin down what the node sends.
 */
import { NodeOperationError, NodeHelpers, type IDataObject } from 'n8n-workflow';

import {
	OUTPUT_IN_PROGRESS,
	ResumePoint,
	retryPolicyOf,
} from '../nodes/ResumePoint/ResumePoint.node';
import {
	ResumeReason,
	RunState,
	StartOutcome,
	type StartOrResumeResponse,
} from '../shared/transport';
import type { GetInstanceRequest, GetInstanceResponse } from '../shared/gen/durable/v1/instance';
import { unary } from './support/n8n';
import { client, event, instance, runNode, useSidecar } from './support/waits-and-signals';

useSidecar();

describe('Resume Point: retry policy', () => {
	test('no retry option: no policy is sent (the instance keeps its own, a new one the sidecar default)', () => {
		expect(retryPolicyOf({})).toBeUndefined();
		expect(retryPolicyOf({ leaseSeconds: 60 })).toBeUndefined();
	});

	test('only the retry options added are sent (seconds as ms); the sidecar takes its defaults for the rest', () => {
		expect(retryPolicyOf({ maxAutomaticResumes: 3 })).toEqual({
			maxAutomaticResumes: 3,
			defaultsForUnset: true,
		});
		expect(retryPolicyOf({ initialBackoffSeconds: 1.5, maxBackoffSeconds: 4, jitter: 0 })).toEqual({
			initialBackoffMs: 1500,
			maxBackoffMs: 4000,
			jitter: 0,
			defaultsForUnset: true,
		});
		// An option that is no number counts as not added, never as 0 (no limit).
		expect(retryPolicyOf({ maxAutomaticResumes: 'many' })).toBeUndefined();
	});

	test("an option added alone keeps the sidecar's defaults for the others (DURABLE_RETRY_*), not the node's", async () => {
		const [start] = await runNode(
			new ResumePoint(),
			{ instanceKey: 'retry-policy-alone', options: { initialBackoffSeconds: 2 } },
			{ workflowId: 'wf-retry-policy-alone' },
		);
		expect(start).toHaveLength(1);
		const got = await unary<GetInstanceRequest, GetInstanceResponse>(
			client.instances,
			client.instances.getInstance,
			client,
			{ workflowId: 'wf-retry-policy-alone', instanceKey: 'retry-policy-alone' },
		);
		// The test sidecar runs with the settings' defaults: 20 resumes, no cap, x2, no jitter.
		expect(got.instance?.retryPolicy).toEqual({
			maxAutomaticResumes: 20,
			initialBackoffMs: 2000,
			maxBackoffMs: 0,
			backoffMultiplier: 2,
			jitter: 0,
			defaultsForUnset: false,
		});
	});

	test("every retry option survives n8n's own parameter resolution (a misplaced option is dropped by n8n)", () => {
		const rp = new ResumePoint();
		const options = {
			leaseSeconds: 12,
			maxAutomaticResumes: 2,
			initialBackoffSeconds: 1,
			maxBackoffSeconds: 2,
			backoffMultiplier: 3,
			jitter: 0,
		};
		const resolved = NodeHelpers.getNodeParameters(
			rp.description.properties,
			{ instanceKey: 'k', options },
			false,
			false,
			{ typeVersion: 2 },
			rp.description,
		);
		expect(resolved?.options).toEqual(options);
		expect(retryPolicyOf(resolved!.options as IDataObject)).toEqual({
			maxAutomaticResumes: 2,
			initialBackoffMs: 1000,
			maxBackoffMs: 2000,
			backoffMultiplier: 3,
			jitter: 0,
			defaultsForUnset: true,
		});
	});

	test('the policy goes out on every StartOrResume of the node', async () => {
		const spy = jest.spyOn(client, 'startOrResume');
		const [start] = await runNode(
			new ResumePoint(),
			{
				instanceKey: 'retry-policy-1',
				options: { maxAutomaticResumes: 2, initialBackoffSeconds: 1 },
			},
			{ workflowId: 'wf-retry-policy' },
		);
		expect(start).toHaveLength(1);
		expect(spy.mock.calls[0][0].retryPolicy).toMatchObject({
			maxAutomaticResumes: 2,
			initialBackoffMs: 1000,
		});
	});
});

describe('Resume Point: routing after a wait', () => {
	function resumed(over: Partial<StartOrResumeResponse>): StartOrResumeResponse {
		return {
			outcome: StartOutcome.START_OUTCOME_RESUMED,
			instance: instance(),
			latestCheckpoint: undefined,
			currentVersion: 0,
			versionMismatch: false,
			boundVersion: undefined,
			startItemJson: Buffer.from(JSON.stringify({ body: { orderId: 'order-1' } })),
			event: undefined,
			waitOutcome: ResumeReason.RESUME_REASON_UNSPECIFIED,
			startClaim: undefined,
			...over,
		};
	}

	test('the awaited event leaves by Event, with the payload under event and the start item restored', async () => {
		jest
			.spyOn(client, 'startOrResume')
			.mockResolvedValue(
				resumed({ waitOutcome: ResumeReason.RESUME_REASON_EVENT, event: event() }),
			);
		const out = await runNode(
			new ResumePoint(),
			{ instanceKey: 'order-1', stepOutputs: 'paid', waitOutputs: true },
			{
				items: [{ durable: { claimToken: 'claim-1', instanceKey: 'order-1', workflowId: 'wf-x' } }],
			},
		);
		expect(out).toHaveLength(7);
		const [item] = out[5];
		expect(out[4]).toHaveLength(0); // not by its step
		expect(item.json.event).toEqual({
			name: 'delivered',
			payload: { deliveredAt: '2026-12-01T10:00:00Z' },
			dedupeId: 'carrier-evt-1',
			sender: 'carrier',
			receivedAt: '2026-12-01T10:00:01.000Z',
		});
		expect(item.json.body).toEqual({ orderId: 'order-1' });
		expect(item.json.durable).toMatchObject({ waitOutcome: 'event', instanceKey: 'order-1' });
		expect((item.json.durable as IDataObject).claimToken).toBeUndefined();
	});

	test('a timed-out wait leaves by Timed Out, without an event', async () => {
		jest
			.spyOn(client, 'startOrResume')
			.mockResolvedValue(resumed({ waitOutcome: ResumeReason.RESUME_REASON_TIMEOUT }));
		const out = await runNode(new ResumePoint(), { instanceKey: 'order-1', waitOutputs: true });
		expect(out[5]).toHaveLength(1);
		expect(out[5][0].json.event).toBeUndefined();
		expect(out[5][0].json.durable).toMatchObject({ waitOutcome: 'timedOut' });
		expect(out[4]).toHaveLength(0);
	});

	test('without Wait Outputs, an instance back from a wait fails the node with the fix, rather than being routed as if nothing happened', async () => {
		jest
			.spyOn(client, 'startOrResume')
			.mockResolvedValue(
				resumed({ waitOutcome: ResumeReason.RESUME_REASON_EVENT, event: event() }),
			);
		const failure = runNode(new ResumePoint(), { instanceKey: 'order-1', stepOutputs: 'paid' });
		await expect(failure).rejects.toThrow(NodeOperationError);
		await expect(failure).rejects.toMatchObject({
			description: expect.stringContaining('Turn on Wait Outputs'),
		});
	});

	test('an instance that waits leaves by Busy and says so', async () => {
		jest.spyOn(client, 'startOrResume').mockResolvedValue(
			resumed({
				outcome: StartOutcome.START_OUTCOME_BUSY,
				instance: instance({ runState: RunState.RUN_STATE_WAITING, awaitedEvent: 'delivered' }),
			}),
		);
		const out = await runNode(new ResumePoint(), { instanceKey: 'order-1', waitOutputs: true });
		expect(out[OUTPUT_IN_PROGRESS]).toHaveLength(1);
		expect(out[OUTPUT_IN_PROGRESS][0].json.durable).toMatchObject({
			outcome: 'busy',
			runState: 'waiting',
			awaitedEvent: 'delivered',
		});
	});
});
