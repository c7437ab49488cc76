/**
 * Each node version's own description (shared/versions.ts): n8n resolves a
 * node against `getNodeType(version).description`, which carries only that
 * version's properties. Whatever the parameters, it must resolve exactly what
 * the full description (both versions, `@version` conditions) resolves, so
 * workflows saved with version 1 load and run unchanged.
 */
import {
	NodeHelpers,
	type IExecuteFunctions,
	type INodeParameters,
	type INodeProperties,
	type INodeType,
} from 'n8n-workflow';

import { DurableCheckpoint } from '../nodes/DurableCheckpoint/DurableCheckpoint.node';
import { IdempotencyGuard } from '../nodes/IdempotencyGuard/IdempotencyGuard.node';
import { ResumePoint } from '../nodes/ResumePoint/ResumePoint.node';
import { nodeParameter } from '../shared/upstream';
import { propertiesForVersion } from '../shared/versions';

type Versioned = INodeType & { getNodeType(version?: number): INodeType; currentVersion: number };

const nodes: Array<[string, Versioned]> = [
	['Resume Point', new ResumePoint()],
	['Idempotency Guard', new IdempotencyGuard()],
	['Durable Checkpoint', new DurableCheckpoint()],
];

/** Parameter sets: empty, every operation, every options value, expressions, v1- and v2-only fields. */
function parameterSets(properties: INodeProperties[]): INodeParameters[] {
	const sets: INodeParameters[] = [{}];
	const filled: INodeParameters = {};
	for (const p of properties) {
		if (p.type === 'options') {
			for (const o of p.options ?? []) {
				if ('value' in o) sets.push({ [p.name]: o.value as string });
			}
		} else if (p.type === 'string' || p.type === 'json') {
			filled[p.name] = p.name === 'instanceKey' ? '={{ $json.body.orderId }}' : `x-${p.name}`;
		} else if (p.type === 'number') {
			filled[p.name] = 7;
		} else if (p.type === 'boolean') {
			filled[p.name] = true;
		} else if (p.type === 'collection') {
			filled[p.name] = { leaseSeconds: 30, ttlSeconds: 60, expectedSequence: 3, retry: true };
		}
	}
	const withOps = sets.slice(1).map((s) => ({ ...filled, ...s }));
	return [...sets, filled, ...withOps, ...withOps.map((s) => ({ ...s, ...sets[1] }))];
}

describe.each(nodes)('%s: one description per version', (_name, node) => {
	const full = node.description;
	const versions = full.version as number[];

	it('serves every version and defaults to the newest', () => {
		expect(versions.slice(0, 2)).toEqual([1, 2]);
		expect(full.defaultVersion).toBe(Math.max(...versions));
		expect(node.currentVersion).toBe(full.defaultVersion);
		for (const v of versions) {
			const view = node.getNodeType(v);
			expect(view.description.version).toBe(v);
			expect(view.description.name).toBe(full.name);
			expect(view.description.outputs).toBe(full.outputs);
			expect(view.execute).toBe(node.execute);
			expect(view.methods).toBe(node.methods);
			expect(NodeHelpers.getVersionedNodeType(node, v)).toBe(view);
		}
		expect(node.getNodeType()).toBe(node.getNodeType(full.defaultVersion));
	});

	it('keeps no @version condition and fewer properties in each version', () => {
		for (const v of versions) {
			const props = node.getNodeType(v).description.properties;
			expect(JSON.stringify(props)).not.toContain('@version');
			expect(props.length).toBeLessThan(full.properties.length);
		}
	});

	it.each(versions)('version %s resolves every parameter set as the full description does', (v) => {
		const view = node.getNodeType(v).description;
		for (const given of parameterSets(full.properties)) {
			// The two ways n8n resolves a node's parameters (the Workflow object: defaults
			// included; the saved form: without). With returnNoneDisplayed the full
			// description leaks the other version's properties, so it is no reference there.
			for (const [returnDefaults, returnNoneDisplayed] of [
				[true, false],
				[false, false],
			]) {
				const expected = NodeHelpers.getNodeParameters(
					full.properties,
					given,
					returnDefaults,
					returnNoneDisplayed,
					{ typeVersion: v },
					full,
				);
				const actual = NodeHelpers.getNodeParameters(
					view.properties,
					given,
					returnDefaults,
					returnNoneDisplayed,
					{ typeVersion: v },
					view,
				);
				expect(actual).toEqual(expected);
			}
			// What n8n checks before it runs a workflow (checkReadyForExecution).
			const node1 = { typeVersion: v, parameters: given } as unknown as Parameters<
				typeof NodeHelpers.getNodeParametersIssues
			>[1];
			expect(NodeHelpers.getNodeParametersIssues(view.properties, node1, view)).toEqual(
				NodeHelpers.getNodeParametersIssues(full.properties, node1, full),
			);
		}
	});
});

