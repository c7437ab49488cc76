/**
 * An Idempotency Guard call the sidecar refuses for a limit (RESOURCE_EXHAUSTED: a Claim's
 * fingerprint payload or a recorded result over DURABLE_MAX_STATE_BYTES) would be refused alike on
 * every resume: its instance is failed at once with the reason, as a Save's refusal fails it, with
 * or without Continue On Fail. Through the real sidecar, with a small limit.
 */
import type { IDataObject, INodeExecutionData } from 'n8n-workflow';

import {
	OUTPUT_FIRST_RUN,
	OUTPUT_IN_PROGRESS,
} from '../nodes/IdempotencyGuard/IdempotencyGuard.node';
import { OUTPUT_START } from '../nodes/ResumePoint/ResumePoint.node';
import { getSidecarClient } from '../shared/transport';
import { type ParamValue, type UpstreamNode } from './support/n8n';
import {
	GUARD,
	runGuard,
	HTTP,
	httpResponse,
	RP,
	runResumePoint,
	sidecar,
	useSidecar,
} from './support/version2';

useSidecar({ DURABLE_MAX_STATE_BYTES: '2000' });

const BIG = 'x'.repeat(5000);

/** The Guard (version 2) in `run`, with or without Continue On Fail. */
async function guardRun(
	run: { workflowId: string; executionId: string },
	items: INodeExecutionData[],
	upstream: UpstreamNode[],
	params: Record<string, ParamValue>,
	continueOnFail = false,
): Promise<INodeExecutionData[][]> {
	return await runGuard(run, items, upstream, params, 2, continueOnFail);
}

async function instances(workflowId: string) {
	return await sidecar.sql<{ instance_key: string; status: string; error_message: string }>(
		'SELECT instance_key, status, error_message FROM durable_instances WHERE workflow_id = $1 ORDER BY instance_key',
		[workflowId],
	);
}

async function keys(scope: string) {
	return await sidecar.sql<{ key: string; status: string }>(
		'SELECT key, status FROM durable_idempotency_keys WHERE scope = $1 ORDER BY key',
		[scope],
	);
}

async function started(workflowId: string, orders: IDataObject[]) {
	const run = { workflowId, executionId: 'e1' };
	const out = await runResumePoint(
		run,
		orders.map((body) => ({ body })),
	);
	return { run, items: out[OUTPUT_START], rp: { ...RP, output: out[OUTPUT_START] } };
}

describe('a Guard call refused for a limit fails its instance at once', () => {
	test('a Claim whose fingerprint payload is over the limit: nothing claimed, the instance failed with the reason', async () => {
		const {
			run,
			items: orders,
			rp,
		} = await started('wf-refused-claim', [
			{ orderId: 'o-big' },
			{ orderId: 'o-cof' },
			{ orderId: 'o-small' },
		]);
		// The orders after an Edit Fields that added a quote request (the fingerprint): two too large.
		const items = orders.map((item, i) => ({
			...item,
			json: { ...item.json, request: i < 2 ? BIG : 'short' },
		}));
		const params = { scope: 'quote', fingerprintFrom: 'item' };
		await expect(guardRun(run, [items[0]], [rp], params)).rejects.toMatchObject({
			message: expect.stringMatching(/DURABLE_MAX_STATE_BYTES/),
		});
		// Continue On Fail: the refused item leaves by In Progress as an error item (never First Run),
		// its instance is failed all the same, and the other item is claimed.
		const out = await guardRun(run, items.slice(1), [rp], params, true);
		expect(out[OUTPUT_FIRST_RUN]).toHaveLength(1);
		expect(out[OUTPUT_IN_PROGRESS]).toHaveLength(1);
		expect(out[OUTPUT_IN_PROGRESS][0].json.error).toMatch(/DURABLE_MAX_STATE_BYTES/);
		const rows = await instances('wf-refused-claim');
		expect(rows.map((r) => [r.instance_key, r.status])).toEqual([
			['o-big', 'failed'],
			['o-cof', 'failed'],
			['o-small', 'running'],
		]);
		for (const r of rows.slice(0, 2)) {
			expect(r.error_message).toMatch(
				new RegExp(
					`^Claim payment: key '${r.instance_key}' of scope 'quote' not claimed, so the side effect after it did not run\\. .*DURABLE_MAX_STATE_BYTES.*retry the instance`,
				),
			);
		}
		expect((await keys('quote')).map((k) => k.key)).toEqual(['o-small']);
	});

	test('a Record Result over the limit: the key stays claimed, the instance failed saying a retry runs the side effect again', async () => {
		const { run, items, rp } = await started('wf-refused-record', [
			{ orderId: 'o-rec' },
			{ orderId: 'o-rec-cof' },
		]);
		const claimed = await guardRun(run, items, [rp], { scope: 'charge' });
		expect(claimed[OUTPUT_FIRST_RUN]).toHaveLength(2);
		const upstream = [HTTP, { ...GUARD, output: claimed[OUTPUT_FIRST_RUN] }, rp];
		const answered = httpResponse(claimed[OUTPUT_FIRST_RUN], { receipt: BIG });
		await expect(
			guardRun(run, [answered[0]], upstream, { operation: 'recordResult' }),
		).rejects.toMatchObject({ message: expect.stringMatching(/DURABLE_MAX_STATE_BYTES/) });
		const [out] = await guardRun(
			run,
			[{ ...answered[1], pairedItem: { item: 1 } }],
			upstream,
			{ operation: 'recordResult' },
			true,
		);
		expect(out[0].json.error).toMatch(/DURABLE_MAX_STATE_BYTES/);
		const rows = await instances('wf-refused-record');
		expect(rows.map((r) => [r.instance_key, r.status])).toEqual([
			['o-rec', 'failed'],
			['o-rec-cof', 'failed'],
		]);
		for (const r of rows) {
			expect(r.error_message).toMatch(
				new RegExp(
					`^Claim payment: the result of key '${r.instance_key}' of scope 'charge' not recorded\\. .*DURABLE_MAX_STATE_BYTES.*a retry of the instance runs it again`,
				),
			);
		}
		expect((await keys('charge')).map((k) => k.status)).toEqual(['in_progress', 'in_progress']);
		// What the message says: the retried instance's Claim takes the key over and runs it again.
		await getSidecarClient(sidecar.connection()).retryInstance({
			workflowId: 'wf-refused-record',
			instanceKey: 'o-rec',
			actor: 'jest',
			reason: 'the receipt is stored elsewhere now',
		});
		const again = await runResumePoint({ workflowId: 'wf-refused-record', executionId: 'e2' }, [
			{ body: { orderId: 'o-rec' } },
		]);
		const retried = again.flat();
		expect(retried).toHaveLength(1);
		const reclaimed = await guardRun(
			{ workflowId: 'wf-refused-record', executionId: 'e2' },
			retried,
			[{ ...RP, output: retried }],
			{ scope: 'charge' },
		);
		expect(reclaimed[OUTPUT_FIRST_RUN]).toHaveLength(1);
	});
});
