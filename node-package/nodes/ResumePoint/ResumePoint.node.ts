import {
	NodeConnectionTypes,
	NodeOperationError,
	type IDataObject,
	type IDisplayOptions,
	type IExecuteFunctions,
	type INode,
	type INodeExecutionData,
	type INodeParameters,
	type INodeProperties,
	type INodeType,
	type INodeTypeDescription,
	type NodeApiError,
} from 'n8n-workflow';

import { nodeOf } from '../../shared/run-node';
import {
	findAheadGuard,
	instanceClaim,
	keepAheadAnswer,
	type AheadGuard,
} from '../../shared/claim-ahead';
import { testSidecarCredential } from '../../shared/credential-test';
import { versionViews } from '../../shared/versions';
import { longestWait, MAX_LEASE_SECONDS, uncoverableWait, waitsAhead } from '../../shared/waits';
import {
	asNodeError,
	callContext,
	DURABLE_FIELD,
	durableOf,
	eventJson,
	executionIdOf,
	fieldList,
	fromJsonBytes,
	isObject,
	mapLimited,
	runStateName,
	sidecarError,
	sidecarFor,
	toJsonBytes,
	userJson,
	workflowIdOf,
} from '../../shared/node-helpers';
import { isSidecarUnreachable } from '../../shared/errors';
import { businessKey, refusal, senderStatus } from '../../shared/door';
import {
	nodeParameter,
	noteHeldInstances,
	parameterReader,
	type InstanceRef,
} from '../../shared/upstream';
import {
	InstanceStatus,
	ResumeReason,
	StartOutcome,
	type Instance,
	type RetryPolicy,
	type StartOrResumeResponse,
} from '../../shared/transport';

/** Fixed outputs, in this order; step outputs and Version Mismatch follow. */
export const OUTPUT_START = 0;
export const OUTPUT_RESUME = 1;
export const OUTPUT_COMPLETED = 2;
export const OUTPUT_IN_PROGRESS = 3;
const FIXED_OUTPUTS = 4;

/** StartOrResume calls in flight at once (one per item; the contract has no batch form). */
const CONCURRENCY = 8;

/**
 * The node's outputs from its parameters. Evaluated by n8n as an expression,
 * so it must be self-contained (no imports, no closures). Version 2 has short
 * labels, since n8n cuts long ones on the canvas.
 */
const configuredOutputs = (parameters: INodeParameters, version: number) => {
	const v2 = Number(version) >= 2;
	const outputs: Array<{ type: 'main'; displayName: string }> = [
		{ type: 'main', displayName: 'Start' },
		{ type: 'main', displayName: 'Resume' },
		{ type: 'main', displayName: v2 ? 'Finished' : 'Completed' },
		{ type: 'main', displayName: v2 ? 'Busy' : 'In Progress' },
	];
	const steps = String(parameters.stepOutputs ?? '')
		.split(',')
		.map((s) => s.trim())
		.filter((s, i, all) => s.length > 0 && all.indexOf(s) === i);
	for (const step of steps) {
		outputs.push({ type: 'main', displayName: v2 ? step : `Resume at ${step}` });
	}
	if (parameters.versionMismatchOutput === true) {
		outputs.push({ type: 'main', displayName: v2 ? 'Old Version' : 'Version Mismatch' });
	}
	if (parameters.waitOutputs === true) {
		outputs.push({ type: 'main', displayName: 'Event' });
		outputs.push({ type: 'main', displayName: 'Timed Out' });
	}
	if (parameters.differentDelivery === 'output') {
		outputs.push({ type: 'main', displayName: 'Different' });
	}
	return outputs;
};

type StateMerge = 'merge' | 'replace' | 'field';
type DifferentDelivery = 'refuse' | 'ignore' | 'output';

/**
 * What a known key with another delivery does. Version 2.1 refuses it (the
 * Idempotency-Key rule: a reused key with other parameters is an error);
 * version 2 ignored it, and keeps doing so unless the author chooses.
 */
