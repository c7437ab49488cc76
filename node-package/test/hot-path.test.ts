/**
 * The nodes' hot path inside n8n (issue 20): `{{ $json.… }}` parameters read
 * from the item without n8n's expression engine (same value, n8n decides
 * everything else), and the credential decrypted once per workflow and
 * credential for a few seconds.
 */
import type { IExecuteFunctions, INode } from 'n8n-workflow';

import {
	cachedCredentials,
	clearCredentialCache,
	CREDENTIAL_TTL_MS,
} from '../shared/credential-cache';
import {
	clearGuardRuns,
	jsonPathOf,
	noteGuardRun,
	parameterReader,
	scalarAt,
	shareUnchanged,
	Upstream,
} from '../shared/upstream';

describe('jsonPathOf', () => {
	it.each([
		['={{ $json.body.orderId }}', ['body', 'orderId']],
		['={{$json.orderId}}', ['orderId']],
		['={{ $json["order id"].x }}', ['order id', 'x']],
		["={{ $json['a'][0] }}", ['a', '0']],
	])('%s is a path', (expression, path) => {
		expect(jsonPathOf(expression)).toEqual(path);
	});

	it.each([
		'={{ $json.body.orderId }}-charge',
		'=order-{{ $json.id }}',
		'={{ $json.id.toUpperCase() }}',
		"={{ $('Webhook').item.json.id }}",
		'={{ $json }}',
		'={{ $json.a || $json.b }}',
		'={{ $json[$json.k] }}',
		'$json.id',
	])('%s is not', (expression) => {
		expect(jsonPathOf(expression)).toBeUndefined();
	});
});

describe('scalarAt', () => {
	const json = { body: { orderId: 'o-1', n: 7, ok: false, nested: { a: 1 }, list: ['x'] } };
	it('reads strings, numbers and booleans', () => {
		expect(scalarAt(json, ['body', 'orderId'])).toBe('o-1');
		expect(scalarAt(json, ['body', 'n'])).toBe(7);
		expect(scalarAt(json, ['body', 'ok'])).toBe(false);
		expect(scalarAt(json, ['body', 'list', '0'])).toBe('x');
	});
	it('leaves missing fields, objects and inherited names to n8n', () => {
		expect(scalarAt(json, ['body', 'missing'])).toBeUndefined();
		expect(scalarAt(json, ['body', 'nested'])).toBeUndefined();
		expect(scalarAt(json, ['nope', 'x'])).toBeUndefined();
		expect(scalarAt(json, ['body', 'orderId', 'length'])).toBeUndefined();
		expect(scalarAt(json, ['body', 'toString'])).toBeUndefined();
	});
});

function context(
	parameters: Record<string, unknown>,
	items: Array<Record<string, unknown>>,
	extra: Partial<IExecuteFunctions> = {},
): { ctx: IExecuteFunctions; evaluated: number[] } {
	const evaluated: number[] = [];
	const ctx = {
		getNode: () =>
			({ name: 'Resume Point', type: 'x.resumePoint', parameters }) as unknown as INode,
		getInputData: () => items.map((json) => ({ json })),
		getNodeParameter: (_name: string, i: number) => {
			evaluated.push(i);
			return `n8n:${i}`;
		},
		getWorkflow: () => ({ id: 'wf-1' }),
		...extra,
	} as unknown as IExecuteFunctions;
	return { ctx, evaluated };
}

describe('parameterReader with a $json path', () => {
	it('reads the item and asks n8n only where the path gives no scalar', () => {
		const { ctx, evaluated } = context({ instanceKey: '={{ $json.body.orderId }}' }, [
			{ body: { orderId: 'a' } },
			{ body: { orderId: 42 } },
			{ body: {} },
		]);
		const read = parameterReader<string>(ctx, 'instanceKey', '');
		expect([read(0), read(1), read(2)]).toEqual(['a', 42, 'n8n:2']);
		expect(evaluated).toEqual([2]);
	});

	it('leaves other expressions to n8n, per item', () => {
		const { ctx, evaluated } = context({ key: '={{ $json.id }}-x' }, [{ id: 'a' }, { id: 'b' }]);
		const read = parameterReader<string>(ctx, 'key', '');
		expect([read(0), read(1)]).toEqual(['n8n:0', 'n8n:1']);
		expect(evaluated).toEqual([0, 1]);
	});
});

