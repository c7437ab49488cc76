/**
 * Version 2 of Resume Point, Durable Checkpoint and Idempotency Guard with
 * their default parameters (the mock answers each parameter's default from the
 * node's description, as n8n does): the instance found through paired items,
 * the start item restored, step results added to the state, Claim → call →
 * Save completing the key in the save's transaction, the instance's lease.
 */
import {
	NodeOperationError,
	type IDataObject,
	type INodeExecutionData,
	type NodeExecutionHint,
} from 'n8n-workflow';

import { DurableCheckpoint } from '../nodes/DurableCheckpoint/DurableCheckpoint.node';
import {
	IdempotencyGuard,
	OUTPUT_ALREADY_DONE,
	OUTPUT_FIRST_RUN,
} from '../nodes/IdempotencyGuard/IdempotencyGuard.node';
import {
	OUTPUT_COMPLETED,
	OUTPUT_RESUME,
	OUTPUT_START,
	ResumePoint,
} from '../nodes/ResumePoint/ResumePoint.node';
import { ClaimOutcome, closeAllSidecarClients, getSidecarClient } from '../shared/transport';
import { executeContext, type ParamValue, type UpstreamNode } from './support/n8n';
import { TestSidecar } from './support/sidecar';

let sidecar: TestSidecar;
const resumePoint = new ResumePoint();
const checkpoint = new DurableCheckpoint();
const guard = new IdempotencyGuard();

const RP: UpstreamNode = {
	name: 'Resume Point',
	type: 'n8n-nodes-durable.resumePoint',
	typeVersion: 2,
};
const GUARD: UpstreamNode = {
	name: 'Claim payment',
	type: 'n8n-nodes-durable.idempotencyGuard',
	typeVersion: 2,
};
const HTTP: UpstreamNode = { name: 'Charge card', type: 'n8n-nodes-base.httpRequest' };
const QUOTE: UpstreamNode = { name: 'Fetch quote', type: 'n8n-nodes-base.httpRequest' };

beforeAll(async () => {
	sidecar = await TestSidecar.start();
});

afterAll(async () => {
	closeAllSidecarClients();
	await sidecar?.stop();
});

interface Run {
	workflowId: string;
	executionId: string;
	/** Set for a sub-workflow's execution: the execution that called it. */
	parentExecutionId?: string;
}

async function runResumePoint(
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

async function runGuard(
	run: Run,
	items: INodeExecutionData[],
	upstream: UpstreamNode[],
	params: Record<string, ParamValue> = { scope: 'payment' },
	typeVersion = 2,
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
		}),
	);
}

async function runSave(
	run: Run,
	items: INodeExecutionData[],
	upstream: UpstreamNode[],
	params: Record<string, ParamValue> = { stepName: 'charge' },
	downstream: UpstreamNode[] = [],
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
		}),
	);
	return out;
}

/** What an HTTP Request node makes of each item: a new item (the response), paired to its input. */
function httpResponse(items: INodeExecutionData[], response: IDataObject): INodeExecutionData[] {
	return items.map((_, i) => ({ json: { ...response }, pairedItem: { item: i } }));
}

function durable(item: INodeExecutionData): IDataObject {
	return item.json.durable as IDataObject;
}

async function expireInstanceLease(workflowId: string, key: string): Promise<void> {
	await sidecar.sql(
		"UPDATE durable_instances SET lease_expires_at = now() - interval '1 second' WHERE workflow_id = $1 AND instance_key = $2",
		[workflowId, key],
	);
}

const CHARGE = { chargeId: 'ch-1', status: 'paid' };

