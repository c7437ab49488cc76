/**
 * The Resume Trigger's hand-out reasons, as they reach the emitted item.
 */
import type { IDataObject } from 'n8n-workflow';

import { resumableItem } from '../nodes/ResumeTrigger/ResumeTrigger.node';
import { ResumeReason } from '../shared/transport';
import { event, instance } from './support/waits-and-signals';

describe('Resume Trigger: hand-out reasons', () => {
	const settings = {
		workflowId: 'wf-x',
		claimant: 'n8n test',
		pollIntervalMs: 1000,
		claimLeaseSeconds: 30,
		maxInstances: 10,
		silenceMs: 15000,
	};

	test.each([
		[ResumeReason.RESUME_REASON_STALLED, 'stalled'],
		[ResumeReason.RESUME_REASON_WAKE_UP, 'wakeUp'],
		[ResumeReason.RESUME_REASON_EVENT, 'event'],
		[ResumeReason.RESUME_REASON_TIMEOUT, 'timeout'],
		[ResumeReason.RESUME_REASON_RETRY, 'retry'],
		[ResumeReason.RESUME_REASON_REDRIVE, 'redrive'],
	])('reason %s is emitted as %s', (reason, name) => {
		const item = resumableItem(
			{
				instance: instance(),
				reason,
				claimToken: 'c1',
				latestCheckpoint: undefined,
				event: undefined,
			},
			settings,
		);
		expect(item.json.durable).toMatchObject({
			reason: name,
			claimToken: 'c1',
			instanceKey: 'order-1',
		});
	});

	test('an arrived event is on the emitted item', () => {
		const item = resumableItem(
			{
				instance: instance(),
				reason: ResumeReason.RESUME_REASON_EVENT,
				claimToken: 'c1',
				latestCheckpoint: undefined,
				event: event(),
			},
			settings,
		);
		expect((item.json.durable as IDataObject).event).toMatchObject({
			name: 'delivered',
			payload: { deliveredAt: '2026-12-01T10:00:00Z' },
		});
	});
});