describe('cachedCredentials', () => {
	beforeEach(() => clearCredentialCache());

	const withCredential = (id: string | undefined, workflowId = 'wf-1') => {
		let calls = 0;
		const node = {
			name: 'Claim',
			type: 'x.idempotencyGuard',
			parameters: {},
			credentials: id ? { durableSidecarApi: { id, name: 'c' } } : undefined,
		};
		const ctx = {
			getNode: () => node,
			getWorkflow: () => ({ id: workflowId }),
			getCredentials: async () => {
				calls++;
				return { token: `t${calls}` };
			},
		} as unknown as IExecuteFunctions;
		return { ctx, calls: () => calls };
	};

	it('decrypts once per workflow and credential within the TTL', async () => {
		const a = withCredential('cred-1');
		expect(await cachedCredentials(a.ctx, 'durableSidecarApi')).toEqual({ token: 't1' });
		expect(await cachedCredentials(a.ctx, 'durableSidecarApi')).toEqual({ token: 't1' });
		expect(a.calls()).toBe(1);
		const other = withCredential('cred-1', 'wf-2');
		await cachedCredentials(other.ctx, 'durableSidecarApi');
		expect(other.calls()).toBe(1);
	});

	it('asks n8n again after the TTL', async () => {
		const now = jest.spyOn(Date, 'now');
		try {
			now.mockReturnValue(1_000_000);
			const a = withCredential('cred-2');
			await cachedCredentials(a.ctx, 'durableSidecarApi');
			now.mockReturnValue(1_000_000 + CREDENTIAL_TTL_MS + 1);
			expect(await cachedCredentials(a.ctx, 'durableSidecarApi')).toEqual({ token: 't2' });
		} finally {
			now.mockRestore();
		}
	});

	it('does not keep a failure, and does not cache a node without a credential id', async () => {
		let fail = true;
		const ctx = {
			getNode: () => ({ type: 't', credentials: { durableSidecarApi: { id: 'c3', name: 'c' } } }),
			getWorkflow: () => ({ id: 'wf-1' }),
			getCredentials: async () => {
				if (fail) throw new Error('no access');
				return { token: 'ok' };
			},
		} as unknown as IExecuteFunctions;
		await expect(cachedCredentials(ctx, 'durableSidecarApi')).rejects.toThrow('no access');
		fail = false;
		expect(await cachedCredentials(ctx, 'durableSidecarApi')).toEqual({ token: 'ok' });
		const bare = withCredential(undefined);
		await cachedCredentials(bare.ctx, 'durableSidecarApi');
		await cachedCredentials(bare.ctx, 'durableSidecarApi');
		expect(bare.calls()).toBe(2);
	});
});