describe('version 2 with default parameters', () => {
	test('Save finds its instance from the upstream Resume Point through paired items, after an HTTP response replaced the item', async () => {
		const run = { workflowId: 'wf-v2-paired', executionId: 'e1' };
		const started = await runResumePoint(run, [
			{ body: { orderId: 'o-a', amount: 10 } },
			{ body: { orderId: 'o-b', amount: 20 } },
		]);
		expect(started[OUTPUT_START]).toHaveLength(2);
		const rp = { ...RP, output: started[OUTPUT_START] };
		// The HTTP Request answered in reverse order: pairing, not position, decides.
		const responses: INodeExecutionData[] = [
			{ json: { chargeId: 'ch-b' }, pairedItem: { item: 1 } },
			{ json: { chargeId: 'ch-a' }, pairedItem: { item: 0 } },
		];
		const out = await runSave(run, responses, [HTTP, rp]);
		expect(out.map((i) => i.pairedItem)).toEqual([{ item: 0 }, { item: 1 }]);
		expect(durable(out[0])).toMatchObject({ instanceKey: 'o-b', lastStep: 'charge' });
		expect(durable(out[1])).toMatchObject({ instanceKey: 'o-a', lastStep: 'charge' });
		const rows = await sidecar.sql<{ instance_key: string; step_name: string }>(
			"SELECT instance_key, step_name FROM durable_checkpoints WHERE workflow_id = 'wf-v2-paired' ORDER BY instance_key",
		);
		expect(rows).toEqual([
			{ instance_key: 'o-a', step_name: 'charge' },
			{ instance_key: 'o-b', step_name: 'charge' },
		]);
	});

	test('state is the start item plus each step result; a resumed run restores both, and Done Before saves the replayed result', async () => {
		const wf = 'wf-v2-state';
		const first = { workflowId: wf, executionId: 'e1' };
		const started = await runResumePoint(first, [{ body: { orderId: 'o-s', amount: 10 } }]);
		const rp1 = { ...RP, output: started[OUTPUT_START] };
		const claimed = await runGuard(first, started[OUTPUT_START], [rp1]);
		expect(claimed[OUTPUT_FIRST_RUN]).toHaveLength(1);
		const guard1 = { ...GUARD, output: claimed[OUTPUT_FIRST_RUN] };
		const saved = await runSave(first, httpResponse(claimed[OUTPUT_FIRST_RUN], CHARGE), [
			HTTP,
			guard1,
			rp1,
		]);
		// The output is the stored state: start fields and the step's result under its name.
		expect(saved[0].json).toMatchObject({ body: { orderId: 'o-s', amount: 10 }, charge: CHARGE });
		expect(saved[0].json.idempotency).toBeUndefined();

		// The execution dies; a re-delivery with other content resumes the instance.
		await expireInstanceLease(wf, 'o-s');
		const second = { workflowId: wf, executionId: 'e2' };
		const resumed = await runResumePoint(second, [{ body: { orderId: 'o-s', amount: 999 } }]);
		expect(resumed[OUTPUT_RESUME]).toHaveLength(1);
		const item = resumed[OUTPUT_RESUME][0];
		expect(item.json).toMatchObject({ body: { orderId: 'o-s', amount: 10 }, charge: CHARGE });
		expect(durable(item)).toMatchObject({ outcome: 'resumed', lastStep: 'charge' });

		// The side effect is not run again: Done Before, and its Save stores the replayed result.
		const rp2 = { ...RP, output: resumed[OUTPUT_RESUME] };
		const again = await runGuard(second, resumed[OUTPUT_RESUME], [rp2]);
		expect(again[OUTPUT_ALREADY_DONE]).toHaveLength(1);
		expect(again[OUTPUT_ALREADY_DONE][0].json.idempotency).toMatchObject({
			outcome: 'duplicate',
			result: CHARGE,
		});
		const guard2 = { ...GUARD, output: again[OUTPUT_ALREADY_DONE] };
		const resaved = await runSave(second, again[OUTPUT_ALREADY_DONE], [guard2, rp2]);
		expect(resaved[0].json).toMatchObject({ body: { orderId: 'o-s', amount: 10 }, charge: CHARGE });
		expect(durable(resaved[0])).toMatchObject({ deduplicated: true, lastStep: 'charge' });
	});

	test('Claim → call → Save records the key in the same SaveCheckpoints call; a second claim answers duplicate', async () => {
		const run = { workflowId: 'wf-v2-record', executionId: 'e1' };
		const started = await runResumePoint(run, [{ body: { orderId: 'o-r' } }]);
		const rp = { ...RP, output: started[OUTPUT_START] };
		const claimed = await runGuard(run, started[OUTPUT_START], [rp]);
		expect(claimed[OUTPUT_FIRST_RUN][0].json.idempotency).toMatchObject({
			scope: 'payment',
			key: 'o-r',
			attempt: 1,
			outcome: 'acquired',
		});
		const client = getSidecarClient(sidecar.connection());
		const saveSpy = jest.spyOn(client, 'saveCheckpoints');
		const completeSpy = jest.spyOn(client, 'completeKey');
		try {
			const saved = await runSave(run, httpResponse(claimed[OUTPUT_FIRST_RUN], CHARGE), [
				HTTP,
				{ ...GUARD, output: claimed[OUTPUT_FIRST_RUN] },
				rp,
			]);
			expect(saveSpy).toHaveBeenCalledTimes(1);
			expect(completeSpy).not.toHaveBeenCalled();
			expect(saveSpy.mock.calls[0][0].items?.[0]?.completeKey).toMatchObject({
				scope: 'payment',
				key: 'o-r',
				attempt: 1,
			});
			expect(durable(saved[0]).completedKey).toEqual({ scope: 'payment', key: 'o-r' });
		} finally {
			saveSpy.mockRestore();
			completeSpy.mockRestore();
		}
		const cps = await sidecar.sql<{ n: string }>(
			"SELECT count(*) AS n FROM durable_checkpoints WHERE workflow_id = 'wf-v2-record'",
		);
		expect(Number(cps[0].n)).toBe(1);
		// Another execution claiming the key (same instance, so the same fingerprint) gets the result.
		const response = await client.claim({
			items: [
				{
					scope: 'payment',
					key: 'o-r',
					holder: 'e-other',
					payloadJson: Buffer.from(
						JSON.stringify({ instanceKey: 'o-r', workflowId: 'wf-v2-record' }),
					),
				},
			],
		});
		expect(response.results[0].outcome).toBe(ClaimOutcome.CLAIM_OUTCOME_DUPLICATE);
		expect(JSON.parse(Buffer.from(response.results[0].key!.resultJson).toString())).toEqual(CHARGE);
	});

	test('without a Resume Point upstream, Save and Claim fail with a clear NodeOperationError', async () => {
		const run = { workflowId: 'wf-v2-none', executionId: 'e1' };
		const items: INodeExecutionData[] = [{ json: { chargeId: 'x' } }];
		const webhook: UpstreamNode = { name: 'Webhook', type: 'n8n-nodes-base.webhook' };
		const saveError = await runSave(run, items, [webhook]).catch((e: unknown) => e);
		expect(saveError).toBeInstanceOf(NodeOperationError);
		expect((saveError as NodeOperationError).message).toMatch(/No Resume Point before this node/);
		expect((saveError as NodeOperationError).description).toMatch(/Connect a Resume Point/);
		expect((saveError as NodeOperationError).context.itemIndex).toBe(0);
		const claimError = await runGuard(run, items, [webhook]).catch((e: unknown) => e);
		expect(claimError).toBeInstanceOf(NodeOperationError);
		expect((claimError as NodeOperationError).message).toMatch(/No Resume Point before this node/);
	});

	test('a Resume Point upstream that an item cannot be traced back to (a Code node made new, unlinked items): an error saying so; nothing is claimed', async () => {
		const run = { workflowId: 'wf-v2-unlinked', executionId: 'e1' };
		const started = await runResumePoint(run, [{ body: { orderId: 'o-unlinked' } }]);
		// Two items where one came in, with no pairedItem and no durable field.
		const items: INodeExecutionData[] = [{ json: { part: 1 } }, { json: { part: 2 } }];
		const code: UpstreamNode = { name: 'Code', type: 'n8n-nodes-base.code' };
		const claim = jest.spyOn(getSidecarClient(sidecar.connection()), 'claim');
		try {
			const error = await runGuard(run, items, [
				code,
				{ ...RP, output: started[OUTPUT_START] },
			]).catch((e: unknown) => e);
			if (!(error instanceof NodeOperationError)) throw new Error('expected a NodeOperationError');
			expect(error.message).toMatch(/cannot be traced back to the Resume Point 'Resume Point'/);
			expect(error.description).toMatch(/Code node/);
			expect(error.context.itemIndex).toBe(0);
			expect(claim).not.toHaveBeenCalled();
		} finally {
			claim.mockRestore();
		}
	});

	test('the Instance fingerprint is equal on the first and the resumed run: the resumed execution takes the claim over', async () => {
		const wf = 'wf-v2-fingerprint';
		const first = { workflowId: wf, executionId: 'e1' };
		const started = await runResumePoint(first, [{ body: { orderId: 'o-f', amount: 1 } }]);
		const claimed = await runGuard(first, started[OUTPUT_START], [
			{ ...RP, output: started[OUTPUT_START] },
		]);
		expect(claimed[OUTPUT_FIRST_RUN][0].json.idempotency).toMatchObject({ attempt: 1 });
		// e1 dies between Claim and Save; its instance is resumed by e2 with other item content.
		await expireInstanceLease(wf, 'o-f');
		const second = { workflowId: wf, executionId: 'e2' };
		const resumed = await runResumePoint(second, [
			{ body: { orderId: 'o-f', amount: 2 }, extra: true },
		]);
		const again = await runGuard(second, resumed[OUTPUT_RESUME], [
			{ ...RP, output: resumed[OUTPUT_RESUME] },
		]);
		// Not a mismatch, and no waiting for e1's claim lease: e2 holds the instance.
		expect(again[OUTPUT_FIRST_RUN]).toHaveLength(1);
		expect(again[OUTPUT_FIRST_RUN][0].json.idempotency).toMatchObject({
			key: 'o-f',
			attempt: 2,
			outcome: 'acquired',
		});
		// Another instance reusing the key is refused.
		const other = await runResumePoint(first, [{ body: { orderId: 'o-g' } }]);
		const error = await runGuard(
			first,
			other[OUTPUT_START],
			[{ ...RP, output: other[OUTPUT_START] }],
			{ scope: 'payment', key: 'o-f' },
		).catch((e: unknown) => e);
		expect(error).toBeInstanceOf(NodeOperationError);
		expect((error as NodeOperationError).context.grpcCode).toBe('FAILED_PRECONDITION');
	});

	test("the lease chosen on the Resume Point is the instance's: kept by claims, saves and resumes", async () => {
		const wf = 'wf-v2-lease';
		const run = { workflowId: wf, executionId: 'e1' };
		const started = await runResumePoint(run, [{ body: { orderId: 'o-l' } }], {
			options: { leaseSeconds: 120 },
		});
		expect(durable(started[OUTPUT_START][0]).leaseSeconds).toBe(120);
		// The metadata stays small: n8n keeps every item in the execution record.
		expect(Object.keys(durable(started[OUTPUT_START][0])).sort()).toEqual([
			'boundVersion',
			'instanceKey',
			'lastSequence',
			'lastStep',
			'leaseSeconds',
			'outcome',
			'resumeCount',
			'status',
			'workflowId',
		]);
		const rp = { ...RP, output: started[OUTPUT_START] };
		const client = getSidecarClient(sidecar.connection());
		const claimSpy = jest.spyOn(client, 'claim');
		let claimed: INodeExecutionData[][];
		try {
			// The Claim comes after an HTTP response replaced the item.
			const fetched = httpResponse(started[OUTPUT_START], { quote: 5 });
			claimed = await runGuard(run, fetched, [QUOTE, rp]);
			expect(claimSpy.mock.calls[0][0].items?.[0]).toMatchObject({
				leaseSeconds: 120,
				workflowId: wf,
				instanceKey: 'o-l',
				holder: 'e1',
			});
		} finally {
			claimSpy.mockRestore();
		}
		const keyLease = await sidecar.sql<{ s: number }>(
			"SELECT extract(epoch FROM lease_expires_at - now())::float AS s FROM durable_idempotency_keys WHERE key = 'o-l'",
		);
		expect(keyLease[0].s).toBeGreaterThan(100);
		expect(keyLease[0].s).toBeLessThanOrEqual(120);

		await sidecar.sql(
			"UPDATE durable_instances SET lease_expires_at = now() + interval '5 seconds' WHERE workflow_id = $1",
			[wf],
		);
		await runSave(run, httpResponse(claimed[OUTPUT_FIRST_RUN], CHARGE), [
			HTTP,
			{ ...GUARD, output: claimed[OUTPUT_FIRST_RUN] },
			{ ...QUOTE, output: httpResponse(started[OUTPUT_START], { quote: 5 }) },
			rp,
		]);
		const instanceLease = await sidecar.sql<{ s: number; lease_seconds: number }>(
			'SELECT extract(epoch FROM lease_expires_at - now())::float AS s, lease_seconds FROM durable_instances WHERE workflow_id = $1',
			[wf],
		);
		expect(instanceLease[0].lease_seconds).toBe(120);
		expect(instanceLease[0].s).toBeGreaterThan(100);

		await expireInstanceLease(wf, 'o-l');
		const resumed = await runResumePoint({ workflowId: wf, executionId: 'e2' }, [
			{ body: { orderId: 'o-l' } },
		]);
		expect(durable(resumed[OUTPUT_RESUME][0]).leaseSeconds).toBe(120);
		expect(JSON.stringify(durable(resumed[OUTPUT_RESUME][0])).length).toBeLessThan(250);
	});
	test('a later Save does not complete the key again: the claim search stops at the Save in between', async () => {
		const run = { workflowId: 'wf-v2-two-saves', executionId: 'e1' };
		const started = await runResumePoint(run, [{ body: { orderId: 'o-t' } }]);
		const rp = { ...RP, output: started[OUTPUT_START] };
		const claimed = await runGuard(run, started[OUTPUT_START], [rp]);
		const charged = httpResponse(claimed[OUTPUT_FIRST_RUN], CHARGE);
		const chargePath = [HTTP, { ...GUARD, output: claimed[OUTPUT_FIRST_RUN] }, rp];
		const first = await runSave(run, charged, chargePath);
		expect(durable(first[0]).completedKey).toEqual({ scope: 'payment', key: 'o-t' });
		const client = getSidecarClient(sidecar.connection());
		const saveSpy = jest.spyOn(client, 'saveCheckpoints');
		try {
			const shipped = await runSave(
				run,
				httpResponse(first, { trackingId: 'tr-1' }),
				[
					{ name: 'Ship', type: 'n8n-nodes-base.httpRequest' },
					{
						name: 'Save charge',
						type: 'n8n-nodes-durable.durableCheckpoint',
						typeVersion: 2,
						output: first,
					},
					{ ...HTTP, output: charged },
					...chargePath.slice(1),
				],
				{ stepName: 'ship' },
			);
			expect(saveSpy.mock.calls[0][0].items?.[0]?.completeKey).toBeUndefined();
			expect(shipped[0].json).toMatchObject({ charge: CHARGE, ship: { trackingId: 'tr-1' } });
			expect(durable(shipped[0]).completedKey).toBeUndefined();
		} finally {
			saveSpy.mockRestore();
		}
	});
	test('Record Result (v2) takes scope, key and attempt from the Claim upstream', async () => {
		const run = { workflowId: 'wf-v2-recordresult', executionId: 'e1' };
		const started = await runResumePoint(run, [{ body: { orderId: 'o-rr' } }]);
		const rp = { ...RP, output: started[OUTPUT_START] };
		const claimed = await runGuard(run, started[OUTPUT_START], [rp]);
		const [recorded] = await runGuard(
			run,
			httpResponse(claimed[OUTPUT_FIRST_RUN], CHARGE),
			[HTTP, { ...GUARD, output: claimed[OUTPUT_FIRST_RUN] }, rp],
			{ operation: 'recordResult' },
		);
		expect(recorded[0].json.idempotency).toMatchObject({
			scope: 'payment',
			key: 'o-rr',
			attempt: 1,
			outcome: 'recorded',
		});
	});
});

