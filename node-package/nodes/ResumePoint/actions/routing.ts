/** Where the Resume Point puts each StartOrResume answer: its outputs, the routed item and its metadata. */
import {
	NodeOperationError,
	type IDataObject,
	type IExecuteFunctions,
	type INode,
	type INodeExecutionData,
} from 'n8n-workflow';

import { keepAheadAnswer, type AheadGuard } from '../../../shared/claim-ahead';
import type { ResumeVersion } from './version';
import { refusal } from '../../../shared/door';
import {
	DURABLE_FIELD,
	durableOf,
	eventJson,
	fromJsonBytes,
	instanceFields,
	isObject,
	runStateName,
} from '../../../shared/node-helpers';
import { nodeOf } from '../../../shared/run-node';
import {
	ResumeReason,
	StartOutcome,
	type Instance,
	type StartOrResumeResponse,
} from '../../../shared/transport';
import { nodeParameter } from '../../../shared/upstream';

/** Fixed outputs, in this order; step outputs and Version Mismatch follow. */
export const OUTPUT_START = 0;
export const OUTPUT_RESUME = 1;
export const OUTPUT_COMPLETED = 2;
export const OUTPUT_IN_PROGRESS = 3;
export const FIXED_OUTPUTS = 4;

type StateMerge = 'merge' | 'replace' | 'field';

/** Version 2 keeps the item's metadata small: what later nodes and authors use. */
export const smallInstanceMeta = (inst: Instance | undefined): IDataObject =>
	instanceFields(inst, (i) => ({
		leaseSeconds: i.leaseSeconds,
		lastStep: i.lastStep,
		lastSequence: i.lastSequence,
		resumeCount: i.resumeCount,
		boundVersion: i.boundVersion,
	}));

export function outcomeName(outcome: StartOutcome): string {
	return (StartOutcome[outcome] ?? 'UNSPECIFIED').replace('START_OUTCOME_', '').toLowerCase();
}

/** Different Delivery: Refuse. The key is in use by another delivery: HTTP 422 for the sender. */
export function differentDeliveryRefused(
	node: INode,
	response: StartOrResumeResponse,
	i: number,
): NodeOperationError {
	const key = response.instance?.instanceKey ?? '';
	return refusal(
		node,
		`Instance Key "${key}" is in use by another delivery: this item differs from the one that started the instance`,
		"Nothing was changed. A sender reusing a key must send the same body (a re-delivery); another order needs its own key. To let such deliveries through, set this Resume Point's Different Delivery to Ignore or Route to Output.",
		i,
		422,
	);
}

export interface RouteSettings {
	stepNames: string[];
	mismatchIndex: number;
	/** Index of the Event output (Timed Out follows it); -1 without Wait Outputs. */
	eventIndex: number;
	executionId: string;
	version: ResumeVersion;
	/** The Idempotency Guard whose key a start claims ahead (shared/claim-ahead), if any. */
	ahead?: AheadGuard;
}

/**
 * The routed item: input JSON (or `replaceJson`) with fresh `durable` metadata.
 * The used claim, a restored state and an earlier hand-off are dropped; `meta` sets them anew when they apply.
 */
export function route(
	item: INodeExecutionData,
	i: number,
	meta: IDataObject,
	replaceJson?: IDataObject,
): INodeExecutionData {
	const previous = { ...durableOf(item) };
	delete previous.claimToken;
	delete previous.state;
	delete previous.boundVersionSnapshot;
	delete previous.runsBoundVersion;
	const base = replaceJson ?? item.json;
	return {
		json: { ...base, [DURABLE_FIELD]: { ...previous, ...meta } },
		binary: item.binary,
		pairedItem: { item: i },
	};
}

/**
 * Puts one StartOrResume answer on its output.
 *
 * Version hand-off: an instance bound to an older version leaves by Version
 * Mismatch with that version's workflow JSON, and with this execution's lease
 * handed over (`claimToken`, `runsBoundVersion`). An Execute Workflow node runs
 * the JSON as a sub-workflow whose own Resume Point (fed by its Execute Workflow
 * Trigger) takes the lease with that claim and, since it runs the bound version,
 * routes the instance by its step instead of sending it to Version Mismatch again.
 */
