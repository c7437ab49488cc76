/**
 * Version 2 of Resume Point, Durable Checkpoint and Idempotency Guard with
 * their default parameters: the instance found through paired items, the start
 * item restored, step results added to the state, Claim → call → Save
 * completing the key in the save's transaction, the instance's lease.
 */
import { NodeOperationError, type INodeExecutionData } from 'n8n-workflow';

import {
	OUTPUT_ALREADY_DONE,
	OUTPUT_FIRST_RUN,
} from '../nodes/IdempotencyGuard/IdempotencyGuard.node';
import { OUTPUT_RESUME, OUTPUT_START } from '../nodes/ResumePoint/ResumePoint.node';
import { ClaimOutcome, getSidecarClient } from '../shared/transport';
import type { UpstreamNode } from './support/n8n';
import {
	CHARGE,
	durable,
	GUARD,
	HTTP,
	httpResponse,
	QUOTE,
	RP,
	runGuard,
	runResumePoint,
	runSave,
	sidecar,
	useSidecar,
} from './support/version2';

useSidecar();

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
		await sidecar.expireLease(wf, 'o-s');
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
		await sidecar.expireLease(wf, 'o-f');
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

		await sidecar.expireLease(wf, 'o-l');
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
