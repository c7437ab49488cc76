/**
 * Durable Checkpoint's Wait for Event: what it sends and how it routes each
 * answer (single client calls replaced with jest.spyOn on the client).
 */
import { DurableCheckpoint } from '../nodes/DurableCheckpoint/DurableCheckpoint.node';
import { AwaitOutcome, RunState } from '../shared/transport';
import { executeContext } from './support/n8n';
import { client, event, instance, runNode, sidecar, useSidecar } from './support/waits-and-signals';

useSidecar();

describe('Durable Checkpoint: Wait for Event', () => {
	const fromRp = { durable: { instanceKey: 'order-1', workflowId: 'wf-x' } };

	test('refused, with nothing parked, when the Resume Point before it has Wait Outputs off', async () => {
		const spy = jest.spyOn(client, 'awaitEvent');
		const params = {
			operation: 'awaitEvent',
			instanceFrom: 'key',
			instanceKey: 'order-1',
			eventName: 'delivered',
		};
		const ctx = (waitOutputs: boolean | undefined) =>
			executeContext({
				items: [fromRp],
				params,
				credentials: sidecar.credentials(),
				description: new DurableCheckpoint().description,
				typeVersion: 2,
				workflowId: 'wf-x',
				nodeName: 'Wait for Delivery',
				upstream: [
					{ name: 'Save Shipped', type: 'n8n-nodes-durable.durableCheckpoint', typeVersion: 2 },
					{
						name: 'Resume Point',
						type: 'n8n-nodes-durable.resumePoint',
						typeVersion: 2,
						parameters: waitOutputs === undefined ? {} : { waitOutputs },
					},
				],
			});
		await expect(new DurableCheckpoint().execute.call(ctx(undefined))).rejects.toThrow(
			"Turn on Wait Outputs on 'Resume Point' before waiting here",
		);
		await expect(new DurableCheckpoint().execute.call(ctx(false))).rejects.toThrow('Wait Outputs');
		expect(spy).not.toHaveBeenCalled();
		spy.mockResolvedValue({
			outcome: AwaitOutcome.AWAIT_OUTCOME_WAITING,
			instance: instance(),
			event: undefined,
		});
		await new DurableCheckpoint().execute.call(ctx(true));
		expect(spy).toHaveBeenCalledTimes(1);
	});

	test('parked: the item goes no further; the timeout is sent in seconds', async () => {
		const spy = jest.spyOn(client, 'awaitEvent').mockResolvedValue({
			outcome: AwaitOutcome.AWAIT_OUTCOME_WAITING,
			instance: instance({ runState: RunState.RUN_STATE_WAITING, awaitedEvent: 'delivered' }),
			event: undefined,
		});
		const [out] = await runNode(
			new DurableCheckpoint(),
			{
				operation: 'awaitEvent',
				instanceFrom: 'key',
				instanceKey: 'order-1',
				eventName: 'delivered',
				resumeWhen: 'after',
				amount: 2,
				unit: 'days',
			},
			{ items: [fromRp] },
		);
		expect(out).toEqual([]);
		expect(spy).toHaveBeenCalledWith(
			expect.objectContaining({
				workflowId: 'wf-x',
				instanceKey: 'order-1',
				executionId: 'exec-1',
				eventName: 'delivered',
				timeout: { $case: 'timeoutSeconds', value: 2 * 86400 },
			}),
		);
	});

	test('no timeout by default; At a Time sends a deadline', async () => {
		const spy = jest.spyOn(client, 'awaitEvent').mockResolvedValue({
			outcome: AwaitOutcome.AWAIT_OUTCOME_WAITING,
			instance: instance(),
			event: undefined,
		});
		const params = {
			operation: 'awaitEvent',
			instanceFrom: 'key',
			instanceKey: 'order-1',
			eventName: 'ok',
		};
		await runNode(new DurableCheckpoint(), params);
		expect(spy.mock.calls[0][0].timeout).toBeUndefined();
		await runNode(new DurableCheckpoint(), {
			...params,
			resumeWhen: 'at',
			wakeAt: '2027-01-01T00:00:00Z',
		});
		expect(spy.mock.calls[1][0].timeout).toEqual({
			$case: 'deadline',
			value: new Date('2027-01-01T00:00:00Z'),
		});
	});

	test('an event already in the mailbox: the item leaves by Received with it, in the same execution', async () => {
		jest.spyOn(client, 'awaitEvent').mockResolvedValue({
			outcome: AwaitOutcome.AWAIT_OUTCOME_RECEIVED,
			instance: instance(),
			event: event(),
		});
		const [out] = await runNode(
			new DurableCheckpoint(),
			{
				operation: 'awaitEvent',
				instanceFrom: 'key',
				instanceKey: 'order-1',
				eventName: 'delivered',
			},
			{ items: [{ ...fromRp, body: { orderId: 'order-1' } }] },
		);
		expect(out).toHaveLength(1);
		expect(out[0].json.event).toMatchObject({
			name: 'delivered',
			payload: { deliveredAt: '2026-12-01T10:00:00Z' },
		});
		expect(out[0].json.body).toEqual({ orderId: 'order-1' });
		expect(out[0].json.durable).toMatchObject({ waitOutcome: 'received', instanceKey: 'order-1' });
		expect(out[0].pairedItem).toEqual({ item: 0 });
	});

	test('an empty event name or a timeout under a second is refused before any call', async () => {
		const spy = jest.spyOn(client, 'awaitEvent');
		const base = { operation: 'awaitEvent', instanceFrom: 'key', instanceKey: 'order-1' };
		await expect(runNode(new DurableCheckpoint(), { ...base, eventName: ' ' })).rejects.toThrow(
			'Event Name is empty',
		);
		await expect(
			runNode(new DurableCheckpoint(), {
				...base,
				eventName: 'x',
				resumeWhen: 'after',
				amount: 0,
				unit: 'seconds',
			}),
		).rejects.toThrow('at least 1 second');
		expect(spy).not.toHaveBeenCalled();
	});

	test('Fail Instance with Retry Per Policy asks the sidecar to retry', async () => {
		const spy = jest.spyOn(client, 'failInstance').mockResolvedValue({ instance: instance() });
		await runNode(new DurableCheckpoint(), {
			operation: 'fail',
			instanceFrom: 'key',
			instanceKey: 'order-1',
			errorMessage: 'carrier API 503',
			options: { retry: true },
		});
		await runNode(new DurableCheckpoint(), {
			operation: 'fail',
			instanceFrom: 'key',
			instanceKey: 'order-1',
			errorMessage: 'declined',
		});
		expect(spy.mock.calls.map((c) => c[0].retry)).toEqual([true, false]);
	});
});