describe('Upstream paired items', () => {
	const claimItem = {
		json: { idempotency: { scope: 'payment', key: 'o-1', attempt: 1, outcome: 'acquired' } },
	};

	const upstreamContext = (withWalk: boolean, pairedItem: unknown) => {
		const walked: Array<[string, unknown, unknown]> = [];
		let viaNode = 0;
		const ctx = {
			getNode: () => ({ name: 'Save', type: 'x.durableCheckpoint', parameters: {} }),
			// No Guard run is noted for this execution: the Save walks the paired items.
			getExecutionId: () => 'exec-walk',
			getParentNodes: () => [
				{ name: 'Claim payment', type: 'x.idempotencyGuard', parameters: { operation: 'claim' } },
			],
			getInputData: () => [{ json: { id: 'ch_1' }, pairedItem }],
			getInputSourceData: (input: number) =>
				input === 0
					? { previousNode: 'Charge card', previousNodeOutput: 0, previousNodeRun: 0 }
					: undefined,
			getWorkflowDataProxy: () => ({
				...(withWalk
					? {
							$getPairedItem: (name: string, source: unknown, paired: unknown) => {
								walked.push([name, source, paired]);
								return claimItem;
							},
						}
					: {}),
				$: () => {
					viaNode++;
					return { item: claimItem };
				},
			}),
		} as unknown as IExecuteFunctions;
		return { ctx, walked, viaNode: () => viaNode };
	};

	it('walks the paired items with $getPairedItem, not through $(name).item', () => {
		const t = upstreamContext(true, { item: 0 });
		const claim = new Upstream(t.ctx).claim(0, { json: { id: 'ch_1' } });
		expect(claim).toMatchObject({ scope: 'payment', key: 'o-1', attempt: 1, outcome: 'acquired' });
		expect(t.walked).toEqual([
			[
				'Claim payment',
				{ previousNode: 'Charge card', previousNodeOutput: 0, previousNodeRun: 0 },
				{ item: 0 },
			],
		]);
		expect(t.viaNode()).toBe(0);
	});

	it('uses $(name).item where $getPairedItem is missing or the pairing is not one item', () => {
		for (const [withWalk, paired] of [
			[false, { item: 0 }],
			[true, [{ item: 0 }, { item: 1 }]],
		] as const) {
			const t = upstreamContext(withWalk, paired);
			expect(new Upstream(t.ctx).claim(0, { json: {} })).toMatchObject({ key: 'o-1' });
			expect(t.viaNode()).toBe(1);
		}
	});
});

