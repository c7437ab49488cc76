/**
 * Claim ahead (shared/claim-ahead.ts): a Save, or the Resume Point, feeding an
 * Idempotency Guard in its default form claims the Guard's key in its own
 * call; the Guard then routes without a Claim call. Against the real sidecar.
 */
import type { IDataObject, IExecuteFunctions, INodeExecutionData } from 'n8n-workflow';

import { DurableCheckpoint } from '../nodes/DurableCheckpoint/DurableCheckpoint.node';
import {
	IdempotencyGuard,
	OUTPUT_ALREADY_DONE,
	OUTPUT_FIRST_RUN,
	OUTPUT_IN_PROGRESS,
} from '../nodes/IdempotencyGuard/IdempotencyGuard.node';
import { OUTPUT_START, ResumePoint } from '../nodes/ResumePoint/ResumePoint.node';
import {
	AHEAD_MAX,
	aheadAnswersWaiting,
	aheadGuardOf,
	findAheadGuard,
	keepAheadAnswer,
	takeAheadAnswer,
} from '../shared/claim-ahead';
import {
	ClaimOutcome,
	closeAllSidecarClients,
	getSidecarClient,
	KeyStatus,
} from '../shared/transport';
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
const SAVE: UpstreamNode = {
	name: 'Save charge',
	type: 'n8n-nodes-durable.durableCheckpoint',
	typeVersion: 2,
};
const HTTP: UpstreamNode = { name: 'Charge card', type: 'n8n-nodes-base.httpRequest' };
const SHIP: UpstreamNode = {
	name: 'Claim shipping',
	type: 'n8n-nodes-durable.idempotencyGuard',
	typeVersion: 2,
	parameters: {
		operation: 'claim',
		scope: 'shipping',
		key: '',
		fingerprintFrom: 'instance',
		options: {},
	},
};

beforeAll(async () => {
	// An instance lease unlike the keys' default, so a claim that took the wrong lease shows.
	sidecar = await TestSidecar.start({
		env: { DURABLE_LEASE_SECONDS: '90', DURABLE_IDEMPOTENCY_LEASE_SECONDS: '20' },
	});
});

afterAll(async () => {
	closeAllSidecarClients();
	await sidecar?.stop();
});

interface Run {
	workflowId: string;
	executionId: string;
}

async function start(run: Run, orderIds: string[], downstream: UpstreamNode[] = []) {
	return await resumePoint.execute.call(
		executeContext({
			items: orderIds.map((orderId) => ({ body: { orderId } })),
			params: {
				instanceKey: (_i: number, item: INodeExecutionData) =>
					(item.json.body as IDataObject).orderId,
			},
			credentials: sidecar.credentials(),
			...run,
			nodeName: RP.name,
			typeVersion: 2,
			description: resumePoint.description,
			downstream,
		}),
	);
}

async function save(
	run: Run,
	items: INodeExecutionData[],
	upstream: UpstreamNode[],
	downstream: UpstreamNode[],
	params: Record<string, ParamValue> = { stepName: 'charge' },
): Promise<INodeExecutionData[]> {
	const [out] = await checkpoint.execute.call(
		executeContext({
			items,
			params,
			credentials: sidecar.credentials(),
			...run,
			nodeName: SAVE.name,
			typeVersion: 2,
			description: checkpoint.description,
			upstream,
			downstream,
		}),
	);
	return out;
}

async function claim(
	run: Run,
	items: INodeExecutionData[],
	upstream: UpstreamNode[],
	nodeName = SHIP.name,
): Promise<INodeExecutionData[][]> {
	return await guard.execute.call(
		executeContext({
			items,
			params: { scope: 'shipping' },
			credentials: sidecar.credentials(),
			...run,
			nodeName,
			typeVersion: 2,
			description: guard.description,
			upstream,
		}),
	);
}

function durable(item: INodeExecutionData): IDataObject {
	return item.json.durable as IDataObject;
}

/** Resume Point (no claim ahead) → Save charge: the Save's output items and the upstream path to them. */
async function savedOrders(run: Run, orderIds: string[], downstream: UpstreamNode[] = [SHIP]) {
	const started = await start(run, orderIds);
	const rp = { ...RP, output: started[OUTPUT_START] };
	const responses = started[OUTPUT_START].map((_, i) => ({
		json: { chargeId: `ch-${i}` },
		pairedItem: { item: i },
	}));
	const saved = await save(run, responses, [HTTP, rp], downstream);
	return { saved, path: [{ ...SAVE, output: saved }, HTTP, rp] };
}