describe('propertiesForVersion', () => {
	const p = (
		name: string,
		displayOptions?: INodeProperties['displayOptions'],
	): INodeProperties => ({
		displayName: name,
		name,
		type: 'string',
		default: '',
		...(displayOptions ? { displayOptions } : {}),
	});

	it('decides show and hide rules on @version and keeps the others', () => {
		const props = [
			p('always'),
			p('v1', { show: { '@version': [1] } }),
			p('v2up', { show: { '@version': [{ _cnd: { gte: 2 } }], operation: ['save'] } }),
			p('notV1', { hide: { '@version': [1] } }),
			p('other', { show: { operation: ['save'] } }),
		];
		expect(propertiesForVersion(props, 1).map((x) => x.name)).toEqual(['always', 'v1', 'other']);
		const v2 = propertiesForVersion(props, 2);
		expect(v2.map((x) => x.name)).toEqual(['always', 'v2up', 'notV1', 'other']);
		expect(v2[1].displayOptions).toEqual({ show: { operation: ['save'] } });
		expect(v2[2].displayOptions).toBeUndefined();
		expect(v2[3]).toBe(props[4]);
	});

	it('leaves a rule it cannot decide to n8n', () => {
		const odd = p('odd', { show: { '@version': [{ _cnd: { between: { from: 1, to: 2 } } }] } });
		expect(propertiesForVersion([odd], 2)).toEqual([odd]);
	});
});

describe('nodeParameter: n8n asked only when something needs evaluating', () => {
	const ctxWith = (parameters: INodeParameters) => {
		const getNodeParameter = jest.fn(() => 'from n8n');
		const ctx = { getNode: () => ({ parameters }), getNodeParameter };
		return { ctx: ctx as unknown as IExecuteFunctions, getNodeParameter };
	};

	it('reads plain values from the node, copies objects, gives the fallback for a missing option', () => {
		const options = { leaseSeconds: 30, nested: { a: [1, 'b'] } };
		const { ctx, getNodeParameter } = ctxWith({ scope: 'pay', n: 0, on: false, options });
		expect(nodeParameter(ctx, 'scope', 0, '')).toBe('pay');
		expect(nodeParameter(ctx, 'n', 0, 5)).toBe(0);
		expect(nodeParameter(ctx, 'on', 0, true)).toBe(false);
		expect(nodeParameter(ctx, 'options.leaseSeconds', 0, 0)).toBe(30);
		expect(nodeParameter(ctx, 'options.ttlSeconds', 0, 7)).toBe(7);
		const copy = nodeParameter<typeof options>(ctx, 'options', 0, {});
		expect(copy).toEqual(options);
		expect(copy).not.toBe(options);
		expect(getNodeParameter).not.toHaveBeenCalled();
	});

	it('leaves expressions, missing parameters and missing options without a fallback to n8n', () => {
		const { ctx, getNodeParameter } = ctxWith({
			key: '={{ $json.id }}',
			options: { leaseSeconds: '={{ 1 + 1 }}' },
		});
		expect(nodeParameter(ctx, 'key', 2, '')).toBe('from n8n');
		expect(nodeParameter(ctx, 'options', 0, {})).toBe('from n8n');
		expect(nodeParameter(ctx, 'options.leaseSeconds', 0, 0)).toBe('from n8n');
		expect(nodeParameter(ctx, 'hidden', 0, 'x')).toBe('from n8n');
		expect(nodeParameter(ctx, 'options.ttlSeconds', 0)).toBe('from n8n');
		expect(getNodeParameter.mock.calls).toEqual([
			['key', 2, ''],
			['options', 0, {}],
			['options.leaseSeconds', 0, 0],
			['hidden', 0, 'x'],
			['options.ttlSeconds', 0],
		]);
	});
});
