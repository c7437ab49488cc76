import {
	NodeConnectionTypes,
	NodeOperationError,
	type IDataObject,
	type IExecuteFunctions,
	type INodeExecutionData,
	type INodeType,
	type INodeTypeDescription,
	type NodeApiError,
} from 'n8n-workflow';

import { nodeOf } from '../../shared/run-node';
import { findAheadGuard, instanceClaim } from '../../shared/claim-ahead';
import { testSidecarCredential } from '../../shared/credential-test';
import { versionViews } from '../../shared/versions';
import { longestWait, MAX_LEASE_SECONDS, uncoverableWait, waitsAhead } from '../../shared/waits';
import {
	asNodeError,
	callContext,
	durableOf,
	executionIdOf,
	fieldList,
	fromJsonBytes,
	isObject,
	mapLimited,
	sidecarError,
	sidecarFor,
	toJsonBytes,
	userJson,
	workflowIdOf,
} from '../../shared/node-helpers';
import { isSidecarUnreachable } from '../../shared/errors';
import { businessKey, isWebhookDelivery } from '../../shared/door';
import {
	nodeParameter,
	noteHeldInstances,
	parameterReader,
	type InstanceRef,
} from '../../shared/upstream';
import { StartOutcome, type RetryPolicy, type StartOrResumeResponse } from '../../shared/transport';
import {
	configuredOutputs,
	resumePointProperties,
	type DifferentDelivery,
} from './ResumePointDescription';
import {
	differentDeliveryRefused,
	FIXED_OUTPUTS,
	OUTPUT_IN_PROGRESS,
	refusedItem,
	route,
	routeResponse,
	smallInstanceMeta,
} from './routing';

export { OUTPUT_COMPLETED, OUTPUT_IN_PROGRESS, OUTPUT_RESUME, OUTPUT_START } from './routing';

/** StartOrResume calls in flight at once (one per item; the contract has no batch form). */
const CONCURRENCY = 8;

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
		properties: resumePointProperties,
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
					checkDelivery:
						v2 && !prep.claimToken && onDifferent !== 'ignore' && isWebhookDelivery(items[i]),
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
