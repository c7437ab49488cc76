/**
 * Durable Checkpoint version 2's Save with Complete Instance: the last Save
 * completes the instance in the same call.
 */
import type { INodeExecutionData } from 'n8n-workflow';

import { OUTPUT_FIRST_RUN } from '../nodes/IdempotencyGuard/IdempotencyGuard.node';
import { OUTPUT_COMPLETED, OUTPUT_START } from '../nodes/ResumePoint/ResumePoint.node';
import { getSidecarClient } from '../shared/transport';
import {
	CHARGE,
	durable,
	GUARD,
	HTTP,
	httpResponse,
	RP,
	runGuard,
	runResumePoint,
	runSave,
	sidecar,
	useSidecar,
} from './support/version2';

useSidecar();

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
