/**
 * Issue 15 in the nodes: Durable Checkpoint's Wait for Event, the Durable
 * Instance node (Signal, Retry, Resume, Cancel), the Resume Point's Wait
 * Outputs and retry policy, and the Resume Trigger's new hand-out reasons.
 *
 * "with the real sidecar" runs the whole flow against `durable-sidecar serve`;
 * the other tests replace single client calls (jest.spyOn on the client) to
 * pin down what a node sends and how it routes each answer.
 */
import {
	NodeApiError,
	NodeOperationError,
	Workflow,
	NodeHelpers,
	type IDataObject,
	type INode,
	type INodeExecutionData,
	type INodeParameters,
	type INodeType,
	type INodeTypes,
} from 'n8n-workflow';

import { DurableCheckpoint } from '../nodes/DurableCheckpoint/DurableCheckpoint.node';
import { DurableInstance, defaultDedupeId } from '../nodes/DurableInstance/DurableInstance.node';
import {
	OUTPUT_IN_PROGRESS,
	OUTPUT_START,
	ResumePoint,
	retryPolicyOf,
} from '../nodes/ResumePoint/ResumePoint.node';
import { resumableItem } from '../nodes/ResumeTrigger/ResumeTrigger.node';
import {
	AwaitOutcome,
	closeAllSidecarClients,
	getSidecarClient,
	InstanceStatus,
	ResumeReason,
	RunState,
	SignalOutcome,
	StartOutcome,
	type Event,
	type Instance,
	type SidecarClient,
	type StartOrResumeResponse,
} from '../shared/transport';
import { executeContext, type ParamValue } from './support/n8n';
import { TestSidecar } from './support/sidecar';

let sidecar: TestSidecar;
let client: SidecarClient;

beforeAll(async () => {
	sidecar = await TestSidecar.start();
	client = getSidecarClient(sidecar.connection());
});

afterAll(async () => {
	closeAllSidecarClients();
	await sidecar?.stop();
});

afterEach(() => {
	jest.restoreAllMocks();
});

function grpcError(code: number, details: string): Error {
	return Object.assign(new Error(details), { code, details });
}

function instance(over: Partial<Instance> = {}): Instance {
	return {
		workflowId: 'wf-x',
		instanceKey: 'order-1',
		status: InstanceStatus.INSTANCE_STATUS_RUNNING,
		boundVersion: 0,
		versionLabel: '',
		leaseOwner: '',
		leaseExpiresAt: undefined,
		wakeAt: undefined,
		lastSequence: 1,
		lastStep: 'paid',
		checkpointCount: 1,
		resumeCount: 0,
		errorMessage: '',
		resultJson: Buffer.alloc(0),
		createdByExecutionId: 'e0',
		createdAt: undefined,
		updatedAt: undefined,
		finishedAt: undefined,
		leaseSeconds: 300,
		runState: RunState.RUN_STATE_ACTIVE,
		awaitedEvent: '',
		waitDeadline: undefined,
		retryPolicy: undefined,
		attempt: 0,
		lastError: '',
		suspendedAt: undefined,
		...over,
	};
}

function event(over: Partial<Event> = {}): Event {
	return {
		workflowId: 'wf-x',
		instanceKey: 'order-1',
		eventName: 'delivered',
		dedupeId: 'carrier-evt-1',
		payloadJson: Buffer.from(JSON.stringify({ deliveredAt: '2026-12-01T10:00:00Z' })),
		sender: 'carrier',
		receivedAt: new Date('2026-12-01T10:00:01Z'),
		consumedAt: undefined,
		...over,
	};
}

async function runNode(
	type: INodeType,
	params: Record<string, ParamValue>,
	opts: {
		items?: Array<IDataObject | INodeExecutionData>;
		typeVersion?: number;
		workflowId?: string;
		executionId?: string;
		continueOnFail?: boolean;
		nodeName?: string;
	} = {},
): Promise<INodeExecutionData[][]> {
	return (await type.execute!.call(
		executeContext({
			items: opts.items ?? [{ orderId: 'order-1' }],
			params,
			credentials: sidecar.credentials(),
			description: type.description,
			typeVersion: opts.typeVersion ?? (type.description.defaultVersion as number) ?? 1,
			workflowId: opts.workflowId ?? 'wf-x',
			executionId: opts.executionId ?? 'exec-1',
			continueOnFail: opts.continueOnFail,
			nodeName: opts.nodeName ?? type.description.defaults.name,
		}),
	)) as INodeExecutionData[][];
}