export function routeResponse(
	ctx: IExecuteFunctions,
	item: INodeExecutionData,
	i: number,
	response: StartOrResumeResponse,
	outputs: INodeExecutionData[][],
	settings: RouteSettings,
): void {
	const meta = settings.version.answerMeta(response);
	switch (response.outcome) {
		case StartOutcome.START_OUTCOME_STARTED: {
			if (settings.ahead) {
				keepAheadAnswer(settings.ahead, settings.executionId, response.startClaim);
			}
			outputs[OUTPUT_START].push(route(item, i, meta));
			return;
		}
		case StartOutcome.START_OUTCOME_FINISHED:
			meta.result = (fromJsonBytes(response.instance?.resultJson) ?? null) as IDataObject;
			meta.errorMessage = response.instance?.errorMessage ?? '';
			outputs[OUTPUT_COMPLETED].push(route(item, i, meta));
			return;
		case StartOutcome.START_OUTCOME_BUSY: {
			// Waiting for an event, parked for a backoff, or suspended: say which.
			const runState = runStateName(response.instance);
			if (runState) meta.runState = runState;
			if (response.instance?.awaitedEvent) meta.awaitedEvent = response.instance.awaitedEvent;
			outputs[OUTPUT_IN_PROGRESS].push(route(item, i, meta));
			return;
		}
		case StartOutcome.START_OUTCOME_RESUMED:
			routeResumed(ctx, item, i, response, outputs, settings, meta);
			return;
		default:
			throw new NodeOperationError(
				nodeOf(ctx),
				`The sidecar answered an unknown outcome ${response.outcome}`,
				{
					itemIndex: i,
					description: "Upgrade this node package to the sidecar's version.",
				},
			);
	}
}

/** A resumed instance: by its wait's end, to Version Mismatch, to its step's output, or Resume. */
function routeResumed(
	ctx: IExecuteFunctions,
	item: INodeExecutionData,
	i: number,
	response: StartOrResumeResponse,
	outputs: INodeExecutionData[][],
	{ stepNames, mismatchIndex, eventIndex, executionId, version }: RouteSettings,
	meta: IDataObject,
): void {
	const handedOver = durableOf(item).runsBoundVersion;
	const runsBound = runsBoundVersion(item, response);
	const json = restored(ctx, item, i, version.resumedState(response), meta);
	Object.assign(meta, version.checkpointMeta(response.latestCheckpoint));
	if (runsBound) meta.runsBoundVersion = handedOver;
	if (refusesVersion(item, response, mismatchIndex)) {
		throw versionRefused(ctx, response, i);
	}
	const toMismatch = response.versionMismatch && mismatchIndex >= 0 && !runsBound;
	const waitOutcome = response.waitOutcome;
	if (
		(waitOutcome === ResumeReason.RESUME_REASON_EVENT ||
			waitOutcome === ResumeReason.RESUME_REASON_TIMEOUT) &&
		!toMismatch
	) {
		// The instance's last wait ended (and nothing was saved since): its event, or its timeout.
		routeWaited(ctx, item, i, response, outputs, eventIndex, meta, json);
		return;
	}
	if (toMismatch) {
		const bound = response.boundVersion;
		if (bound) {
			// This execution holds the lease; the sub-workflow running `bound` takes it over.
			meta.claimToken = executionId;
			meta.runsBoundVersion = bound.version;
		}
		meta.boundVersionSnapshot = bound
			? {
					version: bound.version,
					label: bound.label,
					contentHash: bound.contentHash,
					n8nVersionId: bound.n8nVersionId,
					workflow: (fromJsonBytes(bound.definitionJson) ?? null) as IDataObject,
				}
			: null;
		outputs[mismatchIndex].push(route(item, i, meta, json));
		return;
	}
	const stepIndex = stepNames.indexOf(response.instance?.lastStep ?? '');
	const target = stepIndex >= 0 ? FIXED_OUTPUTS + stepIndex : OUTPUT_RESUME;
	outputs[target].push(route(item, i, meta, json));
}

/** Whether the item was handed over (the Old Version output's claim) to run the instance's bound version. */
function runsBoundVersion(item: INodeExecutionData, response: StartOrResumeResponse): boolean {
	const handedOver = durableOf(item).runsBoundVersion;
	return (
		typeof handedOver === 'number' &&
		handedOver > 0 &&
		handedOver === (response.instance?.boundVersion ?? 0)
	);
}

/**
 * Whether a resumed instance is refused: bound to another version, and no way
 * to run that version here (no Old Version output, or a bound version that has
 * no Execute Workflow Trigger feeding a Resume Point, so that a sub-workflow of
 * it could not start: n8n fails such a run with "Missing node to start execution").
 */
export function refusesVersion(
	item: INodeExecutionData,
	response: StartOrResumeResponse,
	mismatchIndex: number,
): boolean {
	return (
		response.outcome === StartOutcome.START_OUTCOME_RESUMED &&
		response.versionMismatch &&
		!runsBoundVersion(item, response) &&
		(mismatchIndex < 0 || !handsOff(response))
	);
}

