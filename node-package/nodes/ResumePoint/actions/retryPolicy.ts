/** The retry policy the Resume Point's options give a new or resumed instance. */
import type { IDataObject } from 'n8n-workflow';

import type { RetryPolicy } from '../../../shared/transport';

const RETRY_DEFAULTS = {
	maxAutomaticResumes: 5,
	initialBackoffSeconds: 10,
	maxBackoffSeconds: 600,
	backoffMultiplier: 2,
	jitter: 0.2,
};

/**
 * The retry policy the Resume Point sends: none unless a retry option was
 * added (the instance keeps its policy, a new one the sidecar's defaults);
 * otherwise the options given, the rest at their defaults.
 */
export function retryPolicyOf(options: IDataObject): RetryPolicy | undefined {
	const given = Object.keys(RETRY_DEFAULTS).filter((k) => options[k] !== undefined);
	if (given.length === 0) return undefined;
	const value = (name: keyof typeof RETRY_DEFAULTS): number => {
		const raw = Number(options[name] ?? RETRY_DEFAULTS[name]);
		return Number.isFinite(raw) ? raw : RETRY_DEFAULTS[name];
	};
	return {
		maxAutomaticResumes: Math.round(value('maxAutomaticResumes')),
		initialBackoffMs: Math.round(value('initialBackoffSeconds') * 1000),
		maxBackoffMs: Math.round(value('maxBackoffSeconds') * 1000),
		backoffMultiplier: value('backoffMultiplier'),
		jitter: value('jitter'),
	};
}