describe('which Guard is claimed ahead', () => {
	const base = {
		name: 'G',
		type: 'n8n-nodes-durable.idempotencyGuard',
		typeVersion: 2,
		disabled: false,
	};
	test('the default form is: plain scope, empty key, instance or no fingerprint, plain options', () => {
		expect(aheadGuardOf({ ...base, parameters: { scope: ' shipping ' } })).toEqual({
			guard: 'G',
			scope: 'shipping',
			fingerprintFrom: 'instance',
			leaseSeconds: 0,
			ttlSeconds: 0,
		});
		expect(
			aheadGuardOf({
				...base,
				parameters: {
					scope: 's',
					fingerprintFrom: 'none',
					options: { leaseSeconds: 30, ttlSeconds: 600 },
				},
			}),
		).toMatchObject({ fingerprintFrom: 'none', leaseSeconds: 30, ttlSeconds: 600 });
	});
	test.each([
		['an expression scope', { scope: '={{ $json.kind }}' }],
		['an empty scope', { scope: '  ' }],
		['a key of its own', { scope: 's', key: 'line-1' }],
		['a fingerprint from fields', { scope: 's', fingerprintFrom: 'fields' }],
		['a lease from an expression', { scope: 's', options: { leaseSeconds: '={{ 5 }}' } }],
		['Record Result', { scope: 's', operation: 'recordResult' }],
	])('not with %s', (_what, parameters) => {
		expect(aheadGuardOf({ ...base, parameters })).toBeUndefined();
	});
	test('not a version-1 Guard, a disabled one, or another node', () => {
		expect(aheadGuardOf({ ...base, typeVersion: 1, parameters: { scope: 's' } })).toBeUndefined();
		expect(aheadGuardOf({ ...base, disabled: true, parameters: { scope: 's' } })).toBeUndefined();
		expect(
			aheadGuardOf({ ...base, type: 'n8n-nodes-base.noOp', parameters: { scope: 's' } }),
		).toBeUndefined();
	});
});

describe('where the Guard may take its answer from', () => {
	const guardNode = {
		name: 'Claim shipping',
		type: 'n8n-nodes-durable.idempotencyGuard',
		typeVersion: 2,
		disabled: false,
		parameters: { scope: 'shipping' },
	};
	/** A Save whose ancestors are `mine`; the Guard's direct inputs are `guardInputs`. Counts full ancestor walks. */
	const ctxFor = (guardInputs: string[], mine: string[]) => {
		const full: string[] = [];
		const ctx = {
			getNode: () => ({ name: 'Save', type: 'x.durableCheckpoint', parameters: {} }),
			getChildNodes: () => [guardNode],
			getParentNodes: (name: string, opts?: { depth?: number }) => {
				const named = (names: string[]) =>
					names.map((n) => ({ name: n, type: 'x', typeVersion: 1, disabled: false }));
				if (opts?.depth === 1) return named(name === guardNode.name ? guardInputs : []);
				full.push(name);
				return named(name === 'Save' ? mine : [...guardInputs, ...mine]);
			},
		} as unknown as IExecuteFunctions;
		return { ctx, full };
	};

	test("this node as the Guard's only input: found without walking either ancestry", () => {
		const t = ctxFor(['Save'], ['Charge', 'Resume Point', 'Webhook']);
		expect(findAheadGuard(t.ctx, { onlyChild: false })).toMatchObject({ guard: 'Claim shipping' });
		expect(t.full).toEqual([]);
	});

	test('another input of the Guard: found only when it lies above this node', () => {
		const above = ctxFor(['Save', 'Resume Point'], ['Charge', 'Resume Point', 'Webhook']);
		expect(findAheadGuard(above.ctx, { onlyChild: false })).toMatchObject({
			guard: 'Claim shipping',
		});
		expect(above.full).toEqual(['Save', 'Claim shipping']);
		const elsewhere = ctxFor(['Save', 'Other trigger'], ['Charge', 'Resume Point', 'Webhook']);
		expect(findAheadGuard(elsewhere.ctx, { onlyChild: false })).toBeUndefined();
	});
});

