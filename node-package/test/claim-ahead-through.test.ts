/* eslint-disable @n8n/community-nodes/no-restricted-globals, @n8n/community-nodes/no-restricted-imports -- test code runs in Node, never inside n8n (it reads the repository's examples) */
/**
 * Claim ahead through nodes that hand items on (shared/claim-ahead.ts,
 * passesItemsOn): the README's order, Resume Point → Respond to Webhook →
 * Claim, claims the Claim's key in the Resume Point's call; so do a No
 * Operation and an Edit Fields that keeps every field, alone or chained.
 * Any node that may change the item, branch it, or feed the Claim from
 * elsewhere, and the Claim claims for itself.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type {
	IDataObject,
	IExecuteFunctions,
	INodeExecutionData,
	INodeParameters,
} from 'n8n-workflow';

import { DurableLimit } from '../nodes/DurableLimit/DurableLimit.node';
import { OUTPUT_FIRST_RUN } from '../nodes/IdempotencyGuard/IdempotencyGuard.node';
import { OUTPUT_START } from '../nodes/ResumePoint/ResumePoint.node';
import { findAheadGuard, passesItemsOn } from '../shared/claim-ahead';
import { getSidecarClient } from '../shared/transport';
import { withGraph, type Edge, type GraphNode } from './support/graph';
import { executeContext, type UpstreamNode } from './support/n8n';
import {
	checkpoint,
	guard,
	httpResponse,
	resumePoint,
	RP,
	sidecar,
	useSidecar,
} from './support/version2';

useSidecar();

const limiter = new DurableLimit();

const RESPOND: GraphNode = {
	name: 'Accepted',
	type: 'n8n-nodes-base.respondToWebhook',
	typeVersion: 1.5,
	parameters: { respondWith: 'noData', options: {} },
};
const NOOP: GraphNode = { name: 'Pass', type: 'n8n-nodes-base.noOp', typeVersion: 1 };
/** Edit Fields as the editor saves it with Include Other Input Fields on (Include: All, left out). */
const KEEP_ALL: GraphNode = {
	name: 'Add note',
	type: 'n8n-nodes-base.set',
	typeVersion: 3.4,
	parameters: {
		assignments: { assignments: [{ id: 'a', name: 'note', value: '={{ 1 }}', type: 'number' }] },
		includeOtherFields: true,
		options: {},
	},
};
const IF: GraphNode = { name: 'Paid?', type: 'n8n-nodes-base.if', typeVersion: 2.2 };
const HOOK: GraphNode = { name: 'Webhook', type: 'n8n-nodes-base.webhook', typeVersion: 2.1 };
const RP_NODE: GraphNode = { name: RP.name, type: RP.type, typeVersion: 2 };
const SAVE_NODE: GraphNode = {
	name: 'Save charge',
	type: 'n8n-nodes-durable.durableCheckpoint',
	typeVersion: 2,
};
const claimNode = (scope: string, name = `Claim ${scope}`): GraphNode => ({
	name,
	type: 'n8n-nodes-durable.idempotencyGuard',
	typeVersion: 2,
	parameters: { operation: 'claim', scope },
});
const CLAIM = claimNode('charge');

/** Which Guard `me` claims ahead for in this wiring (nodes: me first). */
function aheadIn(nodes: GraphNode[], edges: Edge[], onlyChild: boolean) {
	const me = nodes[0];
	const ctx = { getNode: () => ({ name: me.name, type: me.type, parameters: {} }) };
	return findAheadGuard(withGraph(ctx as unknown as IExecuteFunctions, nodes, edges), {
		onlyChild,
	});
}

/** Resume Point → `between` (a chain, in order) → Claim charge. */
function chainFrom(between: GraphNode[], from: GraphNode = RP_NODE) {
	const names = [from.name, ...between.map((n) => n.name), CLAIM.name];
	const edges: Edge[] = names.slice(1).map((name, i) => [names[i], name]);
	return {
		nodes: [from, HOOK, ...between, CLAIM],
		edges: [[HOOK.name, from.name], ...edges] as Edge[],
	};
}

/** New instances of `orderIds` through the Resume Point in the wiring `nodes` and `edges`, as a webhook's
 * execution starts them: its outputs. */
