/**
 * What the wait and signal tests (waits-and-signals-*.test.ts) share: a real
 * sidecar and its client per test file, the sidecar's answers built field by
 * field (an instance, an event, a gRPC error) for tests that replace single
 * client calls (jest.spyOn on the client), and a node run against the sidecar.
 */
import type { IDataObject, INodeExecutionData, INodeType } from 'n8n-workflow';

import {
	closeAllSidecarClients,
	getSidecarClient,
	InstanceStatus,
	RunState,
	type Event,
	type Instance,
	type SidecarClient,
} from '../../shared/transport';
import { executeContext, type ParamValue } from './n8n';
import { TestSidecar } from './sidecar';

/** The test file's sidecar and its client, set once useSidecar's beforeAll has run. */
export let sidecar: TestSidecar;
export let client: SidecarClient;

/** Starts the test file's sidecar before its tests and stops it after them; restores every spy after each test. */
export function useSidecar(): void {
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
}

export function grpcError(code: number, details: string): Error {
	return Object.assign(new Error(details), { code, details });
}

export function instance(over: Partial<Instance> = {}): Instance {
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
		searchFieldsJson: Buffer.alloc(0),
		...over,
	};
}

export function event(over: Partial<Event> = {}): Event {
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

export async function runNode(
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
