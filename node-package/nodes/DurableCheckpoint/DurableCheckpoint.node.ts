import {
	NodeConnectionTypes,
	NodeOperationError,
	type IDataObject,
	type IExecuteFunctions,
	type INode,
	type INodeExecutionData,
	type INodeParameters,
	type INodeType,
	type INodeTypeDescription,
} from 'n8n-workflow';

import { nodeOf } from '../../shared/run-node';
import { findAheadGuard, instanceClaim, keepAheadAnswer } from '../../shared/claim-ahead';
import { batched, perItem, type NodeError } from '../../shared/batch';
import { testSidecarCredential } from '../../shared/credential-test';
import { versionViews } from '../../shared/versions';
import { longestWait, uncoverableWait, waitsAhead, type WaitAhead } from '../../shared/waits';
import {
	asNodeError,
	DURABLE_FIELD,
	errorItem,
	eventJson,
	executionIdOf,
	fieldList,
	fromJsonBytes,
	isObject,
	jsonParameter,
	pickFields,
	sidecarFor,
	toJsonBytes,
	userJson,
	withDurable,
	typeName,
	UNIT_SECONDS,
	workflowIdOf,
} from '../../shared/node-helpers';
import {
	AwaitOutcome,
	InstanceStatus,
	StateMode,
	type AwaitEventResponse,
	type ClaimItem,
	type Instance,
	type SaveCheckpointItem,
	type SidecarClient,
} from '../../shared/transport';
import {
	parameterReader,
	shareUnchanged,
	targetOf,
	Upstream,
	type ClaimRef,
	type Target,
	nodeParameter,
} from '../../shared/upstream';

type Operation = 'save' | 'complete' | 'fail' | 'scheduleResume' | 'awaitEvent';

/**
 * One output; Wait for Event labels it Received (only items whose event was
 * already in the mailbox leave; a parked instance ends the execution here).
 * Evaluated by n8n as an expression, so it must be self-contained.
 */
const configuredOutputs = (parameters: INodeParameters) =>
	parameters.operation === 'awaitEvent' ? [{ type: 'main', displayName: 'Received' }] : ['main'];

const V1 = { '@version': [1] };
const V2 = { '@version': [{ _cnd: { gte: 2 } }] };

/** The sidecar's default lease (DURABLE_LEASE_SECONDS), for an item that does not say its instance's. */
const DEFAULT_LEASE_SECONDS = 300;

function instanceSummary(inst: Instance | undefined): IDataObject {
	if (!inst) return {};
	return {
		workflowId: inst.workflowId,
		instanceKey: inst.instanceKey,
		status: InstanceStatus[inst.status]?.replace('INSTANCE_STATUS_', '').toLowerCase() ?? 'unknown',
		lastSequence: inst.lastSequence,
		lastStep: inst.lastStep,
		wakeAt: inst.wakeAt ? inst.wakeAt.toISOString() : null,
		finishedAt: inst.finishedAt ? inst.finishedAt.toISOString() : null,
	};
}

interface SaveContext {
	client: SidecarClient;
	/** This n8n execution (claims made ahead wait under it in this process). */
	executionId: string;
	upstream: Upstream;
	/** The item's instance, and who acts on it (see targetOf). */
	targetAt: (itemIndex: number) => Target;
}

/** What one item sends, and what its output item is built from. */
interface PreparedSave {
	request: SaveCheckpointItem;
	/** The state sent (for REPLACE saves, the stored state). */
	state: unknown;
	/** The instance's lease length as the item knows it (0: unknown). */
	leaseSeconds: number;
}

