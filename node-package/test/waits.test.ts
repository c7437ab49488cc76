/**
 * How long an n8n Wait node can wait, read from its stored parameters with
 * n8n's defaults (Wait 1: 1 hour; Wait 1.1: 5 seconds).
 */
import type { NodeTypeAndVersion } from 'n8n-workflow';

import { longestWait, waitSeconds } from '../shared/waits';

const wait = (parameters: Record<string, unknown>, typeVersion = 1.1): NodeTypeAndVersion => ({
	name: 'Wait',
	type: 'n8n-nodes-base.wait',
	typeVersion,
	disabled: false,
	parameters: parameters as NodeTypeAndVersion['parameters'],
});

const NOW = Date.parse('2026-12-04T10:00:00Z');

test('time intervals, with each version’s defaults', () => {
	expect(waitSeconds(wait({}))).toBe(5);
	expect(waitSeconds(wait({}, 1))).toBe(3600);
	expect(waitSeconds(wait({ amount: 2, unit: 'days' }))).toBe(172800);
	expect(waitSeconds(wait({ amount: 1.5, unit: 'minutes' }))).toBe(90);
	expect(waitSeconds(wait({ amount: '={{ $json.n }}' }))).toBeUndefined();
});

test('a specific time: the seconds until then (none when past); an expression is unknown', () => {
	expect(waitSeconds(wait({ resume: 'specificTime', dateTime: '2026-12-04T11:00:00Z' }), NOW)).toBe(
		3600,
	);
	expect(waitSeconds(wait({ resume: 'specificTime', dateTime: '2026-12-01T00:00:00Z' }), NOW)).toBe(0);
	expect(
		waitSeconds(wait({ resume: 'specificTime', dateTime: '={{ $json.at }}' }), NOW),
	).toBeUndefined();
});

test('a webhook or form: bounded only by Limit Wait Time', () => {
	expect(waitSeconds(wait({ resume: 'webhook' }))).toBeUndefined();
	expect(waitSeconds(wait({ resume: 'form', limitWaitTime: true }))).toBe(3600);
	expect(
		waitSeconds(
			wait({ resume: 'webhook', limitWaitTime: true, resumeAmount: 30, resumeUnit: 'minutes' }),
		),
	).toBe(1800);
	expect(
		waitSeconds(
			wait({
				resume: 'webhook',
				limitWaitTime: true,
				limitType: 'atSpecifiedTime',
				maxDateAndTime: '2026-12-05T10:00:00Z',
			}),
			NOW,
		),
	).toBe(86400);
});

test('the longest wait, or the first one nothing bounds', () => {
	expect(
		longestWait([
			{ name: 'a', seconds: 5, why: '' },
			{ name: 'b', seconds: 60, why: '' },
		])?.name,
	).toBe('b');
	expect(
		longestWait([
			{ name: 'a', seconds: 5, why: '' },
			{ name: 'b', seconds: undefined, why: 'webhook' },
		])?.name,
	).toBe('b');
	expect(longestWait([])).toBeUndefined();
});
