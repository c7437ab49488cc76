/** Version 2: operations find their instance from the Resume Point upstream, or by key when asked. */
import { nodeParameter, targetOf } from '../../../../shared/upstream';
import type { CheckpointVersion } from '../../actions/operations';
import { execute as awaitEvent } from '../../actions/awaitEvent.operation';
import { execute as complete } from '../../actions/complete.operation';
import { execute as fail } from '../../actions/fail.operation';
import { instanceByKey } from '../../actions/run';
import { execute as scheduleResume } from '../../actions/scheduleResume.operation';
import { execute as save } from './save.operation';

export const version2: CheckpointVersion = {
	findInstance: (ctx, run) => {
		const { workflowId, executionId, upstream, items } = run;
		if (nodeParameter(ctx, 'instanceFrom', 0, 'resumePoint') === 'key') {
			return (i) =>
				instanceByKey(
					ctx,
					run,
					i,
					'Give the business key of the instance, or set Instance to From Resume Point.',
				);
		}
		return (i) => {
			const ref = upstream.requireInstance(
				i,
				items[i],
				'Or set Instance to By Key and give the key.',
			);
			return targetOf(ctx, ref, i, { workflowId, executionId });
		};
	},
	operations: { save, complete, fail, scheduleResume, awaitEvent },
};