async function startIn(
	nodes: GraphNode[],
	edges: Edge[],
	run: { workflowId: string; executionId: string },
	orderIds: string[],
): Promise<INodeExecutionData[][]> {
	return await resumePoint.execute.call(
		withGraph(
			executeContext({
				credentials: sidecar.credentials(),
				...run,
				typeVersion: 2,
				items: orderIds.map((orderId) => ({ body: { orderId } })),
				params: {
					instanceKey: (_i: number, item: INodeExecutionData) =>
						(item.json.body as IDataObject).orderId,
				},
				nodeName: RP.name,
				description: resumePoint.description,
			}),
			nodes,
			edges,
		),
	);
}

describe('nodes that hand the item on', () => {
	test.each([
		['Respond to Webhook', [RESPOND]],
		['No Operation', [NOOP]],
		['an Edit Fields keeping every field', [KEEP_ALL]],
		['Respond to Webhook, then No Operation', [RESPOND, NOOP]],
		['Edit Fields, then Respond to Webhook', [KEEP_ALL, RESPOND]],
	])('the Resume Point claims ahead through %s', (_what, between) => {
		const { nodes, edges } = chainFrom(between);
		expect(aheadIn(nodes, edges, true)).toMatchObject({ guard: CLAIM.name, scope: 'charge' });
	});

	test('a Save claims ahead through them too, beside a branch of its own', () => {
		const { nodes, edges } = chainFrom([NOOP, RESPOND], SAVE_NODE);
		const log: GraphNode = { name: 'Log', type: 'n8n-nodes-base.httpRequest' };
		expect(aheadIn([...nodes, log], [...edges, [SAVE_NODE.name, log.name]], false)).toMatchObject({
			guard: CLAIM.name,
		});
	});

	const set = (parameters: INodeParameters, typeVersion = 3.4): GraphNode => ({
		...KEEP_ALL,
		typeVersion,
		parameters: { ...KEEP_ALL.parameters, ...parameters },
	});
	const assigning = (name: string) => set({ assignments: { assignments: [{ name, value: 'x' }] } });
	test.each([
		['an Edit Fields without Include Other Input Fields', set({ includeOtherFields: false })],
		['an Edit Fields including selected fields only', set({ include: 'selected' })],
		['an Edit Fields including all fields but some', set({ include: 'except' })],
		['an Edit Fields whose Include is an expression', set({ includeOtherFields: '={{ true }}' })],
		['an Edit Fields in JSON mode', set({ mode: 'raw' })],
		['an Edit Fields duplicating items', set({ duplicateItem: true })],
		['an Edit Fields of a version before Include Other Input Fields', set({}, 3.2)],
		['an Edit Fields setting durable', assigning('durable')],
		['an Edit Fields setting durable.instanceKey', assigning('durable.instanceKey')],
		['an Edit Fields setting a field named by brackets', assigning("['durable'].instanceKey")],
		['an Edit Fields setting a field named by an expression', assigning('={{ "durable" }}')],
		['an Edit Fields with assignments from an expression', set({ assignments: '={{ [] }}' })],
		[
			'a Respond to Webhook with a Response output',
			{ ...RESPOND, parameters: { enableResponseOutput: true } },
		],
		['a Respond to Webhook 1.3 (a Response output always)', { ...RESPOND, typeVersion: 1.3 }],
		['a disabled No Operation', { ...NOOP, disabled: true }],
		['an IF', IF],
		['a No Operation of another package', { ...NOOP, type: 'n8n-nodes-other.noOp' }],
	])('nothing is claimed ahead through %s', (_what, between) => {
		expect(passesItemsOn({ typeVersion: 1, disabled: false, ...between })).toBe(false);
		const { nodes, edges } = chainFrom([between as GraphNode]);
		expect(aheadIn(nodes, edges, true)).toBeUndefined();
		const after = chainFrom([RESPOND, between as GraphNode]);
		expect(aheadIn(after.nodes, after.edges, true)).toBeUndefined();
	});

	test('nothing through a node that feeds another node besides the way to the Claim', () => {
		const { nodes, edges } = chainFrom([RESPOND]);
		const log: GraphNode = { name: 'Log', type: 'n8n-nodes-base.httpRequest' };
		const branched: Edge[] = [...edges, [RESPOND.name, log.name]];
		expect(aheadIn([...nodes, log], branched, true)).toBeUndefined();
		expect(aheadIn([...nodes, log], branched, false)).toBeUndefined();
		// The same, a node further down the chain.
		const two = chainFrom([RESPOND, NOOP]);
		expect(
			aheadIn([...two.nodes, log], [...two.edges, [NOOP.name, log.name]], true),
		).toBeUndefined();
	});

	test('nothing through a node fed by another node too, or to a Claim fed from elsewhere', () => {
		const other: GraphNode = { name: 'Other trigger', type: 'n8n-nodes-base.manualTrigger' };
		const { nodes, edges } = chainFrom([RESPOND, NOOP]);
		expect(aheadIn([...nodes, other], [...edges, [other.name, NOOP.name]], true)).toBeUndefined();
		expect(aheadIn([...nodes, other], [...edges, [other.name, CLAIM.name]], true)).toBeUndefined();
		// Fed again by a node above the Resume Point's way: its items came through here all the same.
		expect(aheadIn(nodes, [...edges, [HOOK.name, CLAIM.name]], true)).toMatchObject({
			guard: CLAIM.name,
		});
	});

	test('the Resume Point claims nothing when it feeds another node besides the chain', () => {
		const { nodes, edges } = chainFrom([RESPOND]);
		const log: GraphNode = { name: 'Log', type: 'n8n-nodes-base.httpRequest' };
		expect(aheadIn([...nodes, log], [...edges, [RP_NODE.name, log.name]], true)).toBeUndefined();
		// A No Operation that leads somewhere, or a disabled one, is such a node too.
		const further: Edge[] = [...edges, [RP_NODE.name, 'Done'], ['Done', log.name]];
		const done = { ...NOOP, name: 'Done' };
		expect(aheadIn([...nodes, done, log], further, true)).toBeUndefined();
		const off = { ...done, disabled: true };
		expect(aheadIn([...nodes, off], [...edges, [RP_NODE.name, 'Done']], true)).toBeUndefined();
	});

	test('the Resume Point claims ahead beside a No Operation leading nowhere (Finished and Busy wired to it)', () => {
		const received = { ...NOOP, name: 'Already Received' };
		// Respond to Webhook on Start, and n8n's Respond: When Last Node Finishes (the Claim on Start).
		for (const between of [[RESPOND], []]) {
			const { nodes, edges } = chainFrom(between);
			const wired: Edge[] = [...edges, [RP_NODE.name, received.name]];
			expect(aheadIn([...nodes, received], wired, true)).toMatchObject({ guard: CLAIM.name });
		}
	});

	test('nothing when the chain leads to two Claims, or one of them twice', () => {
		const { nodes, edges } = chainFrom([RESPOND]);
		const second = claimNode('shipping');
		// The Save feeds a Claim directly and another through a No Operation.
		const save = chainFrom([NOOP], SAVE_NODE);
		const both: Edge[] = [...save.edges, [SAVE_NODE.name, second.name]];
		expect(aheadIn([...save.nodes, second], both, false)).toBeUndefined();
		// The Claim directly and through Respond to Webhook.
		expect(aheadIn(nodes, [...edges, [RP_NODE.name, CLAIM.name]], false)).toBeUndefined();
	});
});