/** Save: every item in one SaveCheckpoints call (chunked), one output item per input item. */
async function saveCheckpoints(
	ctx: IExecuteFunctions,
	{ client, executionId, upstream, targetAt }: SaveContext,
): Promise<INodeExecutionData[]> {
	const items = ctx.getInputData();
	const node = nodeOf(ctx);
	const v2 = node.typeVersion >= 2;
	const out: INodeExecutionData[] = [];
	// Plain parameters are read once per run; expressions per item.
	const stepNameOf = parameterReader(ctx, 'stepName', '');
	const saveWhatOf = parameterReader(ctx, 'saveWhat', v2 ? 'stepResult' : 'item');
	const fieldsOf = parameterReader(ctx, 'fields', '');
	const leaseOf = parameterReader<number>(ctx, 'options.leaseSeconds', 0);
	// n8n treats an undefined fallback as "required": '' marks "option not added".
	const expectedOf = parameterReader<number | string>(ctx, 'options.expectedSequence', '');
	const completeClaimed =
		v2 && (nodeParameter(ctx, 'options.completeClaimedKey', 0, true) as boolean);
	const completeInstanceOf = parameterReader<boolean>(ctx, 'options.completeInstance', false);
	// v2: the Idempotency Guard right after this Save, whose key this call claims ahead.
	const ahead = v2 ? findAheadGuard(ctx, { onlyChild: false }) : undefined;
	// v2: an n8n Wait node after this Save; the renewal then covers the wait too (shared/waits).
	const wait = v2 ? longestWait(waitsAhead(ctx)) : undefined;
	const claimedAhead = new Set<string>();

	const prepared = new Map<number, PreparedSave>();
	const problems = new Map<number, NodeError>();
	for (let i = 0; i < items.length; i++) {
		const item = items[i];
		try {
			const stepName = String(stepNameOf(i) ?? '').trim();
			if (!stepName) {
				throw new NodeOperationError(node, 'Step Name is empty', {
					itemIndex: i,
					description: 'Name the step that has just finished, e.g. payment-captured.',
				});
			}
			const saveWhat = saveWhatOf(i) as string;
			const claim: ClaimRef | undefined =
				v2 && (completeClaimed || saveWhat === 'stepResult') ? upstream.claim(i, item) : undefined;
			let state: unknown;
			if (saveWhat === 'stepResult') {
				// Done Before: the side effect ran earlier; its replayed result is the step's result.
				state =
					claim?.outcome === 'duplicate' ? (claim.result ?? null) : (userJson(item) as unknown);
			} else if (saveWhat === 'fields') {
				state = pickFields(userJson(item), fieldList(fieldsOf(i) as string));
			} else if (saveWhat === 'json') {
				state = jsonParameter(node, ctx.getNodeParameter('stateJson', i, '{}'), 'State (JSON)', i);
			} else {
				state = userJson(item);
			}
			const expected = expectedOf(i);
			const expectedSequence =
				expected === '' || expected === null || expected === undefined
					? undefined
					: Number(expected);
			if (expectedSequence !== undefined && !Number.isInteger(expectedSequence)) {
				throw new NodeOperationError(
					node,
					`Expected Sequence must be a whole number, got ${String(expected)}`,
					{ itemIndex: i },
				);
			}
			const completeKey =
				completeClaimed && claim?.outcome === 'acquired' && claim.attempt >= 1
					? {
							scope: claim.scope,
							key: claim.key,
							attempt: claim.attempt,
							// Empty: the key's result is the saved step result.
							resultJson: Buffer.alloc(0),
						}
					: undefined;
			const target = targetAt(i);
			const { workflowId, instanceKey } = target;
			const completeInstance = v2 && completeInstanceOf(i) === true;
			const leaseSeconds = v2
				? ((upstream.instance(i, item) ?? upstream.callerInstance())?.leaseSeconds ?? 0)
				: 0;
			let claimNext: ClaimItem | undefined;
			if (ahead && !completeInstance) {
				// The instance as the Guard will find it on this Save's output item.
				claimNext = instanceClaim(
					ahead,
					{ workflowId, instanceKey, leaseSeconds },
					{ workflowId, executionId: target.executionId },
				);
				const id = JSON.stringify([claimNext.scope, claimNext.key]);
				if (claimedAhead.has(id)) claimNext = undefined;
				else claimedAhead.add(id);
			}
			prepared.set(i, {
				request: {
					workflowId,
					instanceKey,
					stepName,
					stateJson: toJsonBytes(state),
					executionId: target.executionId,
					nodeName: node.name,
					expectedSequence,
					// A completed instance holds no lease: nothing after it waits on one.
					leaseSeconds: completeInstance
						? leaseOf(i)
						: renewalFor(node, leaseOf(i), leaseSeconds, wait, i),
					stateMode: !v2
						? StateMode.STATE_MODE_UNSPECIFIED
						: saveWhat === 'stepResult'
							? StateMode.STATE_MODE_ADD_STEP_RESULT
							: StateMode.STATE_MODE_REPLACE,
					completeKey,
					// The last Save: the instance is completed in the same call (no Complete Instance node).
					completeInstance,
					claimNext,
				},
				state,
				leaseSeconds,
			});
		} catch (error) {
			problems.set(i, asNodeError(node, error, i));
		}
	}
	// Parameter problems are reported before anything is saved.
	if (problems.size > 0 && !ctx.continueOnFail()) throw problems.values().next().value as NodeError;
	completeOnLastItem(prepared);
	const indexes = [...prepared.keys()];
	const results = indexes.length
		? await batched(ctx, client, 'Saving the checkpoint', indexes, async (batch) => {
				const response = await client.saveCheckpoints({
					items: batch.map((i) => prepared.get(i)!.request),
				});
				return response.results;
			})
		: new Map<number, never>();
	for (let i = 0; i < items.length; i++) {
		const problem = problems.get(i);
		const result = results.get(i);
		const failure = problem ?? (result && !result.ok ? result.error : undefined);
		if (failure) {
			if (!ctx.continueOnFail()) throw failure;
			out.push(errorItem(items[i], failure, i));
			continue;
		}
		if (!result || !result.ok) continue;
		const cp = result.value.checkpoint;
		const sent = prepared.get(i)!;
		const stepName = cp?.stepName ?? sent.request.stepName;
		if (!v2) {
			out.push(
				withDurable(
					items[i],
					{
						workflowId: sent.request.workflowId,
						instanceKey: sent.request.instanceKey,
						lastSequence: cp?.sequence ?? 0,
						lastStep: stepName,
						checkpoint: {
							sequence: cp?.sequence ?? 0,
							stepName,
							sha256: cp?.sha256 ?? '',
							sizeBytes: cp?.sizeBytes ?? 0,
							deduplicated: result.value.deduplicated,
							createdAt: cp?.createdAt ? cp.createdAt.toISOString() : null,
						},
					},
					i,
				),
			);
			continue;
		}
		// v2: the item becomes the instance's state as stored, so the next node
		// sees the start fields and every step's result; the metadata stays small.
		const stored =
			sent.request.stateMode === StateMode.STATE_MODE_ADD_STEP_RESULT
				? fromJsonBytes(result.value.stateJson)
				: sent.state;
		const json: IDataObject = isObject(stored)
			? { ...stored }
			: { state: (stored ?? null) as IDataObject[string] };
		// Unchanged fields keep the objects the item came with (a small execution record).
		shareUnchanged(json, (upstream.claimItem(i, items[i]) ?? items[i]).json, DURABLE_FIELD);
		const meta: IDataObject = {
			workflowId: sent.request.workflowId,
			instanceKey: sent.request.instanceKey,
			leaseSeconds: sent.leaseSeconds,
			lastStep: stepName,
			lastSequence: cp?.sequence ?? 0,
			deduplicated: result.value.deduplicated,
		};
		const completed = result.value.completedKey;
		if (completed) meta.completedKey = { scope: completed.scope, key: completed.key };
		const finished = result.value.completedInstance;
		if (finished) {
			// As the Complete Instance operation says it.
			const summary = instanceSummary(finished);
			meta.status = summary.status;
			meta.finishedAt = summary.finishedAt;
		}
		if (ahead) keepAheadAnswer(ahead, executionId, result.value.nextClaim);
		json[DURABLE_FIELD] = meta;
		out.push({ json, binary: items[i].binary, pairedItem: { item: i } });
	}
	return out;
}

