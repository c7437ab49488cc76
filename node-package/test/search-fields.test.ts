/**
 * Search fields from the nodes (issue 44): the Resume Point's and the Save's
 * Search Fields option, through the real sidecar.
 */
import { DurableCheckpoint } from '../nodes/DurableCheckpoint/DurableCheckpoint.node';
import { OUTPUT_START, ResumePoint } from '../nodes/ResumePoint/ResumePoint.node';
import { runNode, sidecar, useSidecar } from './support/waits-and-signals';

useSidecar();

const wf = 'wf-search-fields';

async function fieldsOf(key: string): Promise<Record<string, unknown>> {
	const rows = await sidecar.sql<{
		name: string;
		kind: string;
		num_value: number;
		text_value: string;
	}>(
		'SELECT name, kind, num_value, text_value FROM durable_search_fields WHERE workflow_id = $1 AND instance_key = $2',
		[wf, key],
	);
	return Object.fromEntries(
		rows.map((r) => [r.name, r.kind === 's' ? r.text_value : Number(r.num_value)]),
	);
}

describe('Search Fields', () => {
	test('the Resume Point sets them on a new instance and a Save merges its own', async () => {
		const out = await runNode(
			new ResumePoint(),
			{ instanceKey: 'sf-1', options: { searchFields: '{"customerId": "C-42", "country": "DE"}' } },
			{ workflowId: wf, items: [{ body: { orderId: 'sf-1' } }] },
		);
		expect(out[OUTPUT_START]).toHaveLength(1);
		expect(await fieldsOf('sf-1')).toEqual({ customerId: 'C-42', country: 'DE' });
		await runNode(
			new DurableCheckpoint(),
			{
				operation: 'save',
				instanceFrom: 'key',
				instanceKey: 'sf-1',
				stepName: 'paid',
				saveWhat: 'item',
				options: { searchFields: { amount: 99.5, country: null } },
			},
			{ workflowId: wf, items: out[OUTPUT_START] },
		);
		expect(await fieldsOf('sf-1')).toEqual({ customerId: 'C-42', amount: 99.5 });
	});

	test('a bad field fails the item before anything is written', async () => {
		await expect(
			runNode(
				new ResumePoint(),
				{ instanceKey: 'sf-2', options: { searchFields: '["not", "an object"]' } },
				{ workflowId: wf, items: [{ body: { orderId: 'sf-2' } }] },
			),
		).rejects.toThrow('Search Fields must be a JSON object');
		await expect(
			runNode(
				new ResumePoint(),
				{ instanceKey: 'sf-2', options: { searchFields: '{"has space": 1}' } },
				{ workflowId: wf, items: [{ body: { orderId: 'sf-2' } }] },
			),
		).rejects.toMatchObject({ message: expect.stringContaining('search_fields_json') });
		const rows = await sidecar.sql<{ n: string }>(
			'SELECT count(*) AS n FROM durable_instances WHERE instance_key = $1',
			['sf-2'],
		);
		expect(Number(rows[0].n)).toBe(0);
	});
});