/** Whether the bound version (when its snapshot came back) can run as the Old Version output's sub-workflow. */
function handsOff(response: StartOrResumeResponse): boolean {
	const bound = response.boundVersion;
	if (!bound?.definitionJson?.length) return true; // no snapshot (a label mismatch): the author's branch decides
	const workflow = fromJsonBytes(bound.definitionJson) as
		| { nodes?: unknown; connections?: unknown }
		| undefined;
	const nodes = Array.isArray(workflow?.nodes) ? (workflow.nodes as IDataObject[]) : [];
	const resumePoints = new Set(
		nodes
			.filter((n) => typeof n.type === 'string' && n.type.endsWith('.resumePoint'))
			.map((n) => n.name as string),
	);
	const connections = isObject(workflow?.connections) ? workflow.connections : {};
	return nodes.some((n) => {
		if (n.type !== 'n8n-nodes-base.executeWorkflowTrigger' || n.disabled === true) return false;
		const main = (connections[n.name as string] as IDataObject | undefined)?.main;
		return (
			Array.isArray(main) &&
			main.some(
				(targets) =>
					Array.isArray(targets) &&
					targets.some((t) => resumePoints.has((t as IDataObject | null)?.node as string)),
			)
		);
	});
}

/**
 * Why a resumed instance bound to another version is refused (its next steps would run logic
 * it never moved to; nothing of it runs and the Resume Point suspends it), and the ways on:
 * run its own version through the Old Version output, or move it on purpose.
 */
export function versionRefused(
	ctx: IExecuteFunctions,
	response: StartOrResumeResponse,
	i: number,
): NodeOperationError {
	const key = response.instance?.instanceKey ?? '';
	const workflow = response.instance?.workflowId || 'WORKFLOW';
	const bound = response.instance?.boundVersion ?? 0;
	const current = response.currentVersion;
	const label = response.boundVersion?.label ? ` (${response.boundVersion.label})` : '';
	const move = `move it to version ${current} on purpose, logged: durable-sidecar instances move ${workflow} --to ${current} --key ${key} --reason "…"`;
	const resume = `It is suspended until then (durable-sidecar instances list --workflow ${workflow} --status suspended); once that is done: durable-sidecar instances resume ${workflow} ${key} --reason "…" (or operations start resume for many).`;
	const ways = handsOff(response)
		? `Keep its version: turn on Version Mismatch Output on this Resume Point and wire Old Version to an Execute Workflow that runs the bound version's JSON (docs/concepts.md, "Running the bound version in n8n"). Or ${move}.`
		: `Version ${bound} has no Execute Workflow Trigger feeding its Resume Point, so the Old Version output cannot run it as a sub-workflow: ${move}. (Later versions that have the trigger can be run so.)`;
	return new NodeOperationError(
		nodeOf(ctx),
		`Instance ${key} is bound to version ${bound}${label} of this workflow, but this execution runs version ${current}: its next steps would run logic it never moved to`,
		{ itemIndex: i, description: `Nothing of it ran. ${ways} ${resume}` },
	);
}

/** The item's JSON with the restored state, per Restore State (under durable.state: in `meta`). */
function restored(
	ctx: IExecuteFunctions,
	item: INodeExecutionData,
	i: number,
	state: unknown,
	meta: IDataObject,
): IDataObject | undefined {
	const mode = nodeParameter(ctx, 'options.stateMerge', i, 'merge') as StateMerge;
	if (state === undefined) return undefined;
	if (mode === 'replace') {
		return isObject(state) ? state : { state: state as IDataObject[string] };
	}
	if (mode === 'merge') {
		return isObject(state)
			? { ...item.json, ...state }
			: { ...item.json, state: state as IDataObject[string] };
	}
	meta.state = state as IDataObject[string];
	return undefined;
}

/** A resumed instance whose wait ended: Event (with the event) or Timed Out. */
function routeWaited(
	ctx: IExecuteFunctions,
	item: INodeExecutionData,
	i: number,
	response: StartOrResumeResponse,
	outputs: INodeExecutionData[][],
	eventIndex: number,
	meta: IDataObject,
	json: IDataObject | undefined,
): void {
	const waitOutcome = response.waitOutcome;
	if (eventIndex < 0) {
		throw new NodeOperationError(
			nodeOf(ctx),
			`Instance ${response.instance?.instanceKey ?? ''} was resumed after its wait ${waitOutcome === ResumeReason.RESUME_REASON_EVENT ? 'received its event' : 'timed out'}, but this Resume Point has no Wait Outputs`,
			{
				itemIndex: i,
				description:
					'Turn on Wait Outputs on this Resume Point and connect Event (the awaited event arrived) and Timed Out. The instance is handed out again with its event once its lease lapses.',
			},
		);
	}
	const timedOut = waitOutcome === ResumeReason.RESUME_REASON_TIMEOUT;
	meta.waitOutcome = timedOut ? 'timedOut' : 'event';
	const base = json ?? { ...item.json };
	if (!timedOut) base.event = eventJson(response.event);
	outputs[timedOut ? eventIndex + 1 : eventIndex].push(route(item, i, meta, base));
}