/**
 * The lease this Save renews: its own Lease option when set (the author's
 * choice), else, when an n8n Wait node follows, the instance's lease plus the
 * longest wait, so the instance is not taken for crashed while n8n waits;
 * else 0 (the instance's own length). A wait no lease can cover is an error
 * before anything is saved.
 */
function renewalFor(
	node: INode,
	option: number,
	instanceLease: number,
	wait: WaitAhead | undefined,
	itemIndex: number,
): number {
	if (option || !wait) return option;
	const lease = (instanceLease || DEFAULT_LEASE_SECONDS) + (wait.seconds ?? 0);
	const error = uncoverableWait(node, 'Save', wait, lease, itemIndex);
	if (error) throw error;
	return lease;
}

/**
 * Complete Instance on several items of one instance (its line items after a Split Out, say):
 * every item is saved, in item order, and the instance completes with its last one. The sidecar
 * refuses a completion before a later save to the same instance, which an author could only
 * avoid with an expression.
 */
function completeOnLastItem(prepared: Map<number, PreparedSave>): void {
	const last = new Map<string, number>();
	for (const [i, { request }] of prepared) {
		if (request.completeInstance) last.set(request.instanceKey, i);
	}
	for (const [i, { request }] of prepared) {
		if (request.completeInstance && last.get(request.instanceKey) !== i) {
			request.completeInstance = false;
		}
	}
}

