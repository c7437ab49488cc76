/** Retry, Resume and Cancel: an operator's action on an instance, with a reason for its audit trail. */
import type { IDataObject, IExecuteFunctions, INodeExecutionData } from 'n8n-workflow';

import { GrpcStatus } from '../../../shared/errors';
import { instanceFields, runStateName } from '../../../shared/node-helpers';
import type { Instance } from '../../../shared/transport';
import { callPerItem, type InstanceRun } from './run';

const ACTION_HINTS: Partial<Record<number, string>> = {
	[GrpcStatus.NOT_FOUND]:
		"No instance has this key in that workflow. Check Workflow ID (the target workflow's ID; empty means this workflow) and Instance Key.",
	[GrpcStatus.FAILED_PRECONDITION]:
		'The instance is in a state that forbids this action: Retry takes suspended and failed instances; Resume takes suspended ones and running ones that wait (for an event, a wake-up or a retry backoff); Cancel takes any unfinished one.',
};

/** The request of an instance action. */
export interface ActionRequest {
	workflowId: string;
	instanceKey: string;
	actor: string;
	reason: string;
}

export async function instanceAction(
	ctx: IExecuteFunctions,
	run: InstanceRun,
	operation: 'retry' | 'resume' | 'cancel',
	action: string,
	call: (request: ActionRequest) => Promise<{ instance?: Instance }>,
): Promise<INodeExecutionData[][]> {
	return await callPerItem(ctx, run, action, ACTION_HINTS, (i) => {
		const { workflowId, instanceKey } = run.target(i);
		const reason = run.required(
			'reason',
			'Reason',
			i,
			"Say why; the reason is kept in the instance's audit trail.",
		);
		const actor = run.text('options.actor', i) || run.who;
		const request = { workflowId, instanceKey, actor, reason };
		return async () => {
			const response = await call(request);
			return { instance: { action: operation, ...instanceJson(response.instance) } };
		};
	});
}

/** The instance as the action left it. */
const instanceJson = (inst: Instance | undefined): IDataObject =>
	instanceFields(inst, (i) => ({
		runState: runStateName(i),
		lastStep: i.lastStep,
		attempt: i.attempt,
		errorMessage: i.errorMessage,
		lastError: i.lastError,
	}));