function differentDelivery(
	fallback: DifferentDelivery,
	show: IDisplayOptions['show'],
): INodeProperties {
	return {
		displayName: 'Different Delivery',
		name: 'differentDelivery',
		type: 'options',
		noDataExpression: true,
		default: fallback,
		displayOptions: { show },
		options: [
			{
				name: 'Refuse',
				value: 'refuse',
				description:
					'The item fails with an error saying so (on the error output it carries details.httpStatus 422 for its sender); nothing changes',
			},
			{
				name: 'Ignore',
				value: 'ignore',
				description:
					'The delivery counts as a re-delivery of the first: the instance goes on with the start item it has',
			},
			{
				name: 'Route to Output',
				value: 'output',
				description:
					'The item leaves by an extra output, Different, with the stored start item under durable.startItem; nothing changes',
			},
		],
		description:
			'What happens when a key already in use arrives with another delivery than the one that started its instance: for a Webhook item, another body (headers do not count); otherwise another item. A re-delivery of the same body is never different.',
	};
}

function instanceMeta(inst: Instance | undefined): IDataObject {
	if (!inst) return {};
	return {
		workflowId: inst.workflowId,
		instanceKey: inst.instanceKey,
		status: InstanceStatus[inst.status]?.replace('INSTANCE_STATUS_', '').toLowerCase() ?? 'unknown',
		boundVersion: inst.boundVersion,
		versionLabel: inst.versionLabel,
		lastSequence: inst.lastSequence,
		lastStep: inst.lastStep,
		resumeCount: inst.resumeCount,
		leaseOwner: inst.leaseOwner,
		leaseExpiresAt: inst.leaseExpiresAt ? inst.leaseExpiresAt.toISOString() : null,
		wakeAt: inst.wakeAt ? inst.wakeAt.toISOString() : null,
		createdAt: inst.createdAt ? inst.createdAt.toISOString() : null,
	};
}

/** Version 2 keeps the item's metadata small: what later nodes and authors use. */
function smallInstanceMeta(inst: Instance | undefined): IDataObject {
	if (!inst) return {};
	return {
		workflowId: inst.workflowId,
		instanceKey: inst.instanceKey,
		status: InstanceStatus[inst.status]?.replace('INSTANCE_STATUS_', '').toLowerCase() ?? 'unknown',
		leaseSeconds: inst.leaseSeconds,
		lastStep: inst.lastStep,
		lastSequence: inst.lastSequence,
		resumeCount: inst.resumeCount,
		boundVersion: inst.boundVersion,
	};
}

function outcomeName(outcome: StartOutcome): string {
	return (StartOutcome[outcome] ?? 'UNSPECIFIED').replace('START_OUTCOME_', '').toLowerCase();
}

