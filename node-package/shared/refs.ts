/**
 * What durable nodes leave on an item for the nodes after them: the instance
 * it belongs to (its `durable` field) and an Idempotency Guard's answer (its
 * `idempotency` field), read back here; and the target a call about an
 * instance names.
 */
import { NodeOperationError, type IDataObject, type IExecuteFunctions } from 'n8n-workflow';

import { DURABLE_FIELD, IDEMPOTENCY_FIELD, isObject } from './node-helpers';
import { nodeOf } from './run-node';

/** The instance an item belongs to, as the Resume Point (or a later durable node) put it on an item. */
export interface InstanceRef {
	workflowId: string;
	instanceKey: string;
	/** The instance's lease length in seconds; 0 when unknown. */
	leaseSeconds: number;
}

/** An Idempotency Guard answer upstream of an item. */
export interface ClaimRef {
	scope: string;
	key: string;
	attempt: number;
	/** acquired, duplicate, in_progress, recorded, released */
	outcome: string;
	/** The replayed result of a duplicate. */
	result?: unknown;
}

/** An instance and who acts on it in this execution: what every call about an instance names. */
export interface Target {
	workflowId: string;
	instanceKey: string;
	/** The lease owner and claim holder: the execution that holds the instance. */
	executionId: string;
}

/** The execution that called this one (Execute Workflow), when this is a sub-workflow's execution. */
export function parentExecutionIdOf(ctx: IExecuteFunctions): string | undefined {
	const context =
		typeof ctx.getExecutionContext === 'function' ? ctx.getExecutionContext() : undefined;
	const parent = context?.parentExecutionId;
	return parent ? String(parent) : undefined;
}

/**
 * The instance `ref` and the execution that acts on it here. An instance of
 * this workflow: this execution. Another workflow's instance reaches a node
 * only in a sub-workflow that workflow called (Execute Workflow hands the
 * items on with their `durable` field): the calling execution holds the
 * instance's lease while the sub-workflow runs, so the sub-workflow acts as
 * that execution. Its saves leave the lease where it is, and its claims are
 * the caller's, so a resumed caller takes them over at once as its own.
 * Anywhere else another workflow's instance is an error, before any call.
 */
export function targetOf(
	ctx: IExecuteFunctions,
	ref: InstanceRef,
	itemIndex: number,
	own: { workflowId: string; executionId: string },
): Target {
	if (!ref.workflowId || ref.workflowId === own.workflowId) {
		return {
			workflowId: own.workflowId,
			instanceKey: ref.instanceKey,
			executionId: own.executionId,
		};
	}
	const caller = parentExecutionIdOf(ctx);
	if (!caller) {
		throw new NodeOperationError(
			nodeOf(ctx),
			`The item belongs to instance '${ref.instanceKey}' of workflow ${ref.workflowId}, not of this workflow (${own.workflowId})`,
			{
				itemIndex,
				description:
					"A durable node acts on another workflow's instance only in a sub-workflow that workflow runs (Execute Workflow with the items' durable field passed on). Here, remove the item's durable field before the Resume Point, or set Instance to By Key.",
			},
		);
	}
	return { workflowId: ref.workflowId, instanceKey: ref.instanceKey, executionId: caller };
}

export function instanceRefOf(json: IDataObject): InstanceRef | undefined {
	const meta = json[DURABLE_FIELD];
	if (!isObject(meta) || typeof meta.instanceKey !== 'string' || !meta.instanceKey)
		return undefined;
	return {
		workflowId: typeof meta.workflowId === 'string' ? meta.workflowId : '',
		instanceKey: meta.instanceKey,
		leaseSeconds: typeof meta.leaseSeconds === 'number' ? meta.leaseSeconds : 0,
	};
}

export function claimRefOf(json: IDataObject): ClaimRef | undefined {
	const meta = json[IDEMPOTENCY_FIELD];
	if (!isObject(meta) || typeof meta.scope !== 'string' || typeof meta.key !== 'string') {
		return undefined;
	}
	return {
		scope: meta.scope,
		key: meta.key,
		attempt: typeof meta.attempt === 'number' ? meta.attempt : 0,
		outcome: typeof meta.outcome === 'string' ? meta.outcome : '',
		result: meta.result,
	};
}
