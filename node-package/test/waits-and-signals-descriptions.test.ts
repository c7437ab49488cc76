/**
 * The descriptions of the wait and signal features as n8n's editor evaluates
 * them: the Resume Point's Wait Outputs, the Durable Checkpoint's Received
 * output, the subtitles, the Durable Instance node's defaults.
 */
import { NodeHelpers, type INodeParameters, type INodeType } from 'n8n-workflow';

import { DurableCheckpoint } from '../nodes/DurableCheckpoint/DurableCheckpoint.node';
import { DurableInstance } from '../nodes/DurableInstance/DurableInstance.node';
import { ResumePoint } from '../nodes/ResumePoint/ResumePoint.node';
import { evaluate } from './support/descriptions';

const labels = (type: INodeType, version: number, p: INodeParameters) =>
	(
		evaluate(type, version, p, type.description.outputs as string) as Array<
			string | { displayName: string }
		>
	).map((o) => (typeof o === 'string' ? o : o.displayName));

describe('descriptions', () => {
	test('Resume Point: Wait Outputs adds Event and Timed Out after every other output, in both versions', () => {
		const rp = new ResumePoint();
		expect(
			labels(rp, 2, { stepOutputs: 'paid', versionMismatchOutput: true, waitOutputs: true }),
		).toEqual(['Start', 'Resume', 'Finished', 'Busy', 'paid', 'Old Version', 'Event', 'Timed Out']);
		expect(labels(rp, 2, { waitOutputs: true })).toEqual([
			'Start',
			'Resume',
			'Finished',
			'Busy',
			'Event',
			'Timed Out',
		]);
		expect(labels(rp, 1, { waitOutputs: true }).slice(-2)).toEqual(['Event', 'Timed Out']);
		// Off by default: existing workflows keep their outputs.
		expect(labels(rp, 2, {})).toEqual(['Start', 'Resume', 'Finished', 'Busy']);
	});

	test('Durable Checkpoint: Wait for Event labels its output Received; the other operations keep one plain output', () => {
		const cp = new DurableCheckpoint();
		expect(labels(cp, 2, { operation: 'awaitEvent', eventName: 'delivered' })).toEqual([
			'Received',
		]);
		expect(labels(cp, 1, { operation: 'awaitEvent' })).toEqual(['Received']);
		for (const operation of ['save', 'complete', 'fail', 'scheduleResume']) {
			expect(labels(cp, 2, { operation })).toEqual(['main']);
		}
		expect(labels(cp, 2, {})).toEqual(['main']);
	});

	test.each([
		[new DurableCheckpoint(), 2, { operation: 'awaitEvent' }, 'wait for: (no event name)'],
		[
			new DurableCheckpoint(),
			2,
			{ operation: 'awaitEvent', eventName: 'delivered' },
			'wait for: delivered',
		],
		[new DurableInstance(), 1, {}, 'signal: (no event name)'],
		[new DurableInstance(), 1, { eventName: 'delivered' }, 'signal: delivered'],
		[new DurableInstance(), 1, { operation: 'retry' }, 'retry instance'],
		[new DurableInstance(), 1, { operation: 'resume' }, 'resume instance'],
		[new DurableInstance(), 1, { operation: 'cancel' }, 'cancel instance'],
	] as Array<[INodeType, number, INodeParameters, string]>)(
		'subtitle %#: %p',
		(type, version, given, expected) => {
			expect(evaluate(type, version, given, type.description.subtitle!)).toBe(expected);
		},
	);

	test('the Durable Instance node needs no expression by default and says it holds no lease', () => {
		const di = new DurableInstance();
		const defaults = NodeHelpers.getNodeParameters(
			di.description.properties,
			{},
			true,
			false,
			{ typeVersion: 1 },
			di.description,
		);
		expect(JSON.stringify(defaults)).not.toContain('={{');
		expect(di.description.description).toMatch(/lease/);
	});
});
