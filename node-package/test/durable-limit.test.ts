/**
 * The Durable Limit against the real `durable-sidecar serve`: items come from a Resume Point, an item
 * over a limit is parked and comes back through the Resume Point (the Resume Trigger's claim), and each
 * operation routes to the outputs configuredOutputs names.
 */
import type { INodeExecutionData } from 'n8n-workflow';

import { configuredOutputs } from '../nodes/DurableLimit/DurableLimit.node';
import type { ParamValue } from './support/n8n';
import { keysOf, limit, resumed, started, unique, wf } from './support/limits';
import { sidecar, useSidecar } from './support/waits-and-signals';

useSidecar();

/** A Rate Limit's parameters: Most Items per Per seconds, with its options. */
const rateLimit = (
	limitName: string,
	maxItems: number,
	seconds: number,
	options?: Record<string, number>,
): Record<string, ParamValue> => ({
	operation: 'rateLimit',
	limitName,
	maxItems,
	periodAmount: seconds,
	periodUnit: 'seconds',
	...(options ? { options } : {}),
});

/** The status and error of the items' instances, in the items' order. */
async function statusOf(
	items: INodeExecutionData[],
): Promise<Array<{ status: string; error: string }>> {
	const out = [];
	for (const key of keysOf(items)) {
		const [row] = await sidecar.sql<{ status: string; error_message: string }>(
			'SELECT status, error_message FROM durable_instances WHERE workflow_id = $1 AND instance_key = $2',
			[wf, key],
		);
		out.push({ status: row.status, error: row.error_message ?? '' });
	}
	return out;
}

