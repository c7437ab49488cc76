/**
 * Idempotency Guard 2.1: a Key you set counts within its instance, unless
 * Share Key Across Instances says otherwise (version 2 nodes share it).
 */
import { type IDataObject, type INodeExecutionData } from 'n8n-workflow';

import { OUTPUT_FIRST_RUN } from '../nodes/IdempotencyGuard/IdempotencyGuard.node';
import { OUTPUT_START } from '../nodes/ResumePoint/ResumePoint.node';
import { getSidecarClient } from '../shared/transport';
import { type ParamValue, type UpstreamNode } from './support/n8n';
import { RP, runGuard, runResumePoint, sidecar, useSidecar } from './support/version2';

useSidecar();

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

	test('a Claim for a finished instance (an execution that went on past its failure) starts nothing and says why', async () => {
		const { run, lines, upstream } = await orderLines('wf-lines-failed', 'e1', ['o-f1']);
		const client = getSidecarClient(sidecar.connection());
		await client.failInstance({
			workflowId: run.workflowId,
			instanceKey: 'o-f1',
			executionId: run.executionId,
			errorMessage: 'Save: step not saved (refused)',
			retry: false,
		});
		const count = async () => (await sidecar.sql('SELECT 1 FROM durable_idempotency_keys')).length;
		const before = await count();
		const refused = runGuard(run, lines, upstream, lineKey, 2.1);
		await expect(refused).rejects.toThrow(/a finished instance starts no more side effects/);
		await expect(refused).rejects.toMatchObject({
			description: expect.stringMatching(/On Error: Continue \(using error output\)/),
		});
		expect(await count()).toBe(before);
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