describe("the README's whole wiring: the Resume point's Resume and step outputs too", () => {
	const SHIP = claimNode('ship');
	const SAVE_SHIPPED: GraphNode = { ...SAVE_NODE, name: 'Save shipped' };
	const DONE: GraphNode = { ...NOOP, name: 'Already Received' };
	/** Start → [Respond] → Claim charge → Save charge → Claim ship → Save shipped; Resume → Claim
	 * charge; the step output "charge" → Claim ship; Finished and Busy → a No Operation. */
	function wiring(respond: boolean): { nodes: GraphNode[]; edges: Edge[] } {
		const first = respond ? RESPOND.name : CLAIM.name;
		return {
			nodes: [
				RP_NODE,
				HOOK,
				...(respond ? [RESPOND] : []),
				CLAIM,
				SAVE_NODE,
				SHIP,
				SAVE_SHIPPED,
				DONE,
			],
			edges: [
				[HOOK.name, RP.name],
				[RP.name, first],
				...(respond ? ([[RESPOND.name, CLAIM.name]] as Edge[]) : []),
				[RP.name, CLAIM.name], // Resume
				[CLAIM.name, SAVE_NODE.name],
				[SAVE_NODE.name, SHIP.name],
				[RP.name, SHIP.name], // the step output after the charge
				[SHIP.name, SAVE_SHIPPED.name],
				[RP.name, DONE.name], // Finished, Busy
			],
		};
	}

	test.each([
		['answering with a Respond to Webhook on Start', true],
		['answering when the last node finishes', false],
	])('the Resume Point claims ahead for the Claim on Start, %s', (_what, respond) => {
		const { nodes, edges } = wiring(respond);
		expect(aheadIn(nodes, edges, true)).toMatchObject({ guard: CLAIM.name, scope: 'charge' });
	});

	test('a second Guard on Start, fed by nothing below, leaves the claim to each Guard', () => {
		const { nodes, edges } = wiring(false);
		const other = claimNode('audit');
		expect(aheadIn([...nodes, other], [...edges, [RP.name, other.name]], true)).toBeUndefined();
	});

	test('a Guard fed by the Resume Point and by a node not below it is no continuation', () => {
		const { nodes, edges } = wiring(false);
		const elsewhere: GraphNode = { name: 'Other Trigger', type: 'n8n-nodes-base.manualTrigger' };
		const other = claimNode('audit');
		const more: Edge[] = [
			[RP.name, other.name],
			[elsewhere.name, other.name],
		];
		expect(aheadIn([...nodes, elsewhere, other], [...edges, ...more], true)).toBeUndefined();
	});
});