export class ResumePoint implements INodeType {
	description: INodeTypeDescription = {
		displayName: 'Resume Point',
		name: 'resumePoint',
		icon: { light: 'file:resumePoint.svg', dark: 'file:resumePoint.dark.svg' },
		group: ['transform'],
		version: [1, 2, 2.1],
		defaultVersion: 2.1,
		subtitle: '={{ $parameter["instanceKey"] ? "key: " + $parameter["instanceKey"] : "" }}',
		description:
			"Start a long-running instance for a business key, or continue it from its last checkpoint after a crash or wake-up; holds the instance's lease, which later saves and claims keep",
		defaults: { name: 'Resume Point' },
		usableAsTool: true,
		inputs: [NodeConnectionTypes.Main],
		outputs: `={{(${configuredOutputs})($parameter, $nodeVersion)}}`,
		credentials: [{ name: 'durableSidecarApi', required: true, testedBy: 'durableSidecarApiTest' }],
		properties: [
			{
				displayName:
					'Place this node right after the trigger. New keys leave by Start, running instances by Resume (with their saved state), finished ones by Completed, and keys another execution is working on right now by In Progress.',
				name: 'notice',
				type: 'notice',
				default: '',
				displayOptions: { show: { '@version': [1] } },
			},
			{
				displayName:
					'Place this node right after the trigger, and answer a webhook only after it. New keys leave by Start, running instances by Resume (start item and saved steps restored), finished ones by Finished; Busy runs nothing (another execution holds the instance).',
				name: 'notice',
				type: 'notice',
				default: '',
				displayOptions: { show: { '@version': [{ _cnd: { gte: 2 } }] } },
			},
			{
				displayName: 'Instance Key',
				name: 'instanceKey',
				type: 'string',
				default: '',
				required: true,
				placeholder: 'e.g. {{ $json.body.orderId }}',
				description:
					'The business key of the instance, such as an order ID. The same key always means the same instance. Items from a Resume Trigger carry their own key and ignore this.',
			},
			{
				displayName: 'Version Label',
				name: 'versionLabel',
				type: 'string',
				default: '',
				placeholder: 'e.g. 1.4.0',
				description:
					'Optional label of this workflow version, recorded on new instances. Change it when you change the workflow in a way running instances must not see.',
			},
			{
				displayName: 'Step Outputs',
				name: 'stepOutputs',
				type: 'string',
				default: '',
				noDataExpression: true,
				placeholder: 'e.g. payment-captured, shipped',
				description:
					'Comma-separated step names. A resumed instance whose last checkpoint has one of these step names leaves by its own output, so the flow continues at the right place without a Switch node.',
			},
			{
				displayName: 'Version Mismatch Output',
				name: 'versionMismatchOutput',
				type: 'boolean',
				default: false,
				noDataExpression: true,
				description:
					"Whether resumed instances bound to an older workflow version leave by a separate output, carrying the bound version's workflow JSON and this execution's lease, for an Execute Workflow node that runs that JSON (its Execute Workflow Trigger feeds its own Resume Point, which takes the lease over)",
			},
			{
				displayName: 'Wait Outputs',
				name: 'waitOutputs',
				type: 'boolean',
				default: false,
				noDataExpression: true,
				description:
					"Whether instances that waited (Durable Checkpoint: Wait for Event) leave by two more outputs: Event (the awaited event arrived; it is on the item under event) and Timed Out (the wait's timeout passed first). Without them such an instance fails this node.",
			},
			differentDelivery('refuse', { '@version': [{ _cnd: { gte: 2.1 } }] }),
			differentDelivery('ignore', { '@version': [2] }),
			{
				displayName: 'Options',
				name: 'options',
				type: 'collection',
				placeholder: 'Add Option',
				default: {},
				options: [
					{
						displayName: 'Lease (Seconds)',
						name: 'leaseSeconds',
						type: 'number',
						default: 0,
						typeOptions: { minValue: 0, maxValue: 86400 },
						description:
							"The instance's lease: how long an execution holds the instance between checkpoints. If the execution dies, the Resume Trigger picks the instance up after the lease lapses. Saves and claims after this node keep this length unless they set their own. 0 keeps the instance's length (a new instance: the sidecar default, DURABLE_LEASE_SECONDS, 300).",
					},
					{
						displayName: 'Max Automatic Resumes',
						name: 'maxAutomaticResumes',
						type: 'number',
						default: 5,
						typeOptions: { minValue: 0, maxValue: 1000 },
						description:
							"Retry policy: how often the sidecar resumes an instance by itself (its execution died, or Fail Instance with Retry Per Policy) without progress; the next failure suspends it (dead-lettered) for an operator. A saved checkpoint resets the count. 0: no limit. Any retry option replaces the instance's policy; the ones not added take their defaults.",
					},
					{
						displayName: 'Pinned Version',
						name: 'pinnedVersion',
						type: 'number',
						default: 0,
						typeOptions: { minValue: 0 },
						description:
							'Bind new instances to this registered version number instead of the current one (gray release). 0 binds the current version.',
					},
					{
						displayName: 'Register Current Version',
						name: 'registerVersion',
						type: 'boolean',
						default: false,
						description:
							"Whether the sidecar fetches this workflow from n8n's API and registers it as a version first (needs DURABLE_N8N_BASE_URL and DURABLE_N8N_API_KEY on the sidecar)",
					},
					{
						displayName: 'Restore State',
						name: 'stateMerge',
						type: 'options',
						default: 'merge',
						options: [
							{
								name: 'Merge Into Item',
								value: 'merge',
								description: 'Saved fields are added to the item; saved values win',
							},
							{
								name: 'Replace Item',
								value: 'replace',
								description: 'The item becomes the saved state',
							},
							{
								name: 'Under Durable.state',
								value: 'field',
								description: 'The item stays as it is; the saved state is put under durable.state',
							},
						],
						description: "How the last checkpoint's state is put into a resumed item",
					},
					{
						displayName: 'Retry Backoff (Seconds)',
						name: 'initialBackoffSeconds',
						type: 'number',
						default: 10,
						typeOptions: { minValue: 0, maxValue: 86400, numberPrecision: 3 },
						description:
							'Retry policy: the wait before the first automatic resume; it grows by Retry Backoff Multiplier with every further attempt',
					},
					{
						displayName: 'Retry Backoff Cap (Seconds)',
						name: 'maxBackoffSeconds',
						type: 'number',
						default: 600,
						typeOptions: { minValue: 0, maxValue: 86400, numberPrecision: 3 },
						description: 'Retry policy: the longest wait between automatic resumes. 0: one day.',
					},
					{
						displayName: 'Retry Backoff Multiplier',
						name: 'backoffMultiplier',
						type: 'number',
						default: 2,
						typeOptions: { minValue: 1, maxValue: 10, numberPrecision: 2 },
						description: 'Retry policy: the growth factor of the wait per attempt',
					},
					{
						displayName: 'Retry Jitter',
						name: 'jitter',
						type: 'number',
						default: 0.2,
						typeOptions: { minValue: 0, maxValue: 1, numberPrecision: 2 },
						description:
							'Retry policy: the fraction (0 to 1) of each wait taken off at random, so many failed instances do not retry in step',
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
		const node = nodeOf(this);
		const stepNames = fieldList(nodeParameter(this, 'stepOutputs', 0, '') as string).filter(
			(s, i, all) => all.indexOf(s) === i,
		);
		const mismatchOutput = nodeParameter(this, 'versionMismatchOutput', 0, false) as boolean;
		const waitOutputs = nodeParameter(this, 'waitOutputs', 0, false) as boolean;
		const v2 = node.typeVersion >= 2;
		const onDifferent: DifferentDelivery = v2
			? (nodeParameter(
					this,
					'differentDelivery',
					0,
					node.typeVersion >= 2.1 ? 'refuse' : 'ignore',
				) as DifferentDelivery)
			: 'ignore';
		const afterSteps = FIXED_OUTPUTS + stepNames.length;
		const mismatchIndex = mismatchOutput ? afterSteps : -1;
		const eventIndex = waitOutputs ? afterSteps + (mismatchOutput ? 1 : 0) : -1;
		const differentIndex =
			onDifferent === 'output' ? afterSteps + (mismatchOutput ? 1 : 0) + (waitOutputs ? 2 : 0) : -1;
		const outputs: INodeExecutionData[][] = Array.from(
			{
				length:
					afterSteps +
					(mismatchOutput ? 1 : 0) +
					(waitOutputs ? 2 : 0) +
					(differentIndex >= 0 ? 1 : 0),
			},
			() => [],
		);
		if (items.length === 0) return outputs;
		warnOfAnEarlyAnswer(this);

		const client = await sidecarFor(this);
		const workflowId = workflowIdOf(this);
		// {{ $json.… }} keys are read from the item, without n8n's expression engine.
		const instanceKeyOf = parameterReader<string>(this, 'instanceKey', '');
		const executionId = executionIdOf(this);

		if (nodeParameter(this, 'options.registerVersion', 0, false) as boolean) {
			try {
				await client.syncVersionFromN8n({ workflowId, actor: `execution ${executionId}` });
			} catch (error) {
				throw sidecarError(node, error, callContext(client, 'Registering the workflow version', 0));
			}
		}

		type Prepared =
			| { kind: 'call'; key: string; claimToken: string }
			| { kind: 'duplicate'; key: string }
			| { kind: 'error'; error: NodeOperationError | NodeApiError };
		const seen = new Set<string>();
		const prepared: Prepared[] = items.map((item, i) => {
			try {
				const meta = durableOf(item);
				let key: string;
				let claimToken = '';
				if (
					typeof meta.claimToken === 'string' &&
					meta.claimToken &&
					typeof meta.instanceKey === 'string'
				) {
					// An item from the Resume Trigger: its claim names the instance.
					if (meta.workflowId !== undefined && String(meta.workflowId) !== workflowId) {
						throw new NodeOperationError(
							node,
							`The item was claimed for workflow ${String(meta.workflowId)}, not this one (${workflowId})`,
							{
								itemIndex: i,
								description:
									'Connect a Resume Trigger only to the Resume Point of the workflow it watches.',
							},
						);
					}
					key = meta.instanceKey;
					claimToken = meta.claimToken;
				} else {
					key = businessKey(node, instanceKeyOf(i), 'Instance Key', i);
				}
				if (seen.has(key)) return { kind: 'duplicate', key };
				seen.add(key);
				return { kind: 'call', key, claimToken };
			} catch (error) {
				return { kind: 'error', error: asNodeError(node, error, i) };
			}
		});

		if (!this.continueOnFail()) {
			// A refused item fails the run before any call: nothing of this delivery is stored.
			const refused = prepared.find((p) => p.kind === 'error');
			if (refused?.kind === 'error') throw refused.error;
		}

		const versionLabel = nodeParameter(this, 'versionLabel', 0, '') as string;
		const retryPolicy = retryPolicyOf(nodeParameter(this, 'options', 0, {}) as IDataObject);
		const leaseOf = parameterReader<number>(this, 'options.leaseSeconds', 0);
		// v2: an n8n Wait node after this Resume Point: the lease it takes covers the wait too
		// (shared/waits). A Lease option the author set is their choice: no check then.
		const wait = v2 ? longestWait(waitsAhead(this)) : undefined;
		const options: unknown = node.parameters.options;
		const leaseSet = isObject(options) && !!options.leaseSeconds;
		if (wait && !leaseSet) {
			const error = uncoverableWait(node, 'Resume Point', wait, wait.seconds ?? 0, 0);
			if (error) throw error;
		}
		const waitSeconds = Math.min(wait?.seconds ?? 0, MAX_LEASE_SECONDS);
		const pinnedOf = parameterReader<number>(this, 'options.pinnedVersion', 0);
		// v2: a new instance claims the key of the Guard this node feeds, when it feeds only that Guard.
		const ahead = v2 ? findAheadGuard(this, { onlyChild: true }) : undefined;
		// Once the sidecar proved unreachable for a whole deadline, the remaining
		// items fail at once instead of each waiting out its own deadline.
		let unreachable: unknown;
		const results = await mapLimited(items.length, CONCURRENCY, async (i) => {
			const prep = prepared[i];
			if (prep.kind !== 'call') return undefined;
			try {
				if (unreachable !== undefined) throw unreachable;
				return await client.startOrResume({
					workflowId,
					instanceKey: prep.key,
					executionId,
					leaseSeconds: leaseOf(i),
					versionLabel: versionLabel.trim(),
					pinnedVersion: pinnedOf(i),
					claimToken: prep.claimToken,
					includeState: true,
					retryPolicy,
					waitSeconds,
					// v2: the delivery belongs to the instance (stored with a new one only);
					// an item from the Resume Trigger is no delivery.
					startItemJson: v2 && !prep.claimToken ? toJsonBytes(userJson(items[i])) : Buffer.alloc(0),
					// A known key with another delivery: answered DIFFERENT, nothing taken (v2.1 refuses it).
					checkDelivery: v2 && !prep.claimToken && onDifferent !== 'ignore',
					// Claimed only when the instance is new (the sidecar decides): lease 0 is the instance's.
					claimOnStart:
						ahead && !prep.claimToken
							? instanceClaim(
									ahead,
									{ workflowId, instanceKey: prep.key, leaseSeconds: leaseOf(i) },
									{ workflowId, executionId },
								)
							: undefined,
				});
			} catch (error) {
				if (isSidecarUnreachable(error)) unreachable = error;
				return sidecarError(
					node,
					error,
					callContext(client, 'Starting or resuming the instance', i),
				);
			}
		});

		/** The instances this execution now holds: a sub-workflow it runs acts on them (noteHeldInstances). */
		const held: InstanceRef[] = [];
		for (let i = 0; i < items.length; i++) {
			const item = items[i];
			const prep = prepared[i];
			const result = results[i];
			let failure =
				prep.kind === 'error' ? prep.error : result instanceof Error ? result : undefined;
			const response = result as StartOrResumeResponse;
			if (
				!failure &&
				prep.kind === 'call' &&
				response.outcome === StartOutcome.START_OUTCOME_DIFFERENT
			) {
				if (differentIndex >= 0) {
					outputs[differentIndex].push(
						route(item, i, {
							...smallInstanceMeta(response.instance),
							outcome: 'different',
							startItem: (fromJsonBytes(response.startItemJson) ?? null) as IDataObject,
						}),
					);
					continue;
				}
				failure = differentDeliveryRefused(node, response, i);
			}
			if (failure) {
				if (this.continueOnFail()) {
					// In Progress runs nothing: a failed item must never take the Start path.
					outputs[OUTPUT_IN_PROGRESS].push(refusedItem(failure, i));
					continue;
				}
				throw failure;
			}
			if (prep.kind === 'duplicate') {
				outputs[OUTPUT_IN_PROGRESS].push(
					route(item, i, {
						instanceKey: prep.key,
						workflowId,
						outcome: 'busy',
						reason: 'An earlier item of this execution has the same instance key',
					}),
				);
				continue;
			}
			routeResponse(this, item, i, response, outputs, {
				stepNames,
				mismatchIndex,
				eventIndex,
				executionId,
				v2,
				ahead,
			});
			const taken =
				response.outcome === StartOutcome.START_OUTCOME_STARTED ||
				response.outcome === StartOutcome.START_OUTCOME_RESUMED;
			if (taken && response.instance) {
				held.push({
					workflowId: response.instance.workflowId || workflowId,
					instanceKey: response.instance.instanceKey,
					leaseSeconds: response.instance.leaseSeconds,
				});
			}
		}
		noteHeldInstances(executionId, held);
		return outputs;
	}
}

/**
 * A Webhook before this Resume Point that answers Immediately (the Webhook
 * node's default Respond) has told the sender 200 before the delivery is
 * stored: a delivery that meets a sidecar outage then fails here and is lost,
 * and the sender does not retry it. Said as a warning on this node's output
 * (n8n's execution hints: the editor shows it after a run, and it stays in the
 * execution's data), once per run; the run goes on as before.
 */
function warnOfAnEarlyAnswer(ctx: IExecuteFunctions): void {
	if (typeof ctx.addExecutionHints !== 'function' || typeof ctx.getParentNodes !== 'function') {
		return;
	}
	let early: string[];
	try {
		early = ctx
			.getParentNodes(nodeOf(ctx).name, { includeNodeParameters: true })
			.filter(
				(p) =>
					!p.disabled &&
					p.type === WEBHOOK_TYPE &&
					(p.parameters?.responseMode ?? 'onReceived') === 'onReceived',
			)
			.map((p) => p.name);
	} catch {
		return;
	}
	if (early.length === 0) return;
	ctx.addExecutionHints({
		type: 'warning',
		location: 'outputPane',
		message: `The Webhook '${early.join("', '")}' answers Immediately, before this Resume Point stores the delivery: a delivery that arrives while the sidecar is down is answered 200 and lost. Set its Respond to Using 'Respond to Webhook' Node and put a Respond to Webhook on this node's Start output (or When Last Node Finishes).`,
	});
}

const WEBHOOK_TYPE = 'n8n-nodes-base.webhook';

/**
 * A failed item as n8n's error output keeps it: `error` and `details` only
 * (details.httpStatus: what a Respond to Webhook there answers the sender).
 * n8n replaces the JSON of an item that carries an `error` object with
 * `{ error: message }` (WorkflowExecute.normalizeNodeErrors in n8n 2.41), so
 * the status would be lost there; an item whose JSON holds only these keys
 * is routed to the error output all the same, merged with the item it came
 * from (the delivery's body stays readable).
 */
function refusedItem(failure: NodeOperationError | NodeApiError, i: number): INodeExecutionData {
	return {
		json: {
			error: failure.message,
			details: { httpStatus: senderStatus(failure), description: failure.description ?? null },
		},
		pairedItem: { item: i },
	};
}

/** Different Delivery: Refuse. The key is in use by another delivery: HTTP 422 for the sender. */
function differentDeliveryRefused(
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

interface RouteSettings {
	stepNames: string[];
	mismatchIndex: number;
	/** Index of the Event output (Timed Out follows it); -1 without Wait Outputs. */
	eventIndex: number;
	executionId: string;
	v2: boolean;
	/** The Idempotency Guard whose key a start claims ahead (shared/claim-ahead), if any. */
	ahead?: AheadGuard;
}

const RETRY_DEFAULTS = {
	maxAutomaticResumes: 5,
	initialBackoffSeconds: 10,
	maxBackoffSeconds: 600,
	backoffMultiplier: 2,
	jitter: 0.2,
};

/**
 * The retry policy the Resume Point sends: none unless a retry option was
 * added (the instance keeps its policy, a new one the sidecar's defaults);
 * otherwise the options given, the rest at their defaults.
 */
export function retryPolicyOf(options: IDataObject): RetryPolicy | undefined {
	const given = Object.keys(RETRY_DEFAULTS).filter((k) => options[k] !== undefined);
	if (given.length === 0) return undefined;
	const value = (name: keyof typeof RETRY_DEFAULTS): number => {
		const raw = Number(options[name] ?? RETRY_DEFAULTS[name]);
		return Number.isFinite(raw) ? raw : RETRY_DEFAULTS[name];
	};
	return {
		maxAutomaticResumes: Math.round(value('maxAutomaticResumes')),
		initialBackoffMs: Math.round(value('initialBackoffSeconds') * 1000),
		maxBackoffMs: Math.round(value('maxBackoffSeconds') * 1000),
		backoffMultiplier: value('backoffMultiplier'),
		jitter: value('jitter'),
	};
}

/**
 * The routed item: input JSON (or `replaceJson`) with fresh `durable` metadata.
 * The used claim, a restored state and an earlier hand-off are dropped; `meta` sets them anew when they apply.
 */
function route(
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
function routeResponse(
	ctx: IExecuteFunctions,
	item: INodeExecutionData,
	i: number,
	response: StartOrResumeResponse,
	outputs: INodeExecutionData[][],
	{ stepNames, mismatchIndex, eventIndex, executionId, v2, ahead }: RouteSettings,
): void {
	const handedOver = durableOf(item).runsBoundVersion;
	const runsBound =
		typeof handedOver === 'number' &&
		handedOver > 0 &&
		handedOver === (response.instance?.boundVersion ?? 0);
	const meta: IDataObject = v2
		? { ...smallInstanceMeta(response.instance), outcome: outcomeName(response.outcome) }
		: {
				...instanceMeta(response.instance),
				outcome: outcomeName(response.outcome),
				currentVersion: response.currentVersion,
				versionMismatch: response.versionMismatch,
			};
	if (v2 && response.versionMismatch) meta.versionMismatch = true;
	switch (response.outcome) {
		case StartOutcome.START_OUTCOME_STARTED: {
			if (ahead) keepAheadAnswer(ahead, executionId, response.startClaim);
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
			break;
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

	const latest = response.latestCheckpoint;
	let state = fromJsonBytes(latest?.stateJson);
	if (v2) {
		// The start item, then the saved state on top: a resumed execution sees
		// the delivery that started the instance and every step saved since.
		const start = fromJsonBytes(response.startItemJson);
		if (isObject(start)) {
			state =
				state === undefined
					? start
					: isObject(state)
						? { ...start, ...state }
						: { ...start, state: state as IDataObject[string] };
		}
	}
	const mode = nodeParameter(ctx, 'options.stateMerge', i, 'merge') as StateMerge;
	let json: IDataObject | undefined;
	if (state !== undefined) {
		if (mode === 'replace') {
			json = isObject(state) ? state : { state: state as IDataObject[string] };
		} else if (mode === 'merge') {
			json = isObject(state)
				? { ...item.json, ...state }
				: { ...item.json, state: state as IDataObject[string] };
		} else {
			meta.state = state as IDataObject[string];
		}
	}
	if (latest && !v2) {
		meta.lastCheckpoint = {
			sequence: latest.sequence,
			stepName: latest.stepName,
			sha256: latest.sha256,
			executionId: latest.executionId,
			createdAt: latest.createdAt ? latest.createdAt.toISOString() : null,
		};
	}
	if (runsBound) meta.runsBoundVersion = handedOver;
	const waitOutcome = response.waitOutcome;
	const waited =
		waitOutcome === ResumeReason.RESUME_REASON_EVENT ||
		waitOutcome === ResumeReason.RESUME_REASON_TIMEOUT;
	if (waited && !(response.versionMismatch && mismatchIndex >= 0 && !runsBound)) {
		// The instance's last wait ended (and nothing was saved since): its event, or its timeout.
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
		return;
	}
	if (response.versionMismatch && mismatchIndex >= 0 && !runsBound) {
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
