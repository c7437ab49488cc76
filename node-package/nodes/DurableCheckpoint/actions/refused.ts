/**
 * A save the sidecar refuses for one of its limits (RESOURCE_EXHAUSTED: a state
 * or a file over a DURABLE_MAX_* setting) is refused the same way on every
 * resume. Left alone, the instance would be resumed and refused again until its
 * retry policy gave up, its last error saying only that its execution died.
 * Instead its instance is failed at once, not to be retried by the policy, with
 * the refusal as its error, whether the item then fails the execution or leaves
 * by the error branch (Continue On Fail): the console and the CLI say why, and
 * an operator retries it (RetryInstance) once the limit is raised or the
 * workflow saves less. The Idempotency Guard's Claim and Record Result do the
 * same with their refusals (a fingerprint payload, a result over the limit).
 */
import { failInstanceForGood, isLimitRefusal } from '../../../shared/node-helpers';
import type { SaveCheckpointItem } from '../../../shared/transport';
import type { CheckpointRun } from './run';

/**
 * Fails the instances of `requests` with the refusal `error` (when it is one; any
 * other error changes nothing here). The refusal is what the author sees either
 * way: a failure to record it is not allowed to hide it.
 */
export async function failRefused(
	{ client, node }: Pick<CheckpointRun, 'client' | 'node'>,
	requests: SaveCheckpointItem[],
	error: unknown,
): Promise<void> {
	if (!isLimitRefusal(error)) return;
	const seen = new Set<string>();
	for (const { workflowId, instanceKey, executionId, stepName } of requests) {
		if (seen.has(instanceKey)) continue;
		seen.add(instanceKey);
		const message =
			`${node.name}: step '${stepName}' not saved. ${error.message}. ` +
			'Refused by the sidecar: retry the instance once the limit is raised or the workflow saves less.';
		await failInstanceForGood(client, { workflowId, instanceKey, executionId }, message);
	}
}