describe("The Guard's answer without the paired-item walk", () => {
	const GUARD = { type: 'n8n-nodes-durable.idempotencyGuard', disabled: false };
	const HTTP = { type: 'n8n-nodes-base.httpRequest', disabled: false };
	const answer = () => ({
		json: {
			orderId: 'o-1',
			durable: { workflowId: 'wf-1', instanceKey: 'o-1', leaseSeconds: 60 },
			idempotency: { scope: 'payment', key: 'o-1', attempt: 1, outcome: 'acquired' },
		},
	});

	/** A Save whose direct parents and their direct parents are `graph`; counts the walks. */
	const saveContext = (
		graph: Record<string, Array<{ name: string; type: string; disabled: boolean }>>,
	) => {
		let walks = 0;
		const walked = answer();
		const ctx = {
			getNode: () => ({ name: 'Save', type: 'x.durableCheckpoint', parameters: {} }),
			getExecutionId: () => 'exec-7',
			getParentNodes: (name: string, opts?: { depth?: number }) => {
				if (opts?.depth === 1) return graph[name] ?? [];
				return [{ name: 'Claim', ...GUARD, parameters: { operation: 'claim' } }];
			},
			getInputData: () => [{ json: { id: 'ch_1' }, pairedItem: { item: 0 } }],
			getInputSourceData: () => ({
				previousNode: 'Charge',
				previousNodeOutput: 0,
				previousNodeRun: 0,
			}),
			getWorkflowDataProxy: () => ({
				$getPairedItem: () => {
					walks++;
					return walked;
				},
			}),
		} as unknown as IExecuteFunctions;
		return { ctx, walks: () => walks, walked };
	};
	const chain = {
		Save: [
			{ name: 'Charge', ...HTTP },
			{ name: 'Claim', ...GUARD },
		],
		Charge: [{ name: 'Claim', ...GUARD }],
	};

	beforeEach(() => clearGuardRuns());

	it("takes the Guard's one item of its one run: no walk, the same answer and object", () => {
		const routed = answer();
		noteGuardRun('exec-7', 'Claim', [[routed], [], []]);
		const t = saveContext(chain);
		const upstream = new Upstream(t.ctx);
		const item = { json: { id: 'ch_1' } };
		expect(upstream.claim(0, item)).toMatchObject({ scope: 'payment', key: 'o-1', attempt: 1 });
		expect(upstream.claimItem(0, item)).toBe(routed);
		expect(upstream.instance(0, item)).toEqual({
			workflowId: 'wf-1',
			instanceKey: 'o-1',
			leaseSeconds: 60,
		});
		expect(t.walks()).toBe(0);
	});

	it.each([
		[
			'the Guard ran twice in this execution',
			() => {
				noteGuardRun('exec-7', 'Claim', [[answer()], [], []]);
				noteGuardRun('exec-7', 'Claim', [[answer()], [], []]);
			},
			chain,
		],
		[
			'its run routed two items',
			() => noteGuardRun('exec-7', 'Claim', [[answer()], [answer()], []]),
			chain,
		],
		[
			'it ran in another execution',
			() => noteGuardRun('exec-8', 'Claim', [[answer()], [], []]),
			chain,
		],
		[
			'its one item carries no answer (an error item)',
			() => noteGuardRun('exec-7', 'Claim', [[], [], [{ json: { error: 'x' } }]]),
			chain,
		],
		[
			'the node in between has another input too',
			() => noteGuardRun('exec-7', 'Claim', [[answer()], [], []]),
			{
				Save: [{ name: 'Charge', ...HTTP }],
				Charge: [
					{ name: 'Claim', ...GUARD },
					{ name: 'Webhook', type: 'n8n-nodes-base.webhook', disabled: false },
				],
			},
		],
		[
			'another Guard feeds this node too',
			() => noteGuardRun('exec-7', 'Claim', [[answer()], [], []]),
			{
				Save: [
					{ name: 'Charge', ...HTTP },
					{ name: 'Claim 2', ...GUARD },
				],
				Charge: [{ name: 'Claim', ...GUARD }],
			},
		],
		[
			'a durable node lies in between',
			() => noteGuardRun('exec-7', 'Claim', [[answer()], [], []]),
			{
				Save: [{ name: 'Save 1', type: 'n8n-nodes-durable.durableCheckpoint', disabled: false }],
				'Save 1': [{ name: 'Claim', ...GUARD }],
			},
		],
		[
			'the Guard is disabled',
			() => noteGuardRun('exec-7', 'Claim', [[answer()], [], []]),
			{
				Save: [{ name: 'Charge', ...HTTP }],
				Charge: [{ name: 'Claim', ...GUARD, disabled: true }],
			},
		],
		['nothing was noted (another process, an n8n restart)', () => undefined, chain],
	])('walks the paired items when %s', (_why, note, graph) => {
		note();
		const t = saveContext(graph);
		const upstream = new Upstream(t.ctx);
		expect(upstream.claimItem(0, { json: { id: 'ch_1' } })).toBe(t.walked);
		expect(t.walks()).toBe(1);
	});
});

describe('shareUnchanged', () => {
	it('points equal fields at the objects the item came with, and leaves the rest', () => {
		const body = { orderId: 'o-1', amount: 42 };
		const payment = { id: 'ch_1', status: 'ok' };
		const before = { body, payment, durable: { instanceKey: 'o-1' }, list: [1, 2] };
		const next: Record<string, unknown> = {
			body: { orderId: 'o-1', amount: 42 },
			payment: { id: 'ch_1', status: 'ok' },
			inventory: { id: 'inv_1' },
			list: [1, 3],
			durable: { instanceKey: 'o-1' },
		};
		shareUnchanged(next as never, before as never, 'durable');
		expect(next.body).toBe(body);
		expect(next.payment).toBe(payment);
		expect(next.list).toEqual([1, 3]);
		expect(next.durable).not.toBe(before.durable);
		expect(next.inventory).toEqual({ id: 'inv_1' });
	});
});
