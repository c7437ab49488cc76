/** The retry policy the Resume Point's options give a new or resumed instance. */
import type { IDataObject } from 'n8n-workflow';

import type { RetryPolicy } from '../../../shared/transport';

/** Each retry option and the policy field it sets (seconds become milliseconds). */
const RETRY_OPTIONS: Array<{
	option: string;
	field: Exclude<keyof RetryPolicy, 'defaultsForUnset'>;
	scale: number;
	whole: boolean;
}> = [
	{ option: 'maxAutomaticResumes', field: 'maxAutomaticResumes', scale: 1, whole: true },
	{ option: 'initialBackoffSeconds', field: 'initialBackoffMs', scale: 1000, whole: true },
	{ option: 'maxBackoffSeconds', field: 'maxBackoffMs', scale: 1000, whole: true },
	{ option: 'backoffMultiplier', field: 'backoffMultiplier', scale: 1, whole: false },
	{ option: 'jitter', field: 'jitter', scale: 1, whole: false },
];

/**
 * The retry policy the Resume Point sends: none unless a retry option was
 * added (the instance keeps its policy, a new one the sidecar's defaults);
 * otherwise only the options added, and the sidecar takes its own defaults
 * (DURABLE_RETRY_*) for the others, as it does when none is added.
 */
export function retryPolicyOf(options: IDataObject): RetryPolicy | undefined {
	const policy: RetryPolicy = { defaultsForUnset: true };
	let given = false;
	for (const { option, field, scale, whole } of RETRY_OPTIONS) {
		if (options[option] === undefined || options[option] === null || options[option] === '') {
			continue;
		}
		const raw = Number(options[option]) * scale;
		// Not a number: as if not added (the sidecar's default), never a silent 0.
		if (!Number.isFinite(raw)) continue;
		policy[field] = whole ? Math.round(raw) : raw;
		given = true;
	}
	return given ? policy : undefined;
}
