/** What every Durable Checkpoint operation works with: the client, the items and how to find each item's instance. */
import { NodeOperationError } from 'n8n-workflow';
import type { IDataObject, IExecuteFunctions, INode, INodeExecutionData } from 'n8n-workflow';

import { failuresOf, perItem, settledItems, type NodeError } from '../../../shared/batch';
import {
	asNodeError,
	executionIdOf,
	failForSetup,
	instanceFields,
	isoTime,
	setupError,
	sidecarFor,
	UNIT_SECONDS,
	workflowIdOf,
} from '../../../shared/node-helpers';
import { nodeOf } from '../../../shared/run-node';
import type { Instance, SidecarClient } from '../../../shared/transport';
import { nodeParameter, Upstream, type Target } from '../../../shared/upstream';

export interface CheckpointRun {
	node: INode;
	items: INodeExecutionData[];
	client: SidecarClient;
	workflowId: string;
	/** This n8n execution (claims made ahead wait under it in this process). */
	executionId: string;
	upstream: Upstream;
	/** The item's instance, and who acts on it (see targetOf). */
	targetAt: (itemIndex: number) => Target;
}

/** How a version finds each item's instance: by the Resume Point upstream, or by its key. */
export type InstanceFinder = (
	ctx: IExecuteFunctions,
	run: Omit<CheckpointRun, 'targetAt'>,
) => (itemIndex: number) => Target;

export async function runOf(ctx: IExecuteFunctions, find: InstanceFinder): Promise<CheckpointRun> {
	const run = {
		node: nodeOf(ctx),
		items: ctx.getInputData(),
		client: await sidecarFor(ctx),
		workflowId: workflowIdOf(ctx),
		executionId: executionIdOf(ctx),
		upstream: new Upstream(ctx),
	};
	return { ...run, targetAt: find(ctx, run) };
}

/** The instance named by the Instance Key parameter; `hint` says what to do when it is empty. */
export function instanceByKey(
	ctx: IExecuteFunctions,
	{ node, workflowId, executionId }: Omit<CheckpointRun, 'targetAt'>,
	i: number,
	hint: string,
): Target {
	const raw: unknown = ctx.getNodeParameter('instanceKey', i, '');
	const key =
		typeof raw === 'string' ? raw.trim() : raw === undefined || raw === null ? '' : String(raw);
	if (!key) {
		throw new NodeOperationError(node, 'Instance Key is empty for this item', {
			itemIndex: i,
			description: hint,
		});
	}
	return { workflowId, instanceKey: key, executionId };
}

/**
 * One call per item on the item's instance (in parallel, see perItem); the output has the
 * item each call answers (none: the item goes no further), failed items per Continue On Fail.
 */
export async function perInstance(
	ctx: IExecuteFunctions,
	run: CheckpointRun,
	action: string,
	call: (i: number, target: Target) => Promise<INodeExecutionData | undefined>,
): Promise<INodeExecutionData[]> {
	const { node, items, client } = run;
	const targets: Array<Target | NodeError> = items.map((_, i) => {
		try {
			return run.targetAt(i);
		} catch (error) {
			return asNodeError(node, error, i);
		}
	});
	const settled = await perItem(ctx, client, action, items.length, async (i) => {
		const target = targets[i];
		if (target instanceof Error) throw target;
		return await call(i, target);
	});
	if (!ctx.continueOnFail()) {
		await failForSetup(client, node, failuresOf(settled), (i) => {
			const target = targets[i];
			return target instanceof Error ? undefined : target;
		});
	}
	return settledItems(ctx, items, settled, (value) => value);
}

/** A text parameter's value for an item; empty, it fails the item with `message` and `hint`. */
export function requiredText(
	{ node }: Pick<CheckpointRun, 'node'>,
	value: string,
	i: number,
	message: string,
	hint: string,
): string {
	if (!value) throw setupError(node, message, i, hint);
	return value;
}

/** The Date and Time parameter as a time. */
export function timeOf(node: INode, raw: string, i: number): Date {
	const at = new Date(raw);
	if (!raw || Number.isNaN(at.getTime())) {
		throw setupError(
			node,
			`Date and Time is not a valid time: '${raw}'`,
			i,
			'Give an ISO date and time, e.g. 2026-05-01T09:00:00Z.',
		);
	}
	return at;
}

/** The Amount and Unit parameters in seconds. */
export function secondsOf(ctx: IExecuteFunctions, node: INode, i: number): number {
	const amount = Number(nodeParameter(ctx, 'amount', i, 0));
	const unit = nodeParameter(ctx, 'unit', i, 'hours') as string;
	const seconds = Math.round(amount * (UNIT_SECONDS[unit] ?? 1));
	if (!Number.isFinite(seconds) || seconds < 0) {
		throw setupError(
			node,
			`Amount must be zero or more, got ${String(amount)}`,
			i,
			'Set Amount to a number of zero or more.',
		);
	}
	return seconds;
}

/** The instance as the item's durable field says it. */
export const instanceSummary = (inst: Instance | undefined): IDataObject =>
	instanceFields(inst, (i) => ({
		lastSequence: i.lastSequence,
		lastStep: i.lastStep,
		wakeAt: isoTime(i.wakeAt),
		finishedAt: isoTime(i.finishedAt),
	}));