/**
 * The README's order with two side effects (the Resume Point's Finished and Busy into a No
 * Operation), run node by node against the real sidecar.
 */
describe("the README's order: Resume Point → Respond to Webhook → Claim → call → Save", () => {
	const NOTIFY = claimNode('notify');
	const CHARGE_CALL: UpstreamNode = { name: 'Charge', type: 'n8n-nodes-base.httpRequest' };
	const NOTIFY_CALL: UpstreamNode = { name: 'Notify', type: 'n8n-nodes-base.httpRequest' };
	const nodes: GraphNode[] = [
		HOOK,
		{ name: 'Resume Trigger', type: 'n8n-nodes-durable.resumeTrigger' },
		RP_NODE,
		RESPOND,
		CLAIM,
		CHARGE_CALL,
		{ ...SAVE_NODE, name: 'Save charged' },
		NOTIFY,
		NOTIFY_CALL,
		{ ...SAVE_NODE, name: 'Save notified' },
		{ ...NOOP, name: 'Already Received' },
	];
	const edges: Edge[] = [
		[HOOK.name, RP.name],
		['Resume Trigger', RP.name],
		[RP.name, RESPOND.name],
		[RESPOND.name, CLAIM.name],
		[CLAIM.name, CHARGE_CALL.name],
		[CLAIM.name, 'Save charged'],
		[CHARGE_CALL.name, 'Save charged'],
		['Save charged', NOTIFY.name],
		[NOTIFY.name, NOTIFY_CALL.name],
		[NOTIFY.name, 'Save notified'],
		[NOTIFY_CALL.name, 'Save notified'],
		// Finished and Busy.
		[RP.name, 'Already Received'],
	];
	const up = (n: GraphNode, output?: INodeExecutionData[]): UpstreamNode => ({
		name: n.name,
		type: n.type,
		typeVersion: n.typeVersion,
		parameters: n.parameters,
		output,
	});

	async function order(workflowId: string, orderIds: string[]) {
		const run = { workflowId, executionId: 'e1' };
		const base = { credentials: sidecar.credentials(), ...run, typeVersion: 2 };
		const started = await startIn(nodes, edges, run, orderIds);
		// Respond to Webhook answers the sender and returns its input items as they are.
		const answered = started[OUTPUT_START];
		const claimIn = async (g: GraphNode, items: INodeExecutionData[], upstream: UpstreamNode[]) =>
			await guard.execute.call(
				executeContext({
					...base,
					items,
					params: { scope: g.parameters!.scope },
					nodeName: g.name,
					description: guard.description,
					upstream,
				}),
			);
		const saveIn = async (
			name: string,
			items: INodeExecutionData[],
			upstream: UpstreamNode[],
			last: boolean,
		) =>
			(
				await checkpoint.execute.call(
					withGraph(
						executeContext({
							...base,
							items,
							params: last
								? { stepName: 'notified', options: { completeInstance: true } }
								: { stepName: 'charged' },
							nodeName: name,
							description: checkpoint.description,
							upstream,
						}),
						nodes,
						edges,
					),
				)
			)[0];
		const rp = up(RP_NODE, started[OUTPUT_START]);
		const charged = await claimIn(CLAIM, answered, [up(RESPOND, answered), rp]);
		const chargeOut = charged[OUTPUT_FIRST_RUN];
		const charge = httpResponse(chargeOut, { chargeId: 'ch-1' });
		const saved = await saveIn(
			'Save charged',
			charge,
			[up(CHARGE_CALL), up(CLAIM, chargeOut), up(RESPOND, answered), rp],
			false,
		);
		const notified = await claimIn(NOTIFY, saved, [
			up({ ...SAVE_NODE, name: 'Save charged' }),
			up(CLAIM, chargeOut),
		]);
		const notifyOut = notified[OUTPUT_FIRST_RUN];
		await saveIn(
			'Save notified',
			httpResponse(notifyOut, { sent: true }),
			[up(NOTIFY_CALL), up(NOTIFY, notifyOut), up({ ...SAVE_NODE, name: 'Save charged' }, saved)],
			true,
		);
		return { chargeOut, notifyOut };
	}

	test('takes three RPCs, not four: the Resume Point claims the first key, the Save the second', async () => {
		const client = getSidecarClient(sidecar.connection());
		const methods = ['startOrResume', 'claim', 'saveCheckpoints'] as const;
		const spies = methods.map((method) => jest.spyOn(client, method));
		/** The calls made, in order. */
		const calls = () =>
			spies
				.flatMap((spy, m) => spy.mock.invocationCallOrder.map((at) => ({ at, method: methods[m] })))
				.sort((a, b) => a.at - b.at)
				.map((c) => c.method);
		try {
			const { chargeOut, notifyOut } = await order('wf-through-docs', ['o-1']);
			expect(calls()).toEqual(['startOrResume', 'saveCheckpoints', 'saveCheckpoints']);
			expect(chargeOut[0].json.idempotency).toMatchObject({
				scope: 'charge',
				key: 'o-1',
				attempt: 1,
				claimedAhead: true,
			});
			expect(notifyOut[0].json.idempotency).toMatchObject({ scope: 'notify', claimedAhead: true });
		} finally {
			for (const spy of spies) spy.mockRestore();
		}
		const rows = await sidecar.sql<{ scope: string; status: string; holder: string }>(
			"SELECT scope, status, holder FROM durable_idempotency_keys WHERE key = 'o-1' ORDER BY scope",
		);
		expect(rows).toEqual([
			{ scope: 'charge', status: 'completed', holder: 'e1' },
			{ scope: 'notify', status: 'completed', holder: 'e1' },
		]);
	});

	test('a Claim whose item names another instance than the one claimed ahead claims for itself', async () => {
		const run = { workflowId: 'wf-through-other', executionId: 'e1' };
		const client = getSidecarClient(sidecar.connection());
		const started = await startIn(nodes, edges, run, ['o-a']);
		const spy = jest.spyOn(client, 'claim');
		try {
			// Something on the way put another instance on the item: the answer for o-a is not its.
			const [item] = started[OUTPUT_START];
			const changed = {
				...item,
				json: {
					...item.json,
					durable: { ...(item.json.durable as IDataObject), instanceKey: 'o-b' },
				},
			};
			const out = await guard.execute.call(
				executeContext({
					credentials: sidecar.credentials(),
					...run,
					typeVersion: 2,
					items: [changed],
					params: { scope: 'charge' },
					nodeName: CLAIM.name,
					description: guard.description,
					upstream: [up(RESPOND, [changed]), up(RP_NODE, started[OUTPUT_START])],
				}),
			);
			expect(spy).toHaveBeenCalledTimes(1);
			expect(spy.mock.calls[0][0].items?.[0]?.key).toBe('o-b');
			const meta = out[OUTPUT_FIRST_RUN][0].json.idempotency as IDataObject;
			expect(meta).toMatchObject({ key: 'o-b' });
			expect(meta.claimedAhead).toBeUndefined();
		} finally {
			spy.mockRestore();
		}
	});
});