export class DurableCheckpoint implements INodeType {
	description: INodeTypeDescription = {
		displayName: 'Durable Checkpoint',
		name: 'durableCheckpoint',
		icon: { light: 'file:durableCheckpoint.svg', dark: 'file:durableCheckpoint.dark.svg' },
		group: ['transform'],
		version: [1, 2],
		defaultVersion: 2,
		subtitle:
			'={{ $parameter["operation"] === "save" ? "save: " + ($parameter["stepName"] || "(no step name)") : $parameter["operation"] === "awaitEvent" ? "wait for: " + ($parameter["eventName"] || "(no event name)") : ({ complete: "complete instance", fail: "fail instance", scheduleResume: "schedule resume" })[$parameter["operation"]] || "" }}',
		description:
			"Save the state after a step so the instance resumes here after a crash (each save renews the instance's lease, as long as chosen on the Resume Point); complete, fail, schedule a durable wake-up of an instance or park it until an event arrives",
		defaults: { name: 'Durable Checkpoint' },
		usableAsTool: true,
		inputs: [NodeConnectionTypes.Main],
		outputs: `={{(${configuredOutputs})($parameter)}}`,
		credentials: [{ name: 'durableSidecarApi', required: true, testedBy: 'durableSidecarApiTest' }],
		properties: [
			{
				displayName: 'Operation',
				name: 'operation',
				type: 'options',
				noDataExpression: true,
				default: 'save',
				options: [
					{
						name: 'Complete Instance',
						value: 'complete',
						description:
							'Mark the instance finished; a re-delivered trigger then leaves the Resume Point by Completed',
						action: 'Complete an instance',
					},
					{
						name: 'Fail Instance',
						value: 'fail',
						description: 'Mark the instance failed with a reason; it is not resumed again',
						action: 'Fail an instance',
					},
					{
						name: 'Save',
						value: 'save',
						description: 'Save the state after a step (and renew the instance lease)',
						action: 'Save a checkpoint',
					},
					{
						name: 'Schedule Resume',
						value: 'scheduleResume',
						description:
							'Wake the instance later (durably, surviving restarts) through the Resume Trigger; replaces long Wait nodes',
						action: 'Schedule a resume',
					},
					{
						name: 'Wait for Event',
						value: 'awaitEvent',
						description:
							'Park the instance (no lease, never stalled) until a Durable Instance node or the API signals the named event, with an optional timeout; replaces a Wait node on a webhook',
						action: 'Wait for an event',
					},
				],
			},
			{
				displayName: 'Instance Key',
				name: 'instanceKey',
				type: 'string',
				default: '={{ $json.durable?.instanceKey }}',
				required: true,
				description:
					'The instance to act on. The Resume Point puts it on the item as durable.instanceKey.',
				hint: "If a node since the Resume Point replaced the item, use {{ $('Resume Point').item.json.durable.instanceKey }}",
				displayOptions: { show: V1 },
			},
			{
				displayName: 'Instance',
				name: 'instanceFrom',
				type: 'options',
				noDataExpression: true,
				default: 'resumePoint',
				options: [
					{
						name: 'From Resume Point',
						value: 'resumePoint',
						description:
							'The instance of the Resume Point this item came from (followed back through the nodes in between, even if they replaced the item)',
					},
					{ name: 'By Key', value: 'key', description: 'An instance key you give' },
				],
				displayOptions: { show: V2 },
			},
			{
				displayName: 'Instance Key',
				name: 'instanceKey',
				type: 'string',
				default: '',
				required: true,
				placeholder: 'e.g. {{ $json.orderId }}',
				description: "The business key of the instance, as on this workflow's Resume Point",
				displayOptions: { show: { ...V2, instanceFrom: ['key'] } },
			},
			{
				displayName: 'Step Name',
				name: 'stepName',
				type: 'string',
				default: '',
				required: true,
				placeholder: 'e.g. payment-captured',
				description:
					'Name of the step that has just finished. The Resume Point can route resumed instances by it (Step Outputs).',
				displayOptions: { show: { operation: ['save'] } },
			},
			{
				displayName: 'State to Save',
				name: 'saveWhat',
				type: 'options',
				default: 'item',
				options: [
					{
						name: 'Whole Item',
						value: 'item',
						description: 'All fields of the item, without the durable metadata',
					},
					{ name: 'Chosen Fields', value: 'fields', description: 'Only the fields you list' },
					{
						name: 'Custom JSON',
						value: 'json',
						description: 'A JSON value built with an expression',
					},
				],
				displayOptions: { show: { operation: ['save'], ...V1 } },
			},
			{
				displayName: 'State to Save',
				name: 'saveWhat',
				type: 'options',
				default: 'stepResult',
				options: [
					{
						name: 'Add Step Result',
						value: 'stepResult',
						description:
							"The item (the step's result, e.g. the HTTP response) is added to the instance's state under the step name; the state keeps the start item and every earlier step's result. After Done Before, the replayed result is saved.",
					},
					{
						name: 'Whole Item',
						value: 'item',
						description: 'The item, without the durable metadata, replaces the state',
					},
					{
						name: 'Chosen Fields',
						value: 'fields',
						description: 'Only the fields you list replace the state',
					},
					{
						name: 'Custom JSON',
						value: 'json',
						description: 'A JSON value built with an expression replaces the state',
					},
				],
				displayOptions: { show: { operation: ['save'], ...V2 } },
			},
			{
				displayName: 'Fields',
				name: 'fields',
				type: 'string',
				default: '',
				required: true,
				placeholder: 'e.g. orderId, payment.reference, customer.email',
				description: 'Comma-separated field names; dots reach into nested objects',
				displayOptions: { show: { operation: ['save'], saveWhat: ['fields'] } },
			},
			{
				displayName: 'State (JSON)',
				name: 'stateJson',
				type: 'json',
				default: '{}',
				required: true,
				displayOptions: { show: { operation: ['save'], saveWhat: ['json'] } },
			},
			{
				displayName: 'Result',
				name: 'resultWhat',
				type: 'options',
				default: 'none',
				options: [
					{ name: 'None', value: 'none' },
					{ name: 'Whole Item', value: 'item' },
					{ name: 'Custom JSON', value: 'json' },
				],
				description: "What to store as the instance's result",
				displayOptions: { show: { operation: ['complete'] } },
			},
			{
				displayName: 'Result (JSON)',
				name: 'resultJson',
				type: 'json',
				default: '{}',
				displayOptions: { show: { operation: ['complete'], resultWhat: ['json'] } },
			},
			{
				displayName: 'Reason',
				name: 'errorMessage',
				type: 'string',
				default: '',
				required: true,
				placeholder: 'e.g. payment declined',
				description: 'Why the instance failed (kept on the instance, up to 4096 characters)',
				displayOptions: { show: { operation: ['fail'] } },
			},
			{
				displayName: 'Event Name',
				name: 'eventName',
				type: 'string',
				default: '',
				required: true,
				placeholder: 'e.g. delivered',
				description:
					'The event to wait for. A signal with this name sent before the instance got here is kept and consumed now (the item leaves by Received); otherwise the instance waits and the execution ends here.',
				displayOptions: { show: { operation: ['awaitEvent'] } },
			},
			{
				displayName: 'Timeout',
				name: 'resumeWhen',
				type: 'options',
				default: 'never',
				options: [
					{ name: 'No Timeout', value: 'never' },
					{ name: 'After a Duration', value: 'after' },
					{ name: 'At a Time', value: 'at' },
				],
				description:
					'When to stop waiting: the Resume Trigger then hands the instance out and the Resume Point sends it to Timed Out (turn on its Wait Outputs)',
				displayOptions: { show: { operation: ['awaitEvent'] } },
			},
			{
				displayName: 'Resume',
				name: 'resumeWhen',
				type: 'options',
				default: 'after',
				options: [
					{ name: 'After a Duration', value: 'after' },
					{ name: 'At a Time', value: 'at' },
				],
				displayOptions: { show: { operation: ['scheduleResume'] } },
			},
			{
				displayName: 'Amount',
				name: 'amount',
				type: 'number',
				default: 1,
				typeOptions: { minValue: 0 },
				displayOptions: {
					show: { operation: ['scheduleResume', 'awaitEvent'], resumeWhen: ['after'] },
				},
			},
			{
				displayName: 'Unit',
				name: 'unit',
				type: 'options',
				default: 'hours',
				options: [
					{ name: 'Seconds', value: 'seconds' },
					{ name: 'Minutes', value: 'minutes' },
					{ name: 'Hours', value: 'hours' },
					{ name: 'Days', value: 'days' },
				],
				displayOptions: {
					show: { operation: ['scheduleResume', 'awaitEvent'], resumeWhen: ['after'] },
				},
			},
			{
				displayName: 'Date and Time',
				name: 'wakeAt',
				type: 'dateTime',
				default: '',
				required: true,
				description:
					'When to resume the instance (Schedule Resume; a past time resumes it at once) or when its wait times out (Wait for Event)',
				displayOptions: {
					show: { operation: ['scheduleResume', 'awaitEvent'], resumeWhen: ['at'] },
				},
			},
			{
				displayName:
					'Save a checkpoint before this node: when the wake-up is due, the Resume Trigger emits the instance and the Resume Point routes it by its last step.',
				name: 'scheduleNotice',
				type: 'notice',
				default: '',
				displayOptions: { show: { operation: ['scheduleResume'] } },
			},
			{
				displayName:
					"Save a checkpoint before this node, and connect that step's output on the Resume Point back to this node (a crash before the wait waits again). The awaited event reaches the Resume Point's Event output, a timeout its Timed Out output (turn on Wait Outputs there).",
				name: 'awaitNotice',
				type: 'notice',
				default: '',
				displayOptions: { show: { operation: ['awaitEvent'] } },
			},
			{
				displayName: 'Options',
				name: 'options',
				type: 'collection',
				placeholder: 'Add Option',
				default: {},
				displayOptions: { show: { operation: ['fail'] } },
				options: [
					{
						displayName: 'Retry Per Policy',
						name: 'retry',
						type: 'boolean',
						default: false,
						description:
							"Whether the failure is retried under the instance's retry policy (Resume Point options) instead of being final: the instance is resumed after the backoff and suspended once the policy's automatic resumes are used up",
					},
				],
			},
			{
				displayName: 'Options',
				name: 'options',
				type: 'collection',
				placeholder: 'Add Option',
				default: {},
				displayOptions: { show: { operation: ['save'], ...V1 } },
				options: [
					{
						displayName: 'Expected Sequence',
						name: 'expectedSequence',
						type: 'number',
						default: 0,
						description:
							"Refuse the save (ABORTED) unless this is the newest checkpoint's sequence, so an execution that lost the instance to another cannot overwrite its progress. 0 means no checkpoint yet.",
						hint: 'Usually {{ $json.durable.lastSequence }}, set by the Resume Point and each save',
					},
					{
						displayName: 'Lease (Seconds)',
						name: 'leaseSeconds',
						type: 'number',
						default: 0,
						typeOptions: { minValue: 0, maxValue: 86400 },
						description:
							"How long the saved instance stays leased to this execution. 0 keeps the instance's lease length (set on the Resume Point; else the sidecar default).",
					},
				],
			},
			{
				displayName: 'Options',
				name: 'options',
				type: 'collection',
				placeholder: 'Add Option',
				default: {},
				displayOptions: { show: { operation: ['save'], ...V2 } },
				options: [
					{
						displayName: 'Complete Claimed Key',
						name: 'completeClaimedKey',
						type: 'boolean',
						default: true,
						description:
							'Whether the save also records the result of the idempotency key an Idempotency Guard (Claim, First Run) before this node claimed for the item, in the same transaction as the checkpoint, so a side effect needs no Record Result node: Claim → call → Save',
					},
					{
						displayName: 'Complete Instance',
						name: 'completeInstance',
						type: 'boolean',
						default: false,
						description:
							'Whether this save also completes the instance, in the same call and transaction: use it on the last Save instead of a separate Complete Instance node. The instance is then finished (no result stored), and a re-delivered trigger leaves the Resume Point by Finished.',
					},
					{
						displayName: 'Expected Sequence',
						name: 'expectedSequence',
						type: 'number',
						default: 0,
						description:
							"Refuse the save (ABORTED) unless this is the newest checkpoint's sequence, so an execution that lost the instance to another cannot overwrite its progress. 0 means no checkpoint yet.",
						hint: 'Usually {{ $json.durable.lastSequence }}, set by the Resume Point and each save',
					},
					{
						displayName: 'Lease (Seconds)',
						name: 'leaseSeconds',
						type: 'number',
						default: 0,
						typeOptions: { minValue: 0, maxValue: 86400 },
						description:
							"The save renews the instance's lease: the time this execution holds the instance before the Resume Trigger may take it as crashed. 0 renews it with the instance's lease length, chosen on the Resume Point. A value here changes the length for this renewal only.",
					},
				],
			},
		],
	};

