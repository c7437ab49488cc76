/**
 * The node descriptions as n8n's editor evaluates them (n8n-workflow's own
 * parameter defaults and expression engine, no sidecar): subtitles never show
 * "undefined", output labels per version, and version 1 keeps its defaults.
 */
import { NodeHelpers, type INodeParameters, type INodeType } from 'n8n-workflow';

import { DurableCheckpoint } from '../nodes/DurableCheckpoint/DurableCheckpoint.node';
import { IdempotencyGuard } from '../nodes/IdempotencyGuard/IdempotencyGuard.node';
import { ResumePoint } from '../nodes/ResumePoint/ResumePoint.node';
import { ResumeTrigger } from '../nodes/ResumeTrigger/ResumeTrigger.node';
import { evaluate, parametersOf } from './support/descriptions';

const cases: Array<{ type: INodeType; params: INodeParameters[] }> = [
	{
		type: new ResumePoint(),
		params: [
			{},
			{ instanceKey: 'order-1' },
			{ instanceKey: '={{ $json.body.orderId }}' },
			// An expression that resolves to undefined without data.
			{ instanceKey: '={{ $json?.body?.orderId }}' },
		],
	},
	{
		type: new DurableCheckpoint(),
		params: [
			{},
			{ operation: 'save' },
			{ operation: 'save', stepName: 'charge' },
			{ operation: 'complete' },
			{ operation: 'fail' },
			{ operation: 'scheduleResume' },
		],
	},
	{
		type: new IdempotencyGuard(),
		params: [
			{},
			{ operation: 'claim' },
			{ operation: 'claim', scope: 'payment' },
			{ operation: 'claim', scope: 'payment', key: 'line-1' },
			{ operation: 'recordResult' },
			{ operation: 'release', scope: 'payment' },
		],
	},
];