/** An example workflow of the repository as n8n would answer the lookups for it (outputs not told apart). */
function example(file: string): { nodes: GraphNode[]; edges: Edge[] } {
	const workflow = JSON.parse(
		readFileSync(join(__dirname, '..', '..', 'examples', file), 'utf8'),
	) as {
		nodes: GraphNode[];
		connections: Record<string, { main: Array<Array<{ node: string }> | null> }>;
	};
	const edges: Edge[] = [];
	for (const [from, { main }] of Object.entries(workflow.connections)) {
		for (const targets of main) for (const to of targets ?? []) edges.push([from, to.node]);
	}
	return { nodes: workflow.nodes, edges };
}

/** The Guard the example's Resume Point claims ahead for on a new instance, if any. */
function aheadOfResumePoint({ nodes, edges }: { nodes: GraphNode[]; edges: Edge[] }) {
	const rp = nodes.find((n) => n.type === RP.type)!;
	return aheadIn([rp, ...nodes.filter((n) => n !== rp)], edges, true);
}

describe("the door's wiring and the examples as shipped", () => {
	const NOT_ACCEPTED: GraphNode = { ...RESPOND, name: 'Not Accepted' };
	const FAIL: GraphNode = { name: 'Fail Execution', type: 'n8n-nodes-base.stopAndError' };
	const OLD: GraphNode = { name: 'Run Old Version', type: 'n8n-nodes-base.executeWorkflow' };
	/** Resume Point → Accepted → Claim charge, and the door: error output → Not Accepted → Fail Execution. */
	const door = () => {
		const { nodes, edges } = chainFrom([RESPOND]);
		return {
			nodes: [...nodes, NOT_ACCEPTED, FAIL, OLD],
			edges: [
				...edges,
				[RP_NODE.name, NOT_ACCEPTED.name],
				[NOT_ACCEPTED.name, FAIL.name],
				[RP_NODE.name, OLD.name],
			] as Edge[],
		};
	};

	test("the Resume Point claims ahead beside the door's refusal and the Old Version's hand-off", () => {
		const { nodes, edges } = door();
		expect(aheadIn(nodes, edges, true)).toMatchObject({ guard: CLAIM.name });
	});

	test('a branch that runs something else, or a Respond to Webhook leading nowhere, still counts', () => {
		const { nodes, edges } = door();
		const log: GraphNode = { name: 'Log', type: 'n8n-nodes-base.httpRequest' };
		// The refusal that also calls something: a node this workflow runs.
		const calls: Edge[] = [...edges, [NOT_ACCEPTED.name, log.name]];
		expect(aheadIn([...nodes, log], calls, true)).toBeUndefined();
		// A Respond to Webhook that ends there may be the Start's answer: the Guard is then not on Start.
		const alone = edges.filter(([, to]) => to !== FAIL.name);
		expect(aheadIn(nodes, alone, true)).toBeUndefined();
		// A disabled Stop and Error is no end of a refusal.
		const off = nodes.map((n) => (n.name === FAIL.name ? { ...n, disabled: true } : n));
		expect(aheadIn(off, edges, true)).toBeUndefined();
	});

	const limit = (name: string, parameters: INodeParameters): GraphNode => ({
		name,
		type: 'n8n-nodes-durable.durableLimit',
		typeVersion: 1,
		parameters,
	});
	test.each([
		[
			'Enter Section (items over the limit wait) hands the item on',
			{ operation: 'enterSection' },
			true,
		],
		['Enter Section by default hands the item on', {}, true],
		['Rate Limit hands the item on', { operation: 'rateLimit', overLimit: 'wait' }, true],
		['Leave Section hands the item on', { operation: 'leaveSection' }, true],
		[
			'Enter Section leaving by Busy does not',
			{ operation: 'enterSection', overLimit: 'busy' },
			false,
		],
		['Rate Limit leaving by Busy does not', { operation: 'rateLimit', overLimit: 'busy' }, false],
		['Debounce does not', { operation: 'debounce' }, false],
	])('a Durable Limit: %s', (_what, parameters, passes) => {
		const node = limit('Limit', parameters);
		expect(passesItemsOn({ typeVersion: 1, disabled: false, ...node })).toBe(passes);
		const { nodes, edges } = chainFrom([RESPOND, node]);
		expect(aheadIn(nodes, edges, true)?.guard).toBe(passes ? CLAIM.name : undefined);
	});

	test('a chain node the Resume Point feeds too (its Resume output) stays on the chain', () => {
		const section = limit('Two at Once', { operation: 'enterSection', maxHolders: 2 });
		const { nodes, edges } = chainFrom([RESPOND, section]);
		expect(aheadIn(nodes, [...edges, [RP_NODE.name, section.name]], true)).toMatchObject({
			guard: CLAIM.name,
		});
	});

	test.each([
		['order-tracking.json', 'Claim Payment'],
		['crm-sync.json', 'Claim Sync'],
		// Their first node after Accepted is no Claim (a wait, a schedule, a debounce).
		['order-delivery.json', undefined],
		['renewal-reminder.json', undefined],
		['chat-debounce.json', undefined],
	])('%s: the Resume Point claims ahead for %s on a new instance', (file, guardName) => {
		expect(aheadOfResumePoint(example(file))?.guard).toBe(guardName);
	});
});

