/**
 * What the version 2 tests (version2-*.test.ts) share: a real sidecar per test
 * file, Resume Point, Durable Checkpoint and Idempotency Guard version 2 run
 * with their default parameters (the mock answers each parameter's default
 * from the node's description, as n8n does), and the upstream nodes their
 * items come by.
 */
import type { IDataObject, INodeExecutionData } from 'n8n-workflow';

import { DurableCheckpoint } from '../../nodes/DurableCheckpoint/DurableCheckpoint.node';
import { IdempotencyGuard } from '../../nodes/IdempotencyGuard/IdempotencyGuard.node';
import { ResumePoint } from '../../nodes/ResumePoint/ResumePoint.node';
import { closeAllSidecarClients } from '../../shared/transport';
import { executeContext, type ParamValue, type UpstreamNode } from './n8n';
import { TestSidecar } from './sidecar';

/** The test file's sidecar, set once useSidecar's beforeAll has run. */
export let sidecar: TestSidecar;
export const resumePoint = new ResumePoint();
export const checkpoint = new DurableCheckpoint();
export const guard = new IdempotencyGuard();

export const RP: UpstreamNode = {
	name: 'Resume Point',
	type: 'n8n-nodes-durable.resumePoint',
	typeVersion: 2,
};
export const GUARD: UpstreamNode = {
	name: 'Claim payment',
	type: 'n8n-nodes-durable.idempotencyGuard',
	typeVersion: 2,
};
export const HTTP: UpstreamNode = { name: 'Charge card', type: 'n8n-nodes-base.httpRequest' };
export const QUOTE: UpstreamNode = { name: 'Fetch quote', type: 'n8n-nodes-base.httpRequest' };

/** Starts the test file's sidecar (with `env` set) before its tests and stops it after them. */
export function useSidecar(env: Record<string, string> = {}): void {
	beforeAll(async () => {
		sidecar = await TestSidecar.start({ env });
	});

	afterAll(async () => {
		closeAllSidecarClients();
		await sidecar?.stop();
	});
}

export interface Run {
	workflowId: string;
	executionId: string;
	/** Set for a sub-workflow's execution: the execution that called it. */
	parentExecutionId?: string;
}

export async function runResumePoint(
	run: Run,
	items: IDataObject[],
	params: Record<string, ParamValue> = {},
	downstream: UpstreamNode[] = [],
): Promise<INodeExecutionData[][]> {
	return await resumePoint.execute.call(
		executeContext({
			downstream,
			items,
			params: {
				instanceKey: (_i: number, item: INodeExecutionData) =>
					(item.json.body as IDataObject).orderId,
				...params,
			},
			credentials: sidecar.credentials(),
			...run,
			nodeName: RP.name,
			typeVersion: 2,
			description: resumePoint.description,
		}),
	);
}

export async function runGuard(
	run: Run,
	items: INodeExecutionData[],
	upstream: UpstreamNode[],
	params: Record<string, ParamValue> = { scope: 'payment' },
	typeVersion = 2,
	continueOnFail = false,
): Promise<INodeExecutionData[][]> {
	return await guard.execute.call(
		executeContext({
			items,
			params,
			credentials: sidecar.credentials(),
			...run,
			nodeName: GUARD.name,
			typeVersion,
			description: guard.description,
			upstream,
			continueOnFail,
		}),
	);
}

export async function runSave(
	run: Run,
	items: INodeExecutionData[],
	upstream: UpstreamNode[],
	params: Record<string, ParamValue> = { stepName: 'charge' },
	downstream: UpstreamNode[] = [],
	continueOnFail = false,
): Promise<INodeExecutionData[]> {
	const [out] = await checkpoint.execute.call(
		executeContext({
			items,
			params,
			credentials: sidecar.credentials(),
			...run,
			nodeName: 'Save charge',
			typeVersion: 2,
			description: checkpoint.description,
			upstream,
			downstream,
			continueOnFail,
		}),
	);
	return out;
}

/** What an HTTP Request node makes of each item: a new item (the response), paired to its input. */
export function httpResponse(
	items: INodeExecutionData[],
	response: IDataObject,
): INodeExecutionData[] {
	return items.map((_, i) => ({ json: { ...response }, pairedItem: { item: i } }));
}

export function durable(item: INodeExecutionData): IDataObject {
	return item.json.durable as IDataObject;
}

export const CHARGE = { chargeId: 'ch-1', status: 'paid' };