describe('node descriptions as the editor evaluates them', () => {
	for (const { type, params } of cases) {
		for (const version of type.description.version as number[]) {
			test.each(params)(`${type.description.displayName} v${version} subtitle with %j`, (given) => {
				const parameters = parametersOf(type, version, given);
				let subtitle: unknown;
				try {
					subtitle = evaluate(type, version, given, type.description.subtitle!);
				} catch {
					// The editor catches a failing subtitle and shows none: acceptable only
					// where a parameter is an expression it cannot resolve without data.
					expect(JSON.stringify(parameters)).toContain('={{');
					return;
				}
				expect(typeof subtitle).toBe('string');
				expect(subtitle).not.toMatch(/undefined|null|\[object/);
			});
		}
	}

	test.each([{}, { pollIntervalSeconds: 0.5 }])('Resume Trigger subtitle with %j', (given) => {
		const trigger = new ResumeTrigger();
		const subtitle = evaluate(trigger, 1, given, trigger.description.subtitle!);
		expect(subtitle).toMatch(/^every [\d.]+ s$/);
		expect(trigger.description.description).toMatch(/lease/);
	});

	test('every node is version [1, 2] with default version 2; the Idempotency Guard and the Resume Point also 2.1, their default', () => {
		for (const { type } of cases) {
			const newer = ['idempotencyGuard', 'resumePoint'].includes(type.description.name);
			expect(type.description.version).toEqual(newer ? [1, 2, 2.1] : [1, 2]);
			expect(type.description.defaultVersion).toBe(newer ? 2.1 : 2);
		}
	});

	test('Different Delivery: Refuse from Resume Point 2.1, Ignore in version 2 (its behaviour before), none in version 1', () => {
		const rp = new ResumePoint();
		expect(parametersOf(rp, 2.1, {}).differentDelivery).toBe('refuse');
		expect(parametersOf(rp, 2, {}).differentDelivery).toBe('ignore');
		expect(parametersOf(rp, 1, {}).differentDelivery).toBeUndefined();
		const outputs = (given: INodeParameters) =>
			(
				evaluate(rp, 2.1, given, rp.description.outputs as string) as Array<{ displayName: string }>
			).map((o) => o.displayName);
		expect(outputs({ differentDelivery: 'output', waitOutputs: true })).toEqual([
			'Start',
			'Resume',
			'Finished',
			'Busy',
			'Event',
			'Timed Out',
			'Different',
		]);
	});

	test('output labels: short ones in version 2, the old ones kept in version 1', () => {
		const rp = new ResumePoint();
		const given = { stepOutputs: 'paid, shipped', versionMismatchOutput: true };
		const labels = (type: INodeType, version: number, p: INodeParameters) =>
			(
				evaluate(type, version, p, type.description.outputs as string) as Array<{
					displayName: string;
				}>
			).map((o) => o.displayName);
		expect(labels(rp, 2, given)).toEqual([
			'Start',
			'Resume',
			'Finished',
			'Busy',
			'paid',
			'shipped',
			'Old Version',
		]);
		expect(labels(rp, 1, given)).toEqual([
			'Start',
			'Resume',
			'Completed',
			'In Progress',
			'Resume at paid',
			'Resume at shipped',
			'Version Mismatch',
		]);
		const guard = new IdempotencyGuard();
		expect(labels(guard, 2, { operation: 'claim' })).toEqual(['First Run', 'Done Before', 'Busy']);
		expect(labels(guard, 1, { operation: 'claim' })).toEqual([
			'First Run',
			'Already Done',
			'In Progress',
		]);
		expect(labels(guard, 2, { operation: 'recordResult' })).toEqual(['Done']);
	});

	test("the operations' descriptions name the outputs as each version labels them", () => {
		/** The descriptions of the Operation selector the editor shows for `version`. */
		const operations = (type: INodeType, version: number) => {
			const shown = type.description.properties.filter(
				(p) =>
					p.name === 'operation' &&
					NodeHelpers.displayParameter(
						parametersOf(type, version, {}),
						p,
						{ typeVersion: version },
						type.description,
					),
			);
			expect(shown).toHaveLength(1);
			return JSON.stringify(
				(shown[0].options ?? []).map((o) => (o as { description?: string }).description),
			);
		};
		const checkpoint = new DurableCheckpoint();
		expect(operations(checkpoint, 2)).toContain('leaves the Resume Point by Finished');
		expect(operations(checkpoint, 2)).not.toContain('Completed');
		expect(operations(checkpoint, 1)).toContain('leaves the Resume Point by Completed');
		const guard = new IdempotencyGuard();
		for (const version of [2, 2.1]) {
			expect(operations(guard, version)).toContain(
				'Done Before replays the stored result, Busy runs nothing',
			);
			expect(operations(guard, version)).not.toMatch(/Already Done|In Progress/);
		}
		expect(operations(guard, 1)).toContain(
			'Already Done replays the stored result, In Progress runs nothing',
		);
	});

	test('version 1 keeps its parameter defaults; version 2 needs no expressions', () => {
		const checkpoint = new DurableCheckpoint();
		expect(parametersOf(checkpoint, 1, { operation: 'save' })).toMatchObject({
			instanceKey: '={{ $json.durable?.instanceKey }}',
			saveWhat: 'item',
		});
		const v2 = parametersOf(checkpoint, 2, { operation: 'save' });
		expect(v2).toMatchObject({ instanceFrom: 'resumePoint', saveWhat: 'stepResult' });
		expect(v2.instanceKey).toBeUndefined();

		const guard = new IdempotencyGuard();
		expect(parametersOf(guard, 1, { operation: 'claim' })).toMatchObject({
			scope: '={{ $json.idempotency?.scope ?? $workflow.id }}',
			key: '={{ $json.idempotency?.key }}',
			fingerprintFrom: 'item',
		});
		for (const version of [2, 2.1]) {
			expect(parametersOf(guard, version, { operation: 'claim' })).toMatchObject({
				scope: '',
				key: '',
				fingerprintFrom: 'instance',
			});
		}

		for (const { type } of cases) {
			const values = JSON.stringify(parametersOf(type, 2, {}));
			expect(values).not.toContain('={{');
		}
	});

	test("every node's description says what its lease does", () => {
		for (const { type } of cases) {
			expect(type.description.description).toMatch(/lease/);
		}
	});
});
