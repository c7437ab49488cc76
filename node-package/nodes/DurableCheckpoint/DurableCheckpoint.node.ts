import {
	NodeConnectionTypes,
	NodeOperationError,
	type IDataObject,
	type IExecuteFunctions,
	type INodeExecutionData,
	type INodeType,
	type INodeTypeDescription,
} from 'n8n-workflow';

import { nodeOf } from '../../shared/run-node';
import { perItem, type NodeError } from '../../shared/batch';
import { testSidecarCredential } from '../../shared/credential-test';
import { versionViews } from '../../shared/versions';
import {
	asNodeError,
	DURABLE_FIELD,
	errorItem,
	eventJson,
	executionIdOf,
	isObject,
	jsonParameter,
	sidecarFor,
	toJsonBytes,
	userJson,
	withDurable,
	typeName,
	UNIT_SECONDS,
	workflowIdOf,
} from '../../shared/node-helpers';
import { AwaitOutcome, type AwaitEventResponse } from '../../shared/transport';
import { targetOf, Upstream, type Target, nodeParameter } from '../../shared/upstream';
import {
	configuredOutputs,
	durableCheckpointProperties,
	type Operation,
} from './DurableCheckpointDescription';
import { instanceSummary, saveCheckpoints } from './save.operation';

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
		properties: durableCheckpointProperties,
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
