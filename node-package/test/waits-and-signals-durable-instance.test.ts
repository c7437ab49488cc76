/**
 * The Durable Instance node: Signal, Retry, Resume and Cancel, what each
 * sends and how it answers (single client calls replaced with jest.spyOn on
 * the client).
 */
import { NodeApiError, NodeOperationError, type INodeExecutionData } from 'n8n-workflow';

import { DurableInstance, defaultDedupeId } from '../nodes/DurableInstance/DurableInstance.node';
import { InstanceStatus, RunState, SignalOutcome } from '../shared/transport';
import {
	client,
	event,
	grpcError,
	instance,
	runNode,
	useSidecar,
} from './support/waits-and-signals';

useSidecar();

describe('Durable Instance', () => {
	test('Signal: this workflow by default, the payload as JSON, a dedupe id from the execution, node and item', async () => {
		const spy = jest.spyOn(client, 'signalInstance').mockResolvedValue({
			outcome: SignalOutcome.SIGNAL_OUTCOME_DELIVERED,
			event: event({ dedupeId: 'n8n:exec-7:Signal Delivered:0' }),
			instance: instance({ runState: RunState.RUN_STATE_SCHEDULED }),
		});
		const [out] = await runNode(
			new DurableInstance(),
			{ instanceKey: 'order-1', eventName: 'delivered', payloadJson: '{"deliveredAt":"noon"}' },
			{ executionId: 'exec-7', nodeName: 'Signal Delivered', items: [{ keep: 'me' }] },
		);
		expect(spy).toHaveBeenCalledWith(
			expect.objectContaining({
				workflowId: 'wf-x',
				instanceKey: 'order-1',
				eventName: 'delivered',
				dedupeId: 'n8n:exec-7:Signal Delivered:0',
				sender: 'n8n workflow wf-x execution exec-7',
			}),
		);
		expect(JSON.parse(Buffer.from(spy.mock.calls[0][0].payloadJson!).toString())).toEqual({
			deliveredAt: 'noon',
		});
		expect(out[0].json).toMatchObject({
			keep: 'me',
			signal: {
				outcome: 'delivered',
				workflowId: 'wf-x',
				instanceKey: 'order-1',
				eventName: 'delivered',
				instanceStatus: 'running',
				runState: 'scheduled',
			},
		});
		expect(out[0].json.durable).toBeUndefined(); // not mistaken for this item's own instance downstream
	});

	test("Signal: another workflow, the whole item as payload, the sender's dedupe id; a duplicate is reported", async () => {
		const spy = jest.spyOn(client, 'signalInstance').mockResolvedValue({
			outcome: SignalOutcome.SIGNAL_OUTCOME_DUPLICATE,
			event: event(),
			instance: instance(),
		});
		const [out] = await runNode(
			new DurableInstance(),
			{
				workflowId: 'wf-orders',
				instanceKey: 'order-9',
				eventName: 'delivered',
				payloadFrom: 'item',
				dedupeId: 'carrier-evt-1',
				options: { sender: 'carrier' },
			},
			{ items: [{ body: { orderId: 'order-9' } }] },
		);
		const request = spy.mock.calls[0][0];
		expect(request).toMatchObject({
			workflowId: 'wf-orders',
			dedupeId: 'carrier-evt-1',
			sender: 'carrier',
		});
		expect(JSON.parse(Buffer.from(request.payloadJson!).toString())).toEqual({
			body: { orderId: 'order-9' },
		});
		expect(out[0].json.signal).toMatchObject({ outcome: 'duplicate' });
	});

	test('Signal to an unknown instance: an error that says a signal never starts one; Continue On Fail keeps the other items', async () => {
		jest.spyOn(client, 'signalInstance').mockImplementation(async (request) => {
			if (request.instanceKey === 'nobody') {
				throw grpcError(
					5,
					'instance wf-x/nobody does not exist; a signal never starts an instance',
				);
			}
			return { outcome: SignalOutcome.SIGNAL_OUTCOME_STORED, event: event(), instance: instance() };
		});
		const params = {
			instanceKey: (_i: number, item: INodeExecutionData) => item.json.orderId,
			eventName: 'delivered',
		};
		const items = [{ orderId: 'nobody' }, { orderId: 'order-1' }];
		const failure = runNode(new DurableInstance(), params, { items });
		await expect(failure).rejects.toThrow(NodeOperationError);
		await expect(failure).rejects.toMatchObject({
			message: expect.stringContaining('does not exist'),
			description: expect.stringContaining('starts one only with Start If Absent'),
		});
		const [out] = await runNode(new DurableInstance(), params, { items, continueOnFail: true });
		expect(out[0].json.error).toMatch(/does not exist/);
		expect(out[1].json.signal).toMatchObject({ outcome: 'stored' });
	});

	test('Signal to a finished instance: FAILED_PRECONDITION with its own hint', async () => {
		jest
			.spyOn(client, 'signalInstance')
			.mockRejectedValue(
				grpcError(9, 'instance wf-x/order-1 is completed; it takes no more events'),
			);
		await expect(
			runNode(new DurableInstance(), { instanceKey: 'order-1', eventName: 'delivered' }),
		).rejects.toMatchObject({ description: expect.stringContaining('takes no more events') });
	});

	test("a sidecar outage is a NodeApiError (retry-safe), not the author's fault", async () => {
		jest.spyOn(client, 'signalInstance').mockRejectedValue(grpcError(13, 'boom'));
		await expect(
			runNode(new DurableInstance(), { instanceKey: 'order-1', eventName: 'delivered' }),
		).rejects.toThrow(NodeApiError);
	});

	test('empty Event Name or Instance Key is refused before anything is sent', async () => {
		const spy = jest.spyOn(client, 'signalInstance');
		await expect(
			runNode(new DurableInstance(), { instanceKey: 'k', eventName: '' }),
		).rejects.toThrow('Event Name is empty');
		await expect(
			runNode(new DurableInstance(), { instanceKey: ' ', eventName: 'x' }),
		).rejects.toThrow('Instance Key is empty');
		expect(spy).not.toHaveBeenCalled();
	});

	test.each([
		['retry', 'retryInstance'],
		['resume', 'resumeInstance'],
		['cancel', 'cancelInstance'],
	] as const)('%s calls %s with actor and reason', async (operation, method) => {
		const spy = jest.spyOn(client, method).mockResolvedValue({
			instance: instance({ status: InstanceStatus.INSTANCE_STATUS_RUNNING }),
		});
		const [out] = await runNode(new DurableInstance(), {
			operation,
			workflowId: 'wf-orders',
			instanceKey: 'order-1',
			reason: 'carrier API fixed',
			options: { actor: 'ana' },
		});
		expect(spy).toHaveBeenCalledWith({
			workflowId: 'wf-orders',
			instanceKey: 'order-1',
			actor: 'ana',
			reason: 'carrier API fixed',
		});
		expect(out[0].json.instance).toMatchObject({ action: operation, status: 'running' });
	});

	test('an operator action needs a reason', async () => {
		await expect(
			runNode(new DurableInstance(), { operation: 'cancel', instanceKey: 'order-1', reason: '' }),
		).rejects.toThrow('Reason is empty');
	});

	test('the default dedupe id stays within 255 characters', () => {
		expect(defaultDedupeId('12', 'Signal', 3)).toBe('n8n:12:Signal:3');
		const long = defaultDedupeId('12', 'x'.repeat(300), 0);
		expect(long.length).toBeLessThanOrEqual(255);
		expect(long).not.toBe(defaultDedupeId('12', 'x'.repeat(300), 1));
	});
});