describe('answers waiting for their Guard', () => {
	const target = {
		guard: 'G',
		scope: 's',
		fingerprintFrom: 'instance' as const,
		leaseSeconds: 0,
		ttlSeconds: 0,
	};
	const answer = (key: string) => ({
		outcome: ClaimOutcome.CLAIM_OUTCOME_ACQUIRED,
		key: {
			namespace: 'n',
			scope: 's',
			key,
			status: KeyStatus.KEY_STATUS_IN_PROGRESS,
			fingerprint: '',
			attempt: 1,
			holder: 'bulk',
			leaseExpiresAt: undefined,
			resultJson: Buffer.alloc(0),
			errorMessage: '',
			expiresAt: undefined,
			createdAt: undefined,
			updatedAt: undefined,
			derivedKey: 'd',
		},
	});
	test('are bounded: the oldest go first, so Guards that never ran cannot fill the memory', () => {
		for (let i = 0; i <= AHEAD_MAX; i++) keepAheadAnswer(target, 'bulk', answer(`k${i}`));
		expect(aheadAnswersWaiting()).toBeLessThanOrEqual(AHEAD_MAX);
		expect(takeAheadAnswer('G', 'bulk', 's', 'k0')).toBeUndefined();
		expect(takeAheadAnswer('G', 'bulk', 's', `k${AHEAD_MAX}`)).toMatchObject({
			key: { key: `k${AHEAD_MAX}` },
		});
		for (let i = 0; i <= AHEAD_MAX; i++) takeAheadAnswer('G', 'bulk', 's', `k${i}`);
	});
});

describe('Save → Guard', () => {
	test('the Save claims the next key in its call; the Guard routes First Run without a Claim call', async () => {
		const run = { workflowId: 'wf-ahead-save', executionId: 'e1' };
		const client = getSidecarClient(sidecar.connection());
		const saveSpy = jest.spyOn(client, 'saveCheckpoints');
		const claimSpy = jest.spyOn(client, 'claim');
		try {
			const { saved, path } = await savedOrders(run, ['o-1', 'o-2']);
			expect(saveSpy).toHaveBeenCalledTimes(1);
			expect(saveSpy.mock.calls[0][0].items?.map((i) => i?.claimNext?.key)).toEqual(['o-1', 'o-2']);
			// The answers wait in this process, not on the items (n8n's execution record stays small).
			expect(durable(saved[0]).claimAhead).toBeUndefined();
			const waiting = aheadAnswersWaiting();
			const out = await claim(run, saved, path);
			expect(claimSpy).not.toHaveBeenCalled();
			expect(aheadAnswersWaiting()).toBe(waiting - 2);
			expect(out[OUTPUT_FIRST_RUN]).toHaveLength(2);
			const first = out[OUTPUT_FIRST_RUN][0];
			expect(first.json.idempotency).toEqual({
				scope: 'shipping',
				key: 'o-1',
				attempt: 1,
				derivedKey: expect.any(String),
				outcome: 'acquired',
				claimedAhead: true,
			});
			expect(durable(first).instanceKey).toBe('o-1');
		} finally {
			saveSpy.mockRestore();
			claimSpy.mockRestore();
		}
		// The key is held by this execution, as the Guard's own claim would hold it.
		const rows = await sidecar.sql<{ status: string; holder: string }>(
			"SELECT status, holder FROM durable_idempotency_keys WHERE scope = 'shipping' AND key = 'o-1'",
		);
		expect(rows).toEqual([{ status: 'in_progress', holder: 'e1' }]);
	});

	test('a key done before comes back as Done Before with its result, without a Claim call', async () => {
		const run = { workflowId: 'wf-ahead-done', executionId: 'e1' };
		const client = getSidecarClient(sidecar.connection());
		const payload = Buffer.from(JSON.stringify({ instanceKey: 'o-d', workflowId: run.workflowId }));
		const first = await client.claim({
			items: [{ scope: 'shipping', key: 'o-d', holder: 'e0', payloadJson: payload }],
		});
		await client.completeKey({
			scope: 'shipping',
			key: 'o-d',
			attempt: first.results[0].key!.attempt,
			resultJson: Buffer.from('{"label":"L-1"}'),
		});
		const { saved, path } = await savedOrders(run, ['o-d']);
		const claimSpy = jest.spyOn(client, 'claim');
		try {
			const out = await claim(run, saved, path);
			expect(claimSpy).not.toHaveBeenCalled();
			expect(out[OUTPUT_ALREADY_DONE]).toHaveLength(1);
			expect(out[OUTPUT_ALREADY_DONE][0].json.idempotency).toMatchObject({
				outcome: 'duplicate',
				result: { label: 'L-1' },
			});
		} finally {
			claimSpy.mockRestore();
		}
	});

	test('an answer is for its Guard and execution only, and is taken once: otherwise the Guard claims', async () => {
		const run = { workflowId: 'wf-ahead-other', executionId: 'e1' };
		const client = getSidecarClient(sidecar.connection());
		const { saved, path } = await savedOrders(run, ['o-x']);
		const claimSpy = jest.spyOn(client, 'claim');
		try {
			// Another execution: the answer is e1's, so e2 claims (and finds the key busy).
			let out = await claim({ ...run, executionId: 'e2' }, saved, path);
			expect(claimSpy).toHaveBeenCalledTimes(1);
			expect(out[OUTPUT_IN_PROGRESS]).toHaveLength(1);
			// Another Guard's name: it claims itself (the same holder: a retry, the same attempt).
			out = await claim(run, saved, path, 'Claim something else');
			expect(claimSpy).toHaveBeenCalledTimes(2);
			expect(out[OUTPUT_FIRST_RUN][0].json.idempotency).toMatchObject({ key: 'o-x', attempt: 1 });
			expect(
				(out[OUTPUT_FIRST_RUN][0].json.idempotency as IDataObject).claimedAhead,
			).toBeUndefined();
			// Its own Guard takes it without a call; a second run of that Guard claims (a retry, same attempt).
			out = await claim(run, saved, path);
			expect(claimSpy).toHaveBeenCalledTimes(2);
			out = await claim(run, saved, path);
			expect(claimSpy).toHaveBeenCalledTimes(3);
			expect(out[OUTPUT_FIRST_RUN][0].json.idempotency).toMatchObject({ key: 'o-x', attempt: 1 });
		} finally {
			claimSpy.mockRestore();
		}
	});

	test('nothing is claimed ahead by a Save that completes the instance, or for a Guard not in the default form', async () => {
		const run = { workflowId: 'wf-ahead-none', executionId: 'e1' };
		const client = getSidecarClient(sidecar.connection());
		const saveSpy = jest.spyOn(client, 'saveCheckpoints');
		try {
			const started = await start(run, ['o-n1', 'o-n2']);
			const rp = { ...RP, output: started[OUTPUT_START] };
			const [one, two] = started[OUTPUT_START].map((item, i) => ({
				json: { ok: i },
				pairedItem: { item: i },
			}));
			await save(run, [one], [HTTP, rp], [SHIP], {
				stepName: 'charge',
				options: { completeInstance: true },
			});
			const keyed = { ...SHIP, parameters: { ...SHIP.parameters, key: '={{ $json.line }}' } };
			await save(run, [{ ...two, pairedItem: { item: 1 } }], [HTTP, rp], [keyed]);
			for (const call of saveSpy.mock.calls) expect(call[0].items?.[0]?.claimNext).toBeUndefined();
		} finally {
			saveSpy.mockRestore();
		}
	});
});