/** Evaluates a description expression (subtitle, outputs) as n8n's editor does. */
function evaluate(type: INodeType, version: number, given: INodeParameters, expression: string) {
	const nodeTypes = {
		getByName: () => type,
		getByNameAndVersion: () => type,
		getKnownTypes: () => ({}),
	} as unknown as INodeTypes;
	const node: INode = {
		id: '1',
		name: type.description.displayName,
		type: `n8n-nodes-durable.${type.description.name}`,
		typeVersion: version,
		position: [0, 0],
		parameters:
			NodeHelpers.getNodeParameters(
				type.description.properties,
				given,
				true,
				false,
				{ typeVersion: version },
				type.description,
			) ?? {},
	};
	const workflow = new Workflow({ nodes: [node], connections: {}, active: false, nodeTypes });
	return workflow.expression.getSimpleParameterValue(node, expression, 'internal', {});
}

const labels = (type: INodeType, version: number, p: INodeParameters) =>
	(
		evaluate(type, version, p, type.description.outputs as string) as Array<
			string | { displayName: string }
		>
	).map((o) => (typeof o === 'string' ? o : o.displayName));

describe('descriptions', () => {
	test('Resume Point: Wait Outputs adds Event and Timed Out after every other output, in both versions', () => {
		const rp = new ResumePoint();
		expect(
			labels(rp, 2, { stepOutputs: 'paid', versionMismatchOutput: true, waitOutputs: true }),
		).toEqual(['Start', 'Resume', 'Finished', 'Busy', 'paid', 'Old Version', 'Event', 'Timed Out']);
		expect(labels(rp, 2, { waitOutputs: true })).toEqual([
			'Start',
			'Resume',
			'Finished',
			'Busy',
			'Event',
			'Timed Out',
		]);
		expect(labels(rp, 1, { waitOutputs: true }).slice(-2)).toEqual(['Event', 'Timed Out']);
		// Off by default: existing workflows keep their outputs.
		expect(labels(rp, 2, {})).toEqual(['Start', 'Resume', 'Finished', 'Busy']);
	});

	test('Durable Checkpoint: Wait for Event labels its output Received; the other operations keep one plain output', () => {
		const cp = new DurableCheckpoint();
		expect(labels(cp, 2, { operation: 'awaitEvent', eventName: 'delivered' })).toEqual([
			'Received',
		]);
		expect(labels(cp, 1, { operation: 'awaitEvent' })).toEqual(['Received']);
		for (const operation of ['save', 'complete', 'fail', 'scheduleResume']) {
			expect(labels(cp, 2, { operation })).toEqual(['main']);
		}
		expect(labels(cp, 2, {})).toEqual(['main']);
	});

	test.each([
		[new DurableCheckpoint(), 2, { operation: 'awaitEvent' }, 'wait for: (no event name)'],
		[
			new DurableCheckpoint(),
			2,
			{ operation: 'awaitEvent', eventName: 'delivered' },
			'wait for: delivered',
		],
		[new DurableInstance(), 1, {}, 'signal: (no event name)'],
		[new DurableInstance(), 1, { eventName: 'delivered' }, 'signal: delivered'],
		[new DurableInstance(), 1, { operation: 'retry' }, 'retry instance'],
		[new DurableInstance(), 1, { operation: 'resume' }, 'resume instance'],
		[new DurableInstance(), 1, { operation: 'cancel' }, 'cancel instance'],
	] as Array<[INodeType, number, INodeParameters, string]>)(
		'subtitle %#: %p',
		(type, version, given, expected) => {
			expect(evaluate(type, version, given, type.description.subtitle!)).toBe(expected);
		},
	);

	test('the Durable Instance node needs no expression by default and says it holds no lease', () => {
		const di = new DurableInstance();
		const defaults = NodeHelpers.getNodeParameters(
			di.description.properties,
			{},
			true,
			false,
			{ typeVersion: 1 },
			di.description,
		);
		expect(JSON.stringify(defaults)).not.toContain('={{');
		expect(di.description.description).toMatch(/lease/);
	});
});