describe('Save with Complete Instance (the last Save completes the instance)', () => {
	test('several items of one instance (its lines after a Split Out): each is saved, the last completes it', async () => {
		const run = { workflowId: 'wf-v2-complete-lines', executionId: 'e1' };
		const started = await runResumePoint(run, [
			{ body: { orderId: 'o-cl1' } },
			{ body: { orderId: 'o-cl2' } },
		]);
		const rp = { ...RP, output: started[OUTPUT_START] };
		// Two lines of o-cl1 around one of o-cl2, each an HTTP response paired to its order's item.
		const lines: INodeExecutionData[] = [0, 1, 0].map((n, i) => ({
			json: { line: i },
			pairedItem: { item: n },
		}));
		const client = getSidecarClient(sidecar.connection());
		const saveSpy = jest.spyOn(client, 'saveCheckpoints');
		try {
			const saved = await runSave(run, lines, [HTTP, rp], {
				stepName: 'line charged',
				options: { completeInstance: true },
			});
			expect(saveSpy).toHaveBeenCalledTimes(1);
			expect(saveSpy.mock.calls[0][0].items?.map((item) => item.completeInstance)).toEqual([
				false,
				true,
				true,
			]);
			expect(saved.map((item) => durable(item).lastSequence)).toEqual([1, 1, 2]);
			expect(saved.map((item) => durable(item).status)).toEqual([
				undefined,
				'completed',
				'completed',
			]);
			for (const orderId of ['o-cl1', 'o-cl2']) {
				const again = await runResumePoint({ ...run, executionId: 'e2' }, [{ body: { orderId } }]);
				expect(again[OUTPUT_COMPLETED]).toHaveLength(1);
			}
		} finally {
			saveSpy.mockRestore();
		}
	});

	test('one SaveCheckpoints call saves and completes; the output says completed; a re-delivery leaves by Completed', async () => {
		const run = { workflowId: 'wf-v2-complete-on-save', executionId: 'e1' };
		const started = await runResumePoint(run, [{ body: { orderId: 'o-cs' } }]);
		const rp = { ...RP, output: started[OUTPUT_START] };
		const claimed = await runGuard(run, started[OUTPUT_START], [rp]);
		const client = getSidecarClient(sidecar.connection());
		const saveSpy = jest.spyOn(client, 'saveCheckpoints');
		const completeSpy = jest.spyOn(client, 'completeInstance');
		const upstream = [HTTP, { ...GUARD, output: claimed[OUTPUT_FIRST_RUN] }, rp];
		const params = { stepName: 'charge', options: { completeInstance: true } };
		try {
			const saved = await runSave(
				run,
				httpResponse(claimed[OUTPUT_FIRST_RUN], CHARGE),
				upstream,
				params,
			);
			expect(saveSpy).toHaveBeenCalledTimes(1);
			expect(completeSpy).not.toHaveBeenCalled();
			expect(saveSpy.mock.calls[0][0].items?.[0]).toMatchObject({
				completeInstance: true,
				completeKey: { scope: 'payment', key: 'o-cs', attempt: 1 },
			});
			expect(saved[0].json).toMatchObject({ body: { orderId: 'o-cs' }, charge: CHARGE });
			expect(durable(saved[0])).toMatchObject({
				instanceKey: 'o-cs',
				lastStep: 'charge',
				lastSequence: 1,
				deduplicated: false,
				status: 'completed',
				completedKey: { scope: 'payment', key: 'o-cs' },
			});
			expect(typeof durable(saved[0]).finishedAt).toBe('string');

			// The same Save again (n8n retrying the node): the checkpoint already there, still completed.
			const retried = await runSave(
				run,
				httpResponse(claimed[OUTPUT_FIRST_RUN], CHARGE),
				upstream,
				params,
			);
			expect(durable(retried[0])).toMatchObject({
				lastSequence: 1,
				deduplicated: true,
				status: 'completed',
				finishedAt: durable(saved[0]).finishedAt,
			});
		} finally {
			saveSpy.mockRestore();
			completeSpy.mockRestore();
		}
		const rows = await sidecar.sql<{ status: string; n: string }>(
			`SELECT i.status, (SELECT count(*) FROM durable_checkpoints c
			   WHERE c.workflow_id = i.workflow_id AND c.instance_key = i.instance_key) AS n
			 FROM durable_instances i WHERE i.workflow_id = 'wf-v2-complete-on-save'`,
		);
		expect(rows).toEqual([{ status: 'completed', n: '1' }]);
		const redelivered = await runResumePoint({ ...run, executionId: 'e2' }, [
			{ body: { orderId: 'o-cs' } },
		]);
		expect(redelivered[OUTPUT_COMPLETED]).toHaveLength(1);
		expect(redelivered[OUTPUT_START]).toHaveLength(0);
	});

	test('off by default: the Save leaves the instance running and its output has no status', async () => {
		const run = { workflowId: 'wf-v2-complete-default', executionId: 'e1' };
		const started = await runResumePoint(run, [{ body: { orderId: 'o-cd' } }]);
		const client = getSidecarClient(sidecar.connection());
		const saveSpy = jest.spyOn(client, 'saveCheckpoints');
		try {
			const saved = await runSave(run, started[OUTPUT_START], [
				{ ...RP, output: started[OUTPUT_START] },
			]);
			expect(saveSpy.mock.calls[0][0].items?.[0]?.completeInstance).toBe(false);
			expect(durable(saved[0]).status).toBeUndefined();
			expect(durable(saved[0]).finishedAt).toBeUndefined();
		} finally {
			saveSpy.mockRestore();
		}
		const rows = await sidecar.sql<{ status: string }>(
			"SELECT status FROM durable_instances WHERE workflow_id = 'wf-v2-complete-default'",
		);
		expect(rows).toEqual([{ status: 'running' }]);
	});
});