describe('Durable Limit with the real sidecar', () => {
	test('outputs follow the operation and Over the Limit', () => {
		const names = (p: Record<string, string>) => configuredOutputs(p).map((o) => o.displayName);
		expect(names({})).toEqual(['Entered']);
		expect(names({ operation: 'enterSection', overLimit: 'busy' })).toEqual(['Entered', 'Busy']);
		expect(names({ operation: 'leaveSection' })).toEqual(['Left']);
		expect(names({ operation: 'rateLimit' })).toEqual(['Allowed']);
		expect(names({ operation: 'rateLimit', overLimit: 'busy' })).toEqual(['Allowed', 'Busy']);
		expect(names({ operation: 'debounce' })).toEqual(['Run', 'Debounced']);
	});

	test('Enter Section: places per key; an item over the limit is parked, and enters when it comes back', async () => {
		const name = unique('section');
		const [a, b, c] = [unique('a'), unique('b'), unique('c')];
		const items = await started([a, b, c]);
		const params = {
			operation: 'enterSection',
			limitName: name,
			limitKey: 'customer-1',
			maxHolders: 2,
		};
		const [entered] = await limit(params, items);
		expect(keysOf(entered).sort()).toHaveLength(2);
		expect(entered[0].json.limit).toMatchObject({ name, key: 'customer-1', outcome: 'entered' });
		const waiting = [a, b, c].find((k) => !keysOf(entered).includes(k))!;
		const [row] = await sidecar.sql<{ lease_owner: string | null }>(
			'SELECT lease_owner FROM durable_instances WHERE workflow_id = $1 AND instance_key = $2',
			[wf, waiting],
		);
		expect(row.lease_owner ?? '').toBe(''); // parked: no execution holds it
		const [left] = await limit(
			{ operation: 'leaveSection', limitName: name, limitKey: 'customer-1' },
			[entered[0]],
		);
		expect(left[0].json).toEqual(entered[0].json); // passed on as it came (a Save after it records the call)
		const back = await resumed([waiting], 'exec-2');
		expect(keysOf(back)).toEqual([waiting]);
		const [again] = await limit(params, back, 'exec-2');
		expect(keysOf(again)).toEqual([waiting]);
	});

	test('Enter Section with Leave by Busy: the item leaves by Busy, still held by its execution', async () => {
		const name = unique('busy');
		const items = await started([unique('x'), unique('y')]);
		const [entered, busy] = await limit(
			{ operation: 'enterSection', limitName: name, maxHolders: 1, overLimit: 'busy' },
			items,
		);
		expect(entered).toHaveLength(1);
		expect(busy).toHaveLength(1);
		expect(busy[0].json.limit).toMatchObject({ key: 'all', outcome: 'busy', holders: 1 });
		expect(busy[0].pairedItem).toBeDefined();
	});

	test('Rate Limit: a lone item waits in the execution for its slot; in a run of several, the rest are parked', async () => {
		const name = unique('rate');
		const params = rateLimit(name, 2, 1);
		const [first] = await limit(params, await started([unique('r')]));
		expect(first[0].json.limit).toMatchObject({ outcome: 'allowed', waitedMs: 0 });
		const t0 = Date.now();
		const [second] = await limit(params, await started([unique('r')]));
		expect(second[0].json.limit).toMatchObject({ outcome: 'allowed' });
		const waited = (second[0].json.limit as { waitedMs: number }).waitedMs;
		expect(waited).toBeGreaterThan(0);
		expect(Date.now() - t0).toBeGreaterThanOrEqual(waited);
		const several = await started([unique('s'), unique('s'), unique('s')]);
		const [allowed] = await limit({ ...params, periodAmount: 60 }, several);
		expect(allowed.length).toBeLessThanOrEqual(1);
		const parked = keysOf(several).filter((k) => !keysOf(allowed).includes(k));
		const rows = await sidecar.sql<{ instance_key: string; state: string }>(
			'SELECT instance_key, state FROM durable_limit_entries WHERE limit_name = $1',
			[name],
		);
		expect(rows.map((r) => r.instance_key).sort()).toEqual(parked.sort());
		expect(new Set(rows.map((r) => r.state))).toEqual(new Set(['reserved']));
	});

	test("Rate Limit: an order's lines in one run are one call, go on or are parked together, and come back together", async () => {
		const name = unique('lines');
		const params = rateLimit(name, 3, 3, { burst: 3, maxWaitSeconds: 0 });
		const linesOf = (items: INodeExecutionData[], n: number) =>
			items.flatMap((item) => Array.from({ length: n }, () => item));
		const [a, b] = [unique('o'), unique('o')];
		// A's two lines take two of the burst's three at once; B's two lines (in the same run) cannot both
		// go yet, so neither goes (one of them used to, while B was parked).
		const [allowed] = await limit(params, linesOf(await started([a, b]), 2));
		expect(keysOf(allowed)).toEqual([a, a]);
		expect(new Set(allowed.map((i) => (i.json.limit as { slotAt: string }).slotAt)).size).toBe(1);
		const rows = await sidecar.sql<{ instance_key: string }>(
			'SELECT instance_key FROM durable_limit_entries WHERE limit_name = $1',
			[name],
		);
		expect(rows.map((r) => r.instance_key)).toEqual([b]); // one reservation, B parked as a whole
		const back = await resumed([b], 'exec-2');
		expect(keysOf(back)).toEqual([b]);
		const [again] = await limit(params, linesOf(back, 2), 'exec-2');
		expect(keysOf(again)).toEqual([b, b]);
		expect(again[0].json.limit).toMatchObject({ outcome: 'allowed' });
	});

	test('Rate Limit: more lines of one order than the Burst fail their instance with the way out, not a livelock', async () => {
		const name = unique('over');
		const order = unique('o');
		const items = await started([order]);
		const params = { operation: 'rateLimit', limitName: name, maxItems: 5, periodAmount: 1 };
		await expect(limit(params, [...items, ...items])).rejects.toThrow(
			`2 items of instance '${order}' reached the Rate Limit`,
		);
		const [row] = await sidecar.sql<{ status: string; error_message: string }>(
			'SELECT status, error_message FROM durable_instances WHERE workflow_id = $1 AND instance_key = $2',
			[wf, order],
		);
		expect(row.status).toBe('failed');
		expect(row.error_message).toContain('Set the option Burst to at least');
		const entries = await sidecar.sql('SELECT 1 FROM durable_limit_entries WHERE limit_name = $1', [
			name,
		]);
		expect(entries).toHaveLength(0);
	});

	test('Debounce keep First: the first item waits for the burst to end; later ones leave by Debounced at once', async () => {
		const name = unique('deb');
		const params = {
			operation: 'debounce',
			limitName: name,
			limitKey: 'chat-1',
			quietAmount: 0.3,
			keep: 'first',
		};
		const [first, second] = [unique('m'), unique('m')];
		const [run1, debounced1] = await limit(params, await started([first]));
		expect([run1, debounced1]).toEqual([[], []]);
		const [run2, debounced2] = await limit(params, await started([second]));
		expect(run2).toEqual([]);
		expect(keysOf(debounced2)).toEqual([second]);
		expect(debounced2[0].json.limit).toMatchObject({ outcome: 'debounced' });
		const back = await resumed([first], 'exec-3');
		const [run3] = await limit(params, back, 'exec-3');
		expect(keysOf(run3)).toEqual([first]);
	});

	test('clear errors: no Limit Name; an item without an instance; Continue On Fail leaves by the output that runs nothing', async () => {
		const unnamed = await started([unique('e')]);
		await expect(limit({ operation: 'enterSection', limitName: '' }, unnamed)).rejects.toThrow(
			'Limit Name is empty',
		);
		expect(await statusOf(unnamed)).toEqual([
			{ status: 'failed', error: expect.stringContaining('Limit Name is empty') },
		]);
		await expect(
			limit({ operation: 'enterSection', limitName: 'x' }, [{ json: { orderId: 'loose' } }]),
		).rejects.toThrow('Resume Point');
		// Under Continue On Fail the error is an item for the workflow to handle: the instance goes on.
		const items = await started([unique('e')]);
		const [run, debounced] = await limit(
			{ operation: 'debounce', limitName: 'x', quietAmount: 0 },
			items,
			'exec-1',
			true,
		);
		expect(run).toEqual([]);
		expect(debounced[0].json.error).toContain('Quiet For');
		const [, busy] = await limit(
			{ operation: 'enterSection', limitName: 'x', maxHolders: 1, overLimit: 'busy' },
			items,
			'exec-other',
			true,
		);
		expect(String(busy[0].json.error)).toContain('does not hold the lease');
		expect(await statusOf(items)).toEqual([{ status: 'running', error: '' }]);
	});

	test('a setup error no resume can pass fails the instance for good with it (not resumed until its retry policy gives up)', async () => {
		const items = await started([unique('s1'), unique('s2')]);
		await expect(
			limit({ operation: 'rateLimit', limitName: unique('s'), maxItems: 'abc' }, items),
		).rejects.toThrow('Most Items must be a whole number from 1 to 1,000,000, got "abc"');
		const failed = await statusOf(items);
		expect(failed).toHaveLength(2);
		for (const row of failed) {
			expect(row.status).toBe('failed');
			expect(row.error).toContain('Durable Limit: Most Items must be a whole number');
			expect(row.error).toContain('The instance is failed, not retried');
		}
	});

	test('a Key that is an object or a list is refused, never counted as "[object Object]"; numbers are checked under their own names', async () => {
		const items = await started([unique('k1'), unique('k2')]);
		const keyed = (key: unknown) =>
			limit(
				{ operation: 'enterSection', limitName: unique('obj'), limitKey: () => key, maxHolders: 5 },
				items,
			);
		await expect(keyed({ id: 7 })).rejects.toThrow('Key is an object, not a key');
		expect((await statusOf(items)).map((row) => row.status)).toEqual(['failed', 'failed']);
		// Each refusal comes before any call (the instances are failed by the first one).
		await expect(keyed([1, 2])).rejects.toThrow('Key is a list, not a key');
		await expect(keyed('[object Object]')).rejects.toThrow('an object was turned into text');
		await expect(keyed(true)).rejects.toThrow('Key is true, not a key');
		// A number is its text: 12 and "12" are one key.
		const fresh = await started([unique('k3'), unique('k4')]);
		const [allowed] = await limit(
			{ operation: 'enterSection', limitName: unique('obj'), limitKey: () => 12, maxHolders: 5 },
			fresh,
		);
		expect(allowed.map((item) => (item.json.limit as { key: string }).key)).toEqual(['12', '12']);
		const rate = (maxItems: ParamValue) =>
			limit({ operation: 'rateLimit', limitName: unique('n'), maxItems }, items);
		await expect(rate(0)).rejects.toThrow(
			'Most Items must be a whole number from 1 to 1,000,000, got 0',
		);
		await expect(rate(-3)).rejects.toThrow('Most Items must be a whole number');
		await expect(rate('abc')).rejects.toThrow(
			'Most Items must be a whole number from 1 to 1,000,000, got "abc"',
		);
		await expect(rate(2.5)).rejects.toThrow('got 2.5');
		await expect(
			limit({ operation: 'enterSection', limitName: unique('m'), maxHolders: 0 }, items),
		).rejects.toThrow('Most at Once must be a whole number from 1 to 10,000, got 0');
	});
});
