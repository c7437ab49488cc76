/**
 * A node set up wrongly for an item (an empty Step Name or Scope, a timeout under a second) fails the
 * item's instance for good at once, with the error and the way out, through the real sidecar: a resumed
 * execution reads the same parameters on the same checkpointed data, so every resume would fail alike,
 * and the instance would go round until its retry policy suspended it with a lapsed lease as its only
 * reason. Under Continue On Fail the item is an error item and its instance goes on.
 */
import type { IDataObject } from 'n8n-workflow';

import { OUTPUT_START } from '../nodes/ResumePoint/ResumePoint.node';
import { FAILED_FOR_GOOD } from '../shared/node-helpers';
import {
	RP,
	runGuard,
	runResumePoint,
	runSave,
	sidecar,
	useSidecar,
	type Run,
} from './support/version2';

useSidecar();

let n = 0;
const unique = (prefix: string) => `${prefix}-${Date.now()}-${++n}`;

/** New instances of `run`'s workflow through the Resume Point: their Start items and the upstream path. */
async function started(run: Run, count: number) {
	const keys = Array.from({ length: count }, () => unique('o'));
	const out = await runResumePoint(
		run,
		keys.map((orderId) => ({ body: { orderId } })),
	);
	expect(out[OUTPUT_START]).toHaveLength(count);
	return { keys, items: out[OUTPUT_START], upstream: [{ ...RP, output: out[OUTPUT_START] }] };
}

/** Each instance's status and error, in the order of `keys`. */
async function statusOf(
	run: Run,
	keys: string[],
): Promise<Array<{ status: string; error: string }>> {
	const out = [];
	for (const key of keys) {
		const [row] = await sidecar.sql<{ status: string; error_message: string | null }>(
			'SELECT status, error_message FROM durable_instances WHERE workflow_id = $1 AND instance_key = $2',
			[run.workflowId, key],
		);
		out.push({ status: row.status, error: row.error_message ?? '' });
	}
	return out;
}

describe('a setup error fails its instance for good, with the way out', () => {
	test('Save: an empty Step Name fails every instance of the run at once; nothing is saved', async () => {
		const run = { workflowId: unique('wf-setup-save'), executionId: 'e1' };
		const { keys, items, upstream } = await started(run, 2);
		const thrown = await runSave(run, items, upstream, { stepName: '' }).catch((e: Error) => e);
		expect(thrown).toBeInstanceOf(Error);
		expect((thrown as Error).message).toBe('Step Name is empty');
		expect((thrown as { description?: string }).description).toContain(FAILED_FOR_GOOD);
		for (const row of await statusOf(run, keys)) {
			expect(row.status).toBe('failed');
			expect(row.error).toContain('Save charge: Step Name is empty.');
			expect(row.error).toContain('Name the step that has just finished');
			expect(row.error).toContain('instances retry');
		}
		const saved = await sidecar.sql('SELECT 1 FROM durable_checkpoints WHERE workflow_id = $1', [
			run.workflowId,
		]);
		expect(saved).toHaveLength(0);
	});

	test('Save: only the instances whose items have the error are failed', async () => {
		const run = { workflowId: unique('wf-setup-save-one'), executionId: 'e1' };
		const { keys, items, upstream } = await started(run, 2);
		await expect(
			runSave(run, items, upstream, { stepName: (i: number) => (i === 1 ? '  ' : 'charged') }),
		).rejects.toThrow('Step Name is empty');
		expect((await statusOf(run, keys)).map((row) => row.status)).toEqual(['running', 'failed']);
	});

	test('Save under Continue On Fail: the item leaves as an error item and its instance goes on', async () => {
		const run = { workflowId: unique('wf-setup-save-cof'), executionId: 'e1' };
		const { keys, items, upstream } = await started(run, 1);
		const out = await runSave(run, items, upstream, { stepName: '' }, [], true);
		expect(out[0].json.error).toBe('Step Name is empty');
		expect(String((out[0].json.details as IDataObject).description)).not.toContain(FAILED_FOR_GOOD);
		expect(await statusOf(run, keys)).toEqual([{ status: 'running', error: '' }]);
	});

	test('Idempotency Guard Claim: an empty Scope fails the instance; nothing is claimed', async () => {
		const run = { workflowId: unique('wf-setup-claim'), executionId: 'e1' };
		const { keys, items, upstream } = await started(run, 1);
		await expect(runGuard(run, items, upstream, { scope: '' })).rejects.toThrow(
			'Scope is empty for this item',
		);
		const [row] = await statusOf(run, keys);
		expect(row.status).toBe('failed');
		expect(row.error).toContain('Claim payment: Scope is empty for this item. Set Scope');
		const claimed = await sidecar.sql('SELECT 1 FROM durable_idempotency_keys WHERE key = $1', [
			keys[0],
		]);
		expect(claimed).toHaveLength(0);
	});

	test('Wait for Event with a timeout under a second fails the instance instead of parking it', async () => {
		const run = { workflowId: unique('wf-setup-await'), executionId: 'e1' };
		const { keys, items } = await started(run, 1);
		// A wait comes back through a Resume Point with Wait Outputs on.
		const upstream = [{ ...RP, parameters: { waitOutputs: true }, output: items }];
		await expect(
			runSave(run, items, upstream, {
				operation: 'awaitEvent',
				eventName: 'paid',
				resumeWhen: 'after',
				amount: 0.2,
				unit: 'seconds',
			}),
		).rejects.toThrow('The timeout must be at least 1 second');
		const [row] = await statusOf(run, keys);
		expect(row.status).toBe('failed');
		expect(row.error).toContain('Save charge: The timeout must be at least 1 second.');
	});

	test('Wait for Event behind a Resume Point without Wait Outputs fails every instance of the run; nothing is parked', async () => {
		const run = { workflowId: unique('wf-setup-blind'), executionId: 'e1' };
		const { keys, items, upstream } = await started(run, 2);
		const thrown = await runSave(run, items, upstream, {
			operation: 'awaitEvent',
			eventName: 'paid',
		}).catch((e: Error) => e);
		expect((thrown as Error).message).toBe(
			"Turn on Wait Outputs on 'Resume Point' before waiting here",
		);
		// One error for the whole run: the way out is named once.
		const description = String((thrown as { description?: string }).description);
		expect(description.split(FAILED_FOR_GOOD)).toHaveLength(2);
		for (const row of await statusOf(run, keys)) {
			expect(row.status).toBe('failed');
			expect(row.error).toContain("Save charge: Turn on Wait Outputs on 'Resume Point'");
		}
		const parked = await sidecar.sql(
			"SELECT 1 FROM durable_instances WHERE workflow_id = $1 AND awaited_event <> ''",
			[run.workflowId],
		);
		expect(parked).toHaveLength(0);
	});

	test('an error outside the setup (no instance upstream) fails no instance', async () => {
		const run = { workflowId: unique('wf-setup-none'), executionId: 'e1' };
		const { keys } = await started(run, 1);
		await expect(
			runSave(run, [{ json: { orderId: keys[0] } }], [], { stepName: 'charged' }),
		).rejects.toThrow();
		expect((await statusOf(run, keys)).map((row) => row.status)).toEqual(['running']);
	});
});