describe('Idempotency Guard 2.1: a Key you set counts within its instance', () => {
	const SPLIT: UpstreamNode = { name: 'Split Lines', type: 'n8n-nodes-base.splitOut' };
	const lineKey = {
		scope: 'charge-line',
		key: (_i: number, item: INodeExecutionData) => (item.json.line as IDataObject).sku,
	};

	/** Two orders of lines sku-a and sku-b each, as a Split Out after the Resume Point makes them. */
	async function orderLines(workflowId: string, executionId: string, orders: string[]) {
		const run = { workflowId, executionId };
		const started = await runResumePoint(
			run,
			orders.map((orderId) => ({ body: { orderId } })),
		);
		const lines: INodeExecutionData[] = started[OUTPUT_START].flatMap((_, n) =>
			['sku-a', 'sku-b'].map((sku) => ({ json: { line: { sku } }, pairedItem: { item: n } })),
		);
		return { run, lines, upstream: [SPLIT, { ...RP, output: started[OUTPUT_START] }] };
	}

	test('two orders with the same line keys: each line of each order runs once, with a derived key of its own', async () => {
		const { run, lines, upstream } = await orderLines('wf-lines-21', 'e1', ['o-l1', 'o-l2']);
		const out = await runGuard(run, lines, upstream, lineKey, 2.1);
		expect(out[OUTPUT_FIRST_RUN]).toHaveLength(4);
		const keys = out[OUTPUT_FIRST_RUN].map((item) => item.json.idempotency as IDataObject);
		expect(keys.map((k) => k.key)).toEqual([
			'["o-l1","sku-a"]',
			'["o-l1","sku-b"]',
			'["o-l2","sku-a"]',
			'["o-l2","sku-b"]',
		]);
		expect(new Set(keys.map((k) => k.derivedKey)).size).toBe(4);
		// The same lines claimed again (a resumed run): the same keys, held by this execution.
		const again = await runGuard(run, lines, upstream, lineKey, 2.1);
		expect(
			again[OUTPUT_FIRST_RUN].map((item) => (item.json.idempotency as IDataObject).key),
		).toEqual(keys.map((k) => k.key));
	});

	test('version 2, or the option Share Key Across Instances: the Key is shared, so a second order cannot reuse it', async () => {
		for (const [version, params] of [
			[2, lineKey],
			[2.1, { ...lineKey, options: { shareKeyAcrossInstances: true } }],
		] as Array<[number, Record<string, ParamValue>]>) {
			const scope = `charge-line-${version}`;
			const first = await orderLines(`wf-lines-shared-${version}`, 'e1', ['o-s1']);
			const claimed = await runGuard(
				first.run,
				first.lines,
				first.upstream,
				{ ...params, scope },
				version,
			);
			expect(
				claimed[OUTPUT_FIRST_RUN].map((item) => (item.json.idempotency as IDataObject).key),
			).toEqual(['sku-a', 'sku-b']);
			const second = await orderLines(`wf-lines-shared-${version}`, 'e2', ['o-s2']);
			await expect(
				runGuard(second.run, second.lines, second.upstream, { ...params, scope }, version),
			).rejects.toThrow(/already used with a different payload/);
		}
	});

	test('a Key expression that gives nothing for an item is an author error, not the instance key; nothing is claimed', async () => {
		const { run, lines, upstream } = await orderLines('wf-lines-typo', 'e1', ['o-t1']);
		const spy = jest.spyOn(getSidecarClient(sidecar.connection()), 'claim');
		try {
			const misspelt = {
				scope: 'charge-line',
				// {{ $json.line.skuu }}: a misspelt field.
				key: (_i: number, item: INodeExecutionData) => (item.json.line as IDataObject).skuu,
			};
			for (const version of [2, 2.1]) {
				await expect(runGuard(run, lines, upstream, misspelt, version)).rejects.toThrow(
					/Key is empty for this item/,
				);
			}
			expect(spy).not.toHaveBeenCalled();
		} finally {
			spy.mockRestore();
		}
	});

	test('a Key too long together with its instance key is an author error naming the limit; nothing is claimed', async () => {
		const { run, lines, upstream } = await orderLines('wf-lines-long', 'e1', [
			'o-' + 'x'.repeat(200),
		]);
		const spy = jest.spyOn(getSidecarClient(sidecar.connection()), 'claim');
		try {
			const long = { scope: 'charge-line', key: () => 'k'.repeat(60) };
			await expect(runGuard(run, lines, upstream, long, 2.1)).rejects.toThrow(
				/The Key with its instance key is 2\d\d characters long; the limit is 255/,
			);
			expect(spy).not.toHaveBeenCalled();
		} finally {
			spy.mockRestore();
		}
	});
});

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
		await expireInstanceLease('wf-caller', 'o-sub-2');
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