	methods = {
		credentialTest: {
			durableSidecarApiTest: testSidecarCredential,
		},
	};

	/** Each version's own description for n8n: a version-2 node carries no version-1 properties (shared/versions.ts). */
	private readonly versions = versionViews(this);
	readonly nodeVersions = this.versions.nodeVersions;
	readonly currentVersion = this.versions.currentVersion;
	readonly getNodeType = this.versions.getNodeType;

	async execute(this: IExecuteFunctions): Promise<INodeExecutionData[][]> {
		const items = this.getInputData();
		if (items.length === 0) return [[]];
		const node = nodeOf(this);
		const v2 = node.typeVersion >= 2;
		const operation = nodeParameter(this, 'operation', 0) as Operation;
		const client = await sidecarFor(this);
		const workflowId = workflowIdOf(this);
		const executionId = executionIdOf(this);
		const upstream = new Upstream(this);
		const byKey = !v2 || nodeParameter(this, 'instanceFrom', 0, 'resumePoint') === 'key';
		const out: INodeExecutionData[] = [];
		const fail = (i: number, error: NodeError) => {
			if (!this.continueOnFail()) throw error;
			out.push(errorItem(items[i], error, i));
		};
		const own = { workflowId, executionId };
		const targetAt = (i: number): Target => {
			if (!byKey) {
				const ref = upstream.requireInstance(
					i,
					items[i],
					'Or set Instance to By Key and give the key.',
				);
				return targetOf(this, ref, i, own);
			}
			const raw: unknown = this.getNodeParameter('instanceKey', i, '');
			const key =
				typeof raw === 'string' ? raw.trim() : raw === undefined || raw === null ? '' : String(raw);
			if (!key) {
				throw new NodeOperationError(node, 'Instance Key is empty for this item', {
					itemIndex: i,
					description: v2
						? 'Give the business key of the instance, or set Instance to From Resume Point.'
						: "The item carries no durable.instanceKey (a node since the Resume Point replaced it). Set Instance Key to {{ $('Resume Point').item.json.durable.instanceKey }}.",
				});
			}
			return { workflowId, instanceKey: key, executionId };
		};

		if (operation === 'save') {
			return [await saveCheckpoints(this, { client, executionId, upstream, targetAt })];
		}
		if (operation === 'awaitEvent') {
			// An instance that waits comes back through the Resume Point before this node when its
			// event arrives or its wait times out: refuse now, while nothing is parked, if that
			// Resume Point has no output for it (a trap found otherwise only days later).
			const blind = resumePointsWithoutWaitOutputs(this);
			if (blind.length > 0) {
				throw new NodeOperationError(
					node,
					`Turn on Wait Outputs on ${blind.map((n) => `'${n}'`).join(', ')} before waiting here`,
					{
						description:
							'An instance that waits comes back through its Resume Point when the event arrives or the wait times out; without Wait Outputs that Resume Point has no output for it. Nothing was parked.',
					},
				);
			}
		}

		const action =
			operation === 'complete'
				? 'Completing the instance'
				: operation === 'fail'
					? 'Failing the instance'
					: operation === 'awaitEvent'
						? 'Waiting for the event'
						: 'Scheduling the resume';
		const timeOf = (raw: string, i: number): Date => {
			const at = new Date(raw);
			if (!raw || Number.isNaN(at.getTime())) {
				throw new NodeOperationError(node, `Date and Time is not a valid time: '${raw}'`, {
					itemIndex: i,
					description: 'Give an ISO date and time, e.g. 2026-05-01T09:00:00Z.',
				});
			}
			return at;
		};
		const secondsOf = (i: number): number => {
			const amount = Number(nodeParameter(this, 'amount', i, 0));
			const unit = nodeParameter(this, 'unit', i, 'hours') as string;
			const seconds = Math.round(amount * (UNIT_SECONDS[unit] ?? 1));
			if (!Number.isFinite(seconds) || seconds < 0) {
				throw new NodeOperationError(node, `Amount must be zero or more, got ${String(amount)}`, {
					itemIndex: i,
				});
			}
			return seconds;
		};
		const awaited = new Map<number, AwaitEventResponse>();
		const targets: Array<Target | NodeError> = items.map((_, i) => {
			try {
				return targetAt(i);
			} catch (error) {
				return asNodeError(node, error, i);
			}
		});
		const settled = await perItem(this, client, action, items.length, async (i) => {
			const target = targets[i];
			if (target instanceof Error) throw target;
			if (operation === 'complete') {
				const what = nodeParameter(this, 'resultWhat', i, 'none') as string;
				const result =
					what === 'item'
						? userJson(items[i])
						: what === 'json'
							? jsonParameter(
									node,
									this.getNodeParameter('resultJson', i, '{}'),
									'Result (JSON)',
									i,
								)
							: undefined;
				const response = await client.completeInstance({
					...target,
					resultJson: result === undefined ? Buffer.alloc(0) : toJsonBytes(result),
				});
				return response.instance;
			}
			if (operation === 'fail') {
				const message = (nodeParameter(this, 'errorMessage', i, '') as string).trim();
				if (!message) {
					throw new NodeOperationError(node, 'Reason is empty', {
						itemIndex: i,
						description: 'Say why the instance failed, e.g. {{ $json.error }}.',
					});
				}
				const response = await client.failInstance({
					...target,
					errorMessage: message,
					retry: nodeParameter(this, 'options.retry', i, false) as boolean,
				});
				return response.instance;
			}
			if (operation === 'awaitEvent') {
				const eventName = String(nodeParameter(this, 'eventName', i, '') ?? '').trim();
				if (!eventName) {
					throw new NodeOperationError(node, 'Event Name is empty', {
						itemIndex: i,
						description: 'Name the event this instance waits for, e.g. delivered.',
					});
				}
				const when = nodeParameter(this, 'resumeWhen', i, 'never') as string;
				let timeout:
					| { $case: 'deadline'; value: Date }
					| { $case: 'timeoutSeconds'; value: number }
					| undefined;
				if (when === 'at') {
					timeout = {
						$case: 'deadline',
						value: timeOf(this.getNodeParameter('wakeAt', i, '') as string, i),
					};
				} else if (when === 'after') {
					const seconds = secondsOf(i);
					if (seconds < 1) {
						throw new NodeOperationError(node, 'The timeout must be at least 1 second', {
							itemIndex: i,
							description: 'Give a longer duration, or set Timeout to No Timeout.',
						});
					}
					timeout = { $case: 'timeoutSeconds', value: seconds };
				}
				awaited.set(
					i,
					await client.awaitEvent({
						...target,
						eventName,
						timeout,
					}),
				);
				return undefined;
			}
			const when = nodeParameter(this, 'resumeWhen', i, 'after') as string;
			if (when === 'at') {
				const at = timeOf(this.getNodeParameter('wakeAt', i, '') as string, i);
				const response = await client.scheduleWakeUp({
					...target,
					when: { $case: 'wakeAt', value: at },
				});
				return response.instance;
			}
			const seconds = secondsOf(i);
			const response = await client.scheduleWakeUp({
				...target,
				when: { $case: 'delaySeconds', value: seconds },
			});
			return response.instance;
		});
		for (let i = 0; i < items.length; i++) {
			const result = settled[i];
			if (!result.ok) {
				fail(i, result.error);
				continue;
			}
			const answer = awaited.get(i);
			if (answer) {
				// Parked: the instance waits without a lease and this item goes no further.
				if (answer.outcome !== AwaitOutcome.AWAIT_OUTCOME_RECEIVED) continue;
				const json: IDataObject = { ...items[i].json, event: eventJson(answer.event) };
				json[DURABLE_FIELD] = {
					...(isObject(items[i].json[DURABLE_FIELD])
						? (items[i].json[DURABLE_FIELD] as IDataObject)
						: {}),
					...instanceSummary(answer.instance),
					waitOutcome: 'received',
				};
				out.push({ json, binary: items[i].binary, pairedItem: { item: i } });
				continue;
			}
			out.push(withDurable(items[i], instanceSummary(result.value), i));
		}
		return [out];
	}
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
