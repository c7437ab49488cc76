/** Version 1: every operation finds its instance by the Instance Key parameter. */
import type { CheckpointVersion } from '../../actions/operations';
import { execute as awaitEvent } from '../../actions/awaitEvent.operation';
import { execute as complete } from '../../actions/complete.operation';
import { execute as fail } from '../../actions/fail.operation';
import { instanceByKey } from '../../actions/run';
import { execute as scheduleResume } from '../../actions/scheduleResume.operation';
import { execute as save } from './save.operation';

export const version1: CheckpointVersion = {
	findInstance: (ctx, run) => (i) =>
		instanceByKey(
			ctx,
			run,
			i,
			"The item carries no durable.instanceKey (a node since the Resume Point replaced it). Set Instance Key to {{ $('Resume Point').item.json.durable.instanceKey }}.",
		),
	operations: { save, complete, fail, scheduleResume, awaitEvent },
};
