/** The workflow fingerprint a Resume Point sends with its start (shared/fingerprint). */
import type { IExecuteFunctions } from 'n8n-workflow';

import { workflowFingerprint } from '../shared/fingerprint';
import { withGraph, type Edge, type GraphNode } from './support/graph';
import { executeContext } from './support/n8n';

const edges: Edge[] = [
	['Webhook', 'Resume Point'],
	['Resume Trigger', 'Resume Point'],
	['Resume Point', 'Charge'],
	['Charge', 'Notify'],
];

function graph(changes: Partial<Record<string, GraphNode>> = {}): GraphNode[] {
	const nodes: GraphNode[] = [
		{ name: 'Webhook', type: 'n8n-nodes-base.webhook', parameters: { path: 'orders' } },
		{ name: 'Resume Trigger', type: 'n8n-nodes-durable.resumeTrigger' },
		{ name: 'Charge', type: 'n8n-nodes-base.httpRequest', parameters: { url: 'https://pay/v1' } },
		{ name: 'Notify', type: 'n8n-nodes-base.httpRequest', parameters: { url: 'https://mail' } },
		{ name: 'Elsewhere', type: 'n8n-nodes-base.noOp' },
	];
	return nodes.map((n) => changes[n.name] ?? n);
}

function ctxOf(nodes: GraphNode[], mode = 'webhook', extraEdges: Edge[] = []): IExecuteFunctions {
	const base = executeContext({
		nodeName: 'Resume Point',
		nodeType: 'n8n-nodes-durable.resumePoint',
		typeVersion: 2,
		params: { instanceKey: '={{ $json.id }}' },
		items: [{ id: 1 }],
		credentials: {},
	});
	const ctx = withGraph(base, nodes, [...edges, ...extraEdges]);
	return { ...ctx, getMode: () => mode } as IExecuteFunctions;
}

describe('workflowFingerprint', () => {
	it('is the same for the same workflow, whatever the order n8n lists nodes or keys in', () => {
		const one = workflowFingerprint(ctxOf(graph()));
		expect(one).toMatch(/^[0-9a-f]{64}$/);
		const reordered = graph({
			Charge: {
				type: 'n8n-nodes-base.httpRequest',
				name: 'Charge',
				parameters: { url: 'https://pay/v1' },
			},
		}).reverse();
		expect(workflowFingerprint(ctxOf(reordered))).toBe(one);
	});

	it('changes with a parameter, type version or disabled flag of a node before or after it', () => {
		const one = workflowFingerprint(ctxOf(graph()));
		const changed = [
			graph({
				Charge: {
					name: 'Charge',
					type: 'n8n-nodes-base.httpRequest',
					parameters: { url: 'https://pay/v2' },
				},
			}),
			graph({
				Notify: {
					name: 'Notify',
					type: 'n8n-nodes-base.httpRequest',
					typeVersion: 4,
					parameters: { url: 'https://mail' },
				},
			}),
			graph({
				Webhook: {
					name: 'Webhook',
					type: 'n8n-nodes-base.webhook',
					parameters: { path: 'orders-2' },
				},
			}),
			graph({
				Notify: {
					name: 'Notify',
					type: 'n8n-nodes-base.httpRequest',
					disabled: true,
					parameters: { url: 'https://mail' },
				},
			}),
		];
		const prints = changed.map((nodes) => workflowFingerprint(ctxOf(nodes)));
		expect(new Set([one, ...prints]).size).toBe(1 + prints.length);
		// A node added after it counts too.
		expect(workflowFingerprint(ctxOf(graph(), 'webhook', [['Notify', 'Elsewhere']]))).not.toBe(one);
	});

	it('leaves out nodes neither before nor after it', () => {
		const one = workflowFingerprint(ctxOf(graph()));
		const elsewhere = graph({ Elsewhere: { name: 'Elsewhere', type: 'n8n-nodes-base.set' } });
		expect(workflowFingerprint(ctxOf(elsewhere))).toBe(one);
	});

	it('is sent by executions of the published version only (webhook, trigger), not a manual run', () => {
		expect(workflowFingerprint(ctxOf(graph(), 'trigger'))).toBe(
			workflowFingerprint(ctxOf(graph())),
		);
		expect(workflowFingerprint(ctxOf(graph(), 'manual'))).toBe('');
		expect(workflowFingerprint(ctxOf(graph(), 'integrated'))).toBe('');
	});
});