describe('through a Durable Limit, against the real sidecar: the crm-sync wiring', () => {
	const section: GraphNode = {
		name: 'Two at Once',
		type: 'n8n-nodes-durable.durableLimit',
		typeVersion: 1,
		parameters: { operation: 'enterSection', limitName: 'crm', limitKey: 'c-1', maxHolders: 2 },
	};
	const rate: GraphNode = {
		name: 'Five a Second',
		type: 'n8n-nodes-durable.durableLimit',
		typeVersion: 1,
		parameters: {
			operation: 'rateLimit',
			limitName: 'crm',
			limitKey: 'c-1',
			maxItems: 5,
			periodAmount: 1,
		},
	};
	const { nodes, edges } = chainFrom([RESPOND, section, rate]);
	// The Resume output into the section: a resumed item enters again.
	edges.push([RP_NODE.name, section.name]);

	test("the Resume Point claims the Claim's key; the limits and the Claim make no Claim call", async () => {
		const run = { workflowId: 'wf-through-limits', executionId: 'e1' };
		const base = { credentials: sidecar.credentials(), ...run, typeVersion: 2 };
		const client = getSidecarClient(sidecar.connection());
		const start = jest.spyOn(client, 'startOrResume');
		const spies = [
			start,
			jest.spyOn(client, 'acquireSlot'),
			jest.spyOn(client, 'throttle'),
			jest.spyOn(client, 'claim'),
		];
		try {
			const started = await startIn(nodes, edges, run, ['o-l1']);
			let items = started[OUTPUT_START];
			for (const node of [section, rate]) {
				[items] = await limiter.execute.call(
					executeContext({
						...base,
						typeVersion: 1,
						items,
						params: node.parameters as Record<string, unknown>,
						nodeName: node.name,
						description: limiter.description,
					}),
				);
				expect(items).toHaveLength(1);
			}
			const claimed = await guard.execute.call(
				executeContext({
					...base,
					items,
					params: { scope: 'charge' },
					nodeName: CLAIM.name,
					description: guard.description,
					upstream: [rate, section, RESPOND, { ...RP_NODE, output: started[OUTPUT_START] }].map(
						(n) => ({
							name: n.name,
							type: n.type,
							typeVersion: n.typeVersion,
							parameters: n.parameters,
						}),
					),
				}),
			);
			expect(claimed[OUTPUT_FIRST_RUN]).toHaveLength(1);
			expect(claimed[OUTPUT_FIRST_RUN][0].json.idempotency).toMatchObject({
				scope: 'charge',
				key: 'o-l1',
				claimedAhead: true,
			});
			expect(spies.map((spy) => spy.mock.calls.length)).toEqual([1, 1, 1, 0]);
			expect(start.mock.calls[0][0].claimOnStart).toMatchObject({ scope: 'charge' });
		} finally {
			for (const spy of spies) spy.mockRestore();
		}
	});
});