describe('Resume Point → Guard', () => {
	test('a new instance claims the only Guard it feeds; a resumed or busy one does not', async () => {
		const run = { workflowId: 'wf-ahead-start', executionId: 'e1' };
		const client = getSidecarClient(sidecar.connection());
		const started = await start(run, ['o-s'], [SHIP]);
		expect(started[OUTPUT_START]).toHaveLength(1);
		const claimSpy = jest.spyOn(client, 'claim');
		try {
			const out = await claim(run, started[OUTPUT_START], [
				{ ...RP, output: started[OUTPUT_START] },
			]);
			expect(claimSpy).not.toHaveBeenCalled();
			expect(out[OUTPUT_FIRST_RUN][0].json.idempotency).toMatchObject({
				key: 'o-s',
				attempt: 1,
				claimedAhead: true,
			});
		} finally {
			claimSpy.mockRestore();
		}
		// The key's lease is the instance's (90 s here), as the Guard's own claim would take it.
		const [row] = await sidecar.sql<{ left: string }>(
			"SELECT EXTRACT(EPOCH FROM lease_expires_at - now()) AS left FROM durable_idempotency_keys WHERE scope = 'shipping' AND key = 'o-s'",
		);
		expect(Number(row.left)).toBeGreaterThan(60);
		// Another delivery while e1 holds the lease: busy, nothing claimed ahead.
		const again = await start({ ...run, executionId: 'e2' }, ['o-s'], [SHIP]);
		expect(again[OUTPUT_START]).toHaveLength(0);
	});

	test('a Resume Point feeding other nodes besides the Guard claims nothing ahead', async () => {
		const run = { workflowId: 'wf-ahead-start2', executionId: 'e1' };
		const client = getSidecarClient(sidecar.connection());
		const spy = jest.spyOn(client, 'startOrResume');
		try {
			const started = await start(
				run,
				['o-t'],
				[SHIP, { name: 'Respond', type: 'n8n-nodes-base.respondToWebhook' }],
			);
			expect(spy.mock.calls[0][0].claimOnStart).toBeUndefined();
			expect(started[OUTPUT_START]).toHaveLength(1);
		} finally {
			spy.mockRestore();
		}
	});
});
