/**
 * Wait for Event, signals and operator actions in one flow against the real
 * `durable-sidecar serve`.
 */
import { NodeOperationError } from 'n8n-workflow';

import { DurableCheckpoint } from '../nodes/DurableCheckpoint/DurableCheckpoint.node';
import { DurableInstance } from '../nodes/DurableInstance/DurableInstance.node';
import { OUTPUT_START, ResumePoint } from '../nodes/ResumePoint/ResumePoint.node';
import { InstanceStatus, ResumeReason, type Instance } from '../shared/transport';
import { client, runNode, sidecar, useSidecar } from './support/waits-and-signals';

useSidecar();

describe('with the real sidecar', () => {
	const wf = 'wf-waits-real';

	async function startAndSave(key: string): Promise<void> {
		const out = await runNode(
			new ResumePoint(),
			{ instanceKey: key, waitOutputs: true },
			{
				workflowId: wf,
				items: [{ body: { orderId: key } }],
			},
		);
		expect(out[OUTPUT_START]).toHaveLength(1);
		await runNode(
			new DurableCheckpoint(),
			{
				operation: 'save',
				instanceFrom: 'key',
				instanceKey: key,
				stepName: 'paid',
				saveWhat: 'item',
			},
			{ workflowId: wf, items: out[OUTPUT_START] },
		);
	}

	const wait = (key: string) =>
		runNode(
			new DurableCheckpoint(),
			{ operation: 'awaitEvent', instanceFrom: 'key', instanceKey: key, eventName: 'delivered' },
			{ workflowId: wf },
		);

	/** The Resume Trigger's claim of this file's workflow. */
	const claimResumable = () =>
		new Promise<Array<{ claimToken: string; reason: ResumeReason; instance?: Instance }>>(
			(resolve, reject) =>
				client.instances.claimResumable(
					{ workflowIds: [wf], claimant: 'jest', maxInstances: 10, leaseSeconds: 30 },
					client.metadata(),
					client.options(),
					(error, response) => (error ? reject(error) : resolve(response.instances)),
				),
		);

	const signal = (key: string, dedupeId: string, payload = '{"by":"carrier"}') =>
		runNode(
			new DurableInstance(),
			{ instanceKey: key, eventName: 'delivered', payloadJson: payload, dedupeId },
			{ workflowId: wf, executionId: 'carrier-exec' },
		);

	test('wait, then signal: parked with no lease, delivered once, handed out with the event, routed to Event', async () => {
		await startAndSave('real-1');
		const [parked] = await wait('real-1');
		expect(parked).toEqual([]);
		const [row] = await sidecar.sql<{ lease_owner: string | null }>(
			'SELECT lease_owner FROM durable_instances WHERE workflow_id = $1 AND instance_key = $2',
			[wf, 'real-1'],
		);
		expect(row.lease_owner ?? '').toBe('');
		const [first] = await signal('real-1', 'evt-1');
		expect(first[0].json.signal).toMatchObject({ outcome: 'delivered' });
		const [again] = await signal('real-1', 'evt-1', '{"by":"someone else"}');
		expect(again[0].json.signal).toMatchObject({ outcome: 'duplicate' });
		// The Resume Trigger's claim, then the Resume Point with it.
		const claimed = await claimResumable();
		expect(claimed).toHaveLength(1);
		expect(claimed[0].reason).toBe(ResumeReason.RESUME_REASON_EVENT);
		const out = await runNode(
			new ResumePoint(),
			{ instanceKey: 'ignored', waitOutputs: true },
			{
				workflowId: wf,
				executionId: 'exec-resumed',
				items: [
					{ durable: { claimToken: claimed[0].claimToken, instanceKey: 'real-1', workflowId: wf } },
				],
			},
		);
		const eventOut = out[4];
		expect(eventOut).toHaveLength(1);
		expect(eventOut[0].json.event).toMatchObject({ name: 'delivered', payload: { by: 'carrier' } });
		expect(eventOut[0].json.body).toEqual({ orderId: 'real-1' });
	});

	test('signal before the wait: kept in the mailbox, and the wait consumes it at once (Received)', async () => {
		await startAndSave('real-2');
		const [stored] = await signal('real-2', 'evt-early');
		expect(stored[0].json.signal).toMatchObject({ outcome: 'stored' });
		const [received] = await wait('real-2');
		expect(received).toHaveLength(1);
		expect(received[0].json.event).toMatchObject({ name: 'delivered', dedupeId: 'evt-early' });
	});

	test('Start If Absent: the signal starts the unknown instance held for its delivery; the order starts it with its own item and the wait takes the event', async () => {
		const params = {
			instanceKey: 'real-sws',
			eventName: 'delivered',
			payloadJson: '{"by":"carrier"}',
			dedupeId: 'evt-sws',
			startIfAbsent: true,
		};
		const context = {
			workflowId: wf,
			executionId: 'carrier-exec',
			items: [{ body: { orderId: 'real-sws' } }],
		};
		const [first] = await runNode(new DurableInstance(), params, context);
		expect(first[0].json.signal).toMatchObject({ outcome: 'started' });
		const [again] = await runNode(new DurableInstance(), params, context);
		expect(again[0].json.signal).toMatchObject({ outcome: 'duplicate' });
		// Held for its delivery: the Resume Trigger does not take it (its start item is the carrier's).
		const claimed = await claimResumable();
		expect(claimed.filter((c) => c.instance?.instanceKey === 'real-sws')).toHaveLength(0);
		// The order's webhook arrives: its Resume Point starts the instance with the order's own item.
		const order = { headers: { 'x-request-id': 'r-1' }, body: { orderId: 'real-sws', amount: 20 } };
		const out = await runNode(
			new ResumePoint(),
			{ instanceKey: 'real-sws', waitOutputs: true },
			{ workflowId: wf, executionId: 'exec-sws', items: [order] },
		);
		expect(out[OUTPUT_START]).toHaveLength(1);
		expect(out[OUTPUT_START][0].json.body).toEqual({ orderId: 'real-sws', amount: 20 });
		await runNode(
			new DurableCheckpoint(),
			{
				operation: 'save',
				instanceFrom: 'key',
				instanceKey: 'real-sws',
				stepName: 'paid',
				saveWhat: 'item',
			},
			{ workflowId: wf, executionId: 'exec-sws', items: out[OUTPUT_START] },
		);
		const [received] = await runNode(
			new DurableCheckpoint(),
			{
				operation: 'awaitEvent',
				instanceFrom: 'key',
				instanceKey: 'real-sws',
				eventName: 'delivered',
			},
			{ workflowId: wf, executionId: 'exec-sws' },
		);
		expect(received).toHaveLength(1);
		expect(received[0].json.event).toMatchObject({ name: 'delivered', dedupeId: 'evt-sws' });
	});

	test('Start If Absent with a custom start item that is not an object is refused before anything is sent', async () => {
		await expect(
			runNode(
				new DurableInstance(),
				{
					instanceKey: 'real-sws-bad',
					eventName: 'delivered',
					dedupeId: 'evt-bad',
					startIfAbsent: true,
					startItemFrom: 'json',
					startItemJson: '[1, 2]',
				},
				{ workflowId: wf },
			),
		).rejects.toThrow('Start Item (JSON) must be a JSON object');
		const rows = await sidecar.sql<{ n: string }>(
			'SELECT count(*) AS n FROM durable_instances WHERE instance_key = $1',
			['real-sws-bad'],
		);
		expect(Number(rows[0].n)).toBe(0);
	});

	test('signal to an unknown or finished instance is a clear error', async () => {
		await expect(signal('real-nobody', 'evt-x')).rejects.toMatchObject({
			description: expect.stringContaining('only with Start If Absent'),
		});
		await startAndSave('real-3');
		await runNode(
			new DurableCheckpoint(),
			{ operation: 'complete', instanceFrom: 'key', instanceKey: 'real-3' },
			{ workflowId: wf },
		);
		await expect(signal('real-3', 'evt-late')).rejects.toMatchObject({
			description: expect.stringContaining('takes no more events'),
		});
	});

	test("on the error output a signal that can never be delivered carries the sender's answer: 409 finished, 400 no key, 503 unknown (it may start later)", async () => {
		await startAndSave('real-door');
		await runNode(
			new DurableCheckpoint(),
			{ operation: 'complete', instanceFrom: 'key', instanceKey: 'real-door' },
			{ workflowId: wf },
		);
		await startAndSave('real-door-open');
		const params = {
			instanceKey: (_i: number, item: { json: Record<string, unknown> }) => item.json.orderId,
			eventName: 'delivered',
			payloadJson: '{"by":"carrier"}',
		};
		const [out] = await runNode(new DurableInstance(), params, {
			workflowId: wf,
			executionId: 'carrier-door',
			continueOnFail: true,
			items: [
				{ orderId: 'real-door' },
				{ orderId: 'real-door-nobody' },
				{ orderId: { id: 7 } },
				{ orderId: 'real-door-open' },
			],
		});
		expect(out.map((item) => (item.json.details as { httpStatus?: number })?.httpStatus)).toEqual([
			409,
			503,
			400,
			undefined,
		]);
		expect(out[0].json.error).toMatch(/takes no more events/);
		expect(out[0].error).toBeUndefined(); // n8n would replace the JSON of an item with an error object
		expect(out[3].json.signal).toMatchObject({ outcome: 'stored' });
		const mailbox = await new Promise<number>((resolve, reject) =>
			client.events.listEvents(
				{
					workflowId: wf,
					instanceKey: 'real-door',
					pendingOnly: false,
					pageSize: 10,
					pageToken: '',
				},
				client.metadata(),
				client.options(),
				(error, response) => (error ? reject(error) : resolve(response.events.length)),
			),
		);
		expect(mailbox).toBe(0); // the late event changed nothing
	});

	test('operator actions: cancel a waiting instance with a reason', async () => {
		await startAndSave('real-4');
		await wait('real-4');
		const [out] = await runNode(
			new DurableInstance(),
			{ operation: 'cancel', instanceKey: 'real-4', reason: 'customer withdrew' },
			{ workflowId: wf },
		);
		expect(out[0].json.instance).toMatchObject({ action: 'cancel', status: 'cancelled' });
		await expect(
			runNode(
				new DurableInstance(),
				{ operation: 'retry', instanceKey: 'real-4', reason: 'try' },
				{ workflowId: wf },
			),
		).rejects.toThrow(NodeOperationError);
	});

	test('a failure retried under the policy suspends the instance after its automatic resumes; the node retries it', async () => {
		const key = 'real-poison';
		const claim = claimResumable;
		const failRetry = (executionId: string) =>
			runNode(
				new DurableCheckpoint(),
				{
					operation: 'fail',
					instanceFrom: 'key',
					instanceKey: key,
					errorMessage: 'shipping API 500',
					options: { retry: true },
				},
				{ workflowId: wf, executionId },
			);
		const out = await runNode(
			new ResumePoint(),
			{ instanceKey: key, options: { maxAutomaticResumes: 1, initialBackoffSeconds: 0 } },
			{ workflowId: wf, items: [{ body: { orderId: key } }] },
		);
		expect(out[OUTPUT_START]).toHaveLength(1);
		await failRetry('exec-1');
		const [retry] = await claim();
		expect(retry.reason).toBe(ResumeReason.RESUME_REASON_RETRY);
		const again = await runNode(
			new ResumePoint(),
			{ instanceKey: key, options: { maxAutomaticResumes: 1, initialBackoffSeconds: 0 } },
			{
				workflowId: wf,
				executionId: 'exec-2',
				items: [{ durable: { claimToken: retry.claimToken, instanceKey: key, workflowId: wf } }],
			},
		);
		expect(again[1]).toHaveLength(1); // Resume: nothing saved yet
		await failRetry('exec-2');
		const get = async (): Promise<Instance> =>
			await new Promise((resolve, reject) =>
				client.instances.getInstance(
					{ workflowId: wf, instanceKey: key },
					client.metadata(),
					client.options(),
					(error, response) => (error ? reject(error) : resolve(response.instance!)),
				),
			);
		const parked = await get();
		expect(parked.status).toBe(InstanceStatus.INSTANCE_STATUS_SUSPENDED);
		expect(parked.lastError).toContain('shipping API 500');
		expect(await claim()).toEqual([]); // the Resume Trigger leaves it alone
		const [retried] = await runNode(
			new DurableInstance(),
			{
				operation: 'retry',
				instanceKey: key,
				reason: 'shipping API fixed',
				options: { actor: 'ana' },
			},
			{ workflowId: wf },
		);
		expect(retried[0].json.instance).toMatchObject({
			action: 'retry',
			status: 'running',
			attempt: 0,
		});
		const [redrive] = await claim();
		expect(redrive.reason).toBe(ResumeReason.RESUME_REASON_REDRIVE);
		// Claimed (a live lease): nothing to resume, and the node says which states it takes.
		await expect(
			runNode(
				new DurableInstance(),
				{ operation: 'resume', instanceKey: key, reason: 'again' },
				{ workflowId: wf },
			),
		).rejects.toMatchObject({
			description: expect.stringContaining('Resume takes suspended ones'),
		});
	});
});
