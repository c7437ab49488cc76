/** Wait for Event: the instance parks until its event arrives (or its timeout passes). */
import type { IDataObject, IExecuteFunctions } from 'n8n-workflow';

import {
	DURABLE_FIELD,
	eventJson,
	failForSetup,
	isObject,
	setupError,
	typeName,
} from '../../../shared/node-helpers';
import { nodeOf } from '../../../shared/run-node';
import { AwaitOutcome } from '../../../shared/transport';
import { nodeParameter } from '../../../shared/upstream';
import {
	instanceSummary,
	perInstance,
	requiredText,
	secondsOf,
	timeOf,
	type CheckpointRun,
} from './run';
import type { OperationFn } from './operations';

/** What an empty Event Name says. */
const EVENT_HINT = 'Name the event this instance waits for, e.g. delivered.';

type Timeout =
	| { $case: 'deadline'; value: Date }
	| { $case: 'timeoutSeconds'; value: number }
	| undefined;

export const execute: OperationFn = async (ctx, run) => {
	const { node, items, client } = run;
	// An instance that waits comes back through the Resume Point before this node when its
	// event arrives or its wait times out: refuse now, while nothing is parked, if that
	// Resume Point has no output for it (a trap found otherwise only days later).
	const blind = resumePointsWithoutWaitOutputs(ctx);
	if (blind.length > 0) {
		// The workflow's setup: every resume would be refused alike, so the instances are failed with it.
		const error = setupError(
			node,
			`Turn on Wait Outputs on ${blind.map((n) => `'${n}'`).join(', ')} before waiting here`,
			undefined,
			'An instance that waits comes back through its Resume Point when the event arrives or the wait times out; without Wait Outputs that Resume Point has no output for it. Nothing was parked.',
		);
		await failForSetup(
			client,
			node,
			items.map((_, i) => [i, error]),
			run.targetAt,
		);
		throw error;
	}
	return await perInstance(ctx, run, 'Waiting for the event', async (i, target) => {
		const eventName = String(nodeParameter(ctx, 'eventName', i, '') ?? '').trim();
		requiredText(run, eventName, i, 'Event Name is empty', EVENT_HINT);
		const answer = await client.awaitEvent({
			...target,
			eventName,
			timeout: timeoutOf(ctx, run, i),
		});
		// Parked: the instance waits without a lease and this item goes no further.
		if (answer.outcome !== AwaitOutcome.AWAIT_OUTCOME_RECEIVED) return undefined;
		const json: IDataObject = { ...items[i].json, event: eventJson(answer.event) };
		json[DURABLE_FIELD] = {
			...(isObject(items[i].json[DURABLE_FIELD])
				? (items[i].json[DURABLE_FIELD] as IDataObject)
				: {}),
			...instanceSummary(answer.instance),
			waitOutcome: 'received',
		};
		return { json, binary: items[i].binary, pairedItem: { item: i } };
	});
};

/** The wait's timeout: none, a time, or a duration of at least a second. */
function timeoutOf(
	ctx: IExecuteFunctions,
	{ node }: Pick<CheckpointRun, 'node'>,
	i: number,
): Timeout {
	const when = nodeParameter(ctx, 'resumeWhen', i, 'never') as string;
	if (when === 'at') {
		return {
			$case: 'deadline',
			value: timeOf(node, ctx.getNodeParameter('wakeAt', i, '') as string, i),
		};
	}
	if (when !== 'after') return undefined;
	const seconds = secondsOf(ctx, node, i);
	if (seconds < 1) {
		throw setupError(
			node,
			'The timeout must be at least 1 second',
			i,
			'Give a longer duration, or set Timeout to No Timeout.',
		);
	}
	return { $case: 'timeoutSeconds', value: seconds };
}

/** Resume Points upstream of this node (enabled ones) that have Wait Outputs off. */
export function resumePointsWithoutWaitOutputs(ctx: IExecuteFunctions): string[] {
	return ctx
		.getParentNodes(nodeOf(ctx).name, { includeNodeParameters: true })
		.filter(
			(parent) =>
				!parent.disabled &&
				typeName(parent.type) === 'resumePoint' &&
				parent.parameters?.waitOutputs !== true,
		)
		.map((parent) => parent.name);
}
