/**
 * Enter Section with Rate Limit Too, against the real sidecar: a place and a rate slot in one node and one
 * AcquireSlot call, where Enter Section and Rate Limit took two.
 */
import { configuredOutputs } from '../nodes/DurableLimit/DurableLimit.node';
import type { ParamValue } from './support/n8n';
import { keysOf, limit, resumed, started, unique, wf } from './support/limits';
import { sidecar, useSidecar } from './support/waits-and-signals';

useSidecar();

const section = (
	limitName: string,
	maxHolders: number,
	maxItems: number,
	seconds: number,
	options: Record<string, number> = {},
): Record<string, ParamValue> => ({
	operation: 'enterSection',
	limitName,
	limitKey: 'customer-1',
	maxHolders,
	rateToo: true,
	maxItems,
	periodAmount: seconds,
	periodUnit: 'seconds',
	options,
});

/** The limit's entries, by kind: concurrency places and rate reservations. */
const entries = async (name: string) =>
	await sidecar.sql<{ instance_key: string; kind: string; state: string }>(
		'SELECT e.instance_key, e.kind, e.state FROM durable_limit_entries e WHERE e.limit_name = $1 ORDER BY e.instance_key',
		[name],
	);

describe('Enter Section with Rate Limit Too', () => {
	test('one output, Entered, as without the rate', () => {
		const names = configuredOutputs({ operation: 'enterSection', rateToo: 'true' } as never);
		expect(names.map((o) => o.displayName)).toEqual(['Entered']);
	});

	test('a lone item enters and waits in the execution for its slot, one sidecar call for both', async () => {
		const name = unique('sr');
		const params = section(name, 5, 2, 1);
		const [first] = await limit(params, await started([unique('a')]));
		expect(first[0].json.limit).toMatchObject({
			name,
			key: 'customer-1',
			outcome: 'entered',
			holders: 1,
			waitedMs: 0,
		});
		const t0 = Date.now();
		const [second] = await limit(params, await started([unique('b')]));
		const got = second[0].json.limit as { waitedMs: number; slotAt: string; holders: number };
		expect(got).toMatchObject({ outcome: 'entered', holders: 2 });
		expect(got.waitedMs).toBeGreaterThan(0);
		expect(got.waitedMs).toBeLessThanOrEqual(500);
		expect(Date.now() - t0).toBeGreaterThanOrEqual(got.waitedMs);
		const firstSlot = Date.parse((first[0].json.limit as { slotAt: string }).slotAt);
		expect(Date.parse(got.slotAt) - firstSlot).toBe(500); // 2 a second: 500 ms apart
		const calls = await sidecar.sql<{ n: string }>(
			"SELECT count(*) AS n FROM durable_limits WHERE limit_name = $1 AND kind = 'rate'",
			[name],
		);
		expect(Number(calls[0].n)).toBe(1); // the rate of the same name and key
	});

	test('in a run of several, the items past their slot are parked with it reserved, and come back to spend it', async () => {
		const name = unique('sr');
		const params = section(name, 10, 1, 2, { maxWaitSeconds: 0 });
		const several = await started([unique('s'), unique('s'), unique('s')]);
		const [entered] = await limit(params, several);
		expect(entered).toHaveLength(1);
		const parked = keysOf(several).filter((k) => !keysOf(entered).includes(k));
		const reserved = await sidecar.sql<{ instance_key: string; at: Date }>(
			"SELECT instance_key, at FROM durable_limit_entries WHERE limit_name = $1 AND kind = 'rate' ORDER BY at",
			[name],
		);
		expect(reserved.map((r) => r.instance_key).sort()).toEqual(parked.sort());
		// The next slot is 2 s after the first: its item is handed out then, takes a place again and
		// spends its reservation.
		const next = reserved[0].instance_key;
		const back = await resumed([next], 'exec-2');
		expect(keysOf(back)).toEqual([next]);
		const [again] = await limit(params, back, 'exec-2');
		expect(keysOf(again)).toEqual([next]);
		const got = again[0].json.limit as { outcome: string; slotAt: string };
		expect(got.outcome).toBe('entered');
		expect(Date.parse(got.slotAt)).toBe(new Date(reserved[0].at).getTime());
		const left = await sidecar.sql<{ instance_key: string }>(
			"SELECT instance_key FROM durable_limit_entries WHERE limit_name = $1 AND kind = 'rate'",
			[name],
		);
		expect(left.map((r) => r.instance_key)).toEqual([reserved[1].instance_key]); // spent once
	});

	test("an order's lines in one run fail the instance with the way out, and take no place", async () => {
		const name = unique('sr');
		const order = unique('o');
		const items = await started([order]);
		await expect(limit(section(name, 2, 5, 1), [...items, ...items])).rejects.toThrow(
			`2 items of instance '${order}' reached the section '${name}' [customer-1] with Rate Limit Too`,
		);
		const [row] = await sidecar.sql<{ status: string; error_message: string }>(
			'SELECT status, error_message FROM durable_instances WHERE workflow_id = $1 AND instance_key = $2',
			[wf, order],
		);
		expect(row.status).toBe('failed');
		expect(row.error_message).toContain('place a Rate Limit with the option Burst');
		expect(await entries(name)).toEqual([]);
	});

	test('with Leave by Busy it is refused, never ignored', async () => {
		const name = unique('sr');
		const items = await started([unique('o')]);
		await expect(limit({ ...section(name, 2, 5, 1), overLimit: 'busy' }, items)).rejects.toThrow(
			'Rate Limit Too needs Over the Limit: Wait',
		);
		expect(await entries(name)).toEqual([]);
	});

	test('a bad rate is named by its field, and nothing is taken', async () => {
		const name = unique('sr');
		const items = await started([unique('o')]);
		await expect(limit(section(name, 2, 0, 1), items)).rejects.toThrow(
			'Most Items must be a whole number from 1 to 1,000,000',
		);
		const again = await started([unique('o')]);
		await expect(limit(section(name, 2, 5, 0), again)).rejects.toThrow(
			'Per must be from 1 ms to one day, got 0 seconds',
		);
		expect(await entries(name)).toEqual([]);
	});
});