describe('Resume Point: retry policy', () => {
	test('no retry option: no policy is sent (the instance keeps its own, a new one the sidecar default)', () => {
		expect(retryPolicyOf({})).toBeUndefined();
		expect(retryPolicyOf({ leaseSeconds: 60 })).toBeUndefined();
	});

	test('any retry option sends a whole policy, the options not added at their defaults, seconds as ms', () => {
		expect(retryPolicyOf({ maxAutomaticResumes: 3 })).toEqual({
			maxAutomaticResumes: 3,
			initialBackoffMs: 10_000,
			maxBackoffMs: 600_000,
			backoffMultiplier: 2,
			jitter: 0.2,
		});
		expect(
			retryPolicyOf({
				maxAutomaticResumes: 2,
				initialBackoffSeconds: 1.5,
				maxBackoffSeconds: 4,
				jitter: 0,
			}),
		).toMatchObject({
			maxAutomaticResumes: 2,
			initialBackoffMs: 1500,
			maxBackoffMs: 4000,
			jitter: 0,
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
			description: expect.stringContaining('a signal never starts one'),
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

describe('Resume Trigger: hand-out reasons', () => {
	const settings = {
		workflowId: 'wf-x',
		claimant: 'n8n test',
		pollIntervalMs: 1000,
		claimLeaseSeconds: 30,
		maxInstances: 10,
		silenceMs: 15000,
	};

	test.each([
		[ResumeReason.RESUME_REASON_STALLED, 'stalled'],
		[ResumeReason.RESUME_REASON_WAKE_UP, 'wakeUp'],
		[ResumeReason.RESUME_REASON_EVENT, 'event'],
		[ResumeReason.RESUME_REASON_TIMEOUT, 'timeout'],
		[ResumeReason.RESUME_REASON_RETRY, 'retry'],
		[ResumeReason.RESUME_REASON_REDRIVE, 'redrive'],
	])('reason %s is emitted as %s', (reason, name) => {
		const item = resumableItem(
			{
				instance: instance(),
				reason,
				claimToken: 'c1',
				latestCheckpoint: undefined,
				event: undefined,
			},
			settings,
		);
		expect(item.json.durable).toMatchObject({
			reason: name,
			claimToken: 'c1',
			instanceKey: 'order-1',
		});
	});

	test('an arrived event is on the emitted item', () => {
		const item = resumableItem(
			{
				instance: instance(),
				reason: ResumeReason.RESUME_REASON_EVENT,
				claimToken: 'c1',
				latestCheckpoint: undefined,
				event: event(),
			},
			settings,
		);
		expect((item.json.durable as IDataObject).event).toMatchObject({
			name: 'delivered',
			payload: { deliveredAt: '2026-12-01T10:00:00Z' },
		});
	});
});

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
		const claimed = await new Promise<Array<{ claimToken: string; reason: ResumeReason }>>(
			(resolve, reject) =>
				client.instances.claimResumable(
					{ workflowIds: [wf], claimant: 'jest', maxInstances: 10, leaseSeconds: 30 },
					client.metadata(),
					client.options(),
					(error, response) => (error ? reject(error) : resolve(response.instances)),
				),
		);
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

	test('signal to an unknown or finished instance is a clear error', async () => {
		await expect(signal('real-nobody', 'evt-x')).rejects.toMatchObject({
			description: expect.stringContaining('a signal never starts one'),
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
		const claim = async (): Promise<Array<{ claimToken: string; reason: ResumeReason }>> =>
			await new Promise((resolve, reject) =>
				client.instances.claimResumable(
					{ workflowIds: [wf], claimant: 'jest', maxInstances: 10, leaseSeconds: 30 },
					client.metadata(),
					client.options(),
					(error, response) => (error ? reject(error) : resolve(response.instances)),
				),
			);
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
