import {
	NodeConnectionTypes,
	NodeOperationError,
	type IDataObject,
	type IExecuteFunctions,
	type INode,
	type INodeExecutionData,
	type INodeType,
	type INodeTypeDescription,
} from 'n8n-workflow';

import { nodeOf } from '../../shared/run-node';
import { instanceClaim, takeAheadAnswer, type AheadAnswer } from '../../shared/claim-ahead';
import { batched, perItem, type NodeError } from '../../shared/batch';
import { testSidecarCredential } from '../../shared/credential-test';
import { versionViews } from '../../shared/versions';
import {
	asNodeError,
	DURABLE_FIELD,
	errorItem,
	executionIdOf,
	fieldList,
	fromJsonBytes,
	IDEMPOTENCY_FIELD,
	isObject,
	jsonParameter,
	pickFields,
	sidecarFor,
	toJsonBytes,
	userJson,
	workflowIdOf,
} from '../../shared/node-helpers';
import {
	ClaimOutcome,
	KeyStatus,
	type ClaimItem,
	type IdempotencyKey,
} from '../../shared/transport';
import {
	instanceRefOf,
	noteGuardRun,
	parameterReader,
	targetOf,
	Upstream,
	type InstanceRef,
	nodeParameter,
} from '../../shared/upstream';
import { MAX_KEY_LENGTH } from '../../shared/door';
import {
	configuredOutputs,
	idempotencyGuardProperties,
	type Operation,
} from './IdempotencyGuardDescription';

export const OUTPUT_FIRST_RUN = 0;
export const OUTPUT_ALREADY_DONE = 1;
export const OUTPUT_IN_PROGRESS = 2;

function keyMeta(key: IdempotencyKey | undefined): IDataObject {
	if (!key) return {};
	return {
		scope: key.scope,
		key: key.key,
		status: (KeyStatus[key.status] ?? 'UNSPECIFIED').replace('KEY_STATUS_', '').toLowerCase(),
		attempt: key.attempt,
		derivedKey: key.derivedKey,
		leaseExpiresAt: key.leaseExpiresAt ? key.leaseExpiresAt.toISOString() : null,
		expiresAt: key.expiresAt ? key.expiresAt.toISOString() : null,
	};
}

/** Version 2 keeps the item's metadata small: what the next nodes use. */
function smallKeyMeta(key: IdempotencyKey | undefined): IDataObject {
	if (!key) return {};
	return { scope: key.scope, key: key.key, attempt: key.attempt, derivedKey: key.derivedKey };
}

function withIdempotency(
	item: INodeExecutionData,
	meta: IDataObject,
	i: number,
): INodeExecutionData {
	const previous = item.json[IDEMPOTENCY_FIELD];
	return {
		json: {
			...item.json,
			[IDEMPOTENCY_FIELD]: { ...(isObject(previous) ? previous : {}), ...meta },
		},
		binary: item.binary,
		pairedItem: { item: i },
	};
}

/**
 * A Key the author set, made unique to its instance: the JSON array [instance key, key], so
 * no two (instance, key) pairs meet in one stored key and the derived key sent downstream
 * differs per instance too (two orders with line sku-1 are two charges).
 */
function keyWithinInstance(
	node: INode,
	instanceKey: string,
	key: string,
	itemIndex: number,
): string {
	const scoped = JSON.stringify([instanceKey, key]);
	if (scoped.length > MAX_KEY_LENGTH) {
		throw new NodeOperationError(
			node,
			`The Key with its instance key is ${scoped.length} characters long; the limit is ${MAX_KEY_LENGTH}`,
			{
				itemIndex,
				description:
					'Use a shorter Key, or turn on the option Share Key Across Instances when the Key alone is unique (e.g. a line item ID from your shop).',
			},
		);
	}
	return scoped;
}

export class IdempotencyGuard implements INodeType {
	description: INodeTypeDescription = {
		displayName: 'Idempotency Guard',
		name: 'idempotencyGuard',
		icon: { light: 'file:idempotencyGuard.svg', dark: 'file:idempotencyGuard.dark.svg' },
		group: ['transform'],
		version: [1, 2, 2.1],
		defaultVersion: 2.1,
		subtitle:
			'={{ (({ claim: "claim", recordResult: "record result", release: "release" })[$parameter["operation"]] || "claim") + (($parameter["scope"] || $parameter["key"]) ? ": " + [$parameter["scope"], $parameter["key"]].filter(Boolean).join(" / ") : "") }}',
		description:
			"Run a side effect (a charge, an email, a write to another system) at most once per key, however often the workflow is retried or re-delivered; a claim's lease is the instance's lease unless set here",
		defaults: { name: 'Idempotency Guard' },
		usableAsTool: true,
		inputs: [NodeConnectionTypes.Main],
		outputs: `={{(${configuredOutputs})($parameter, $nodeVersion)}}`,
		credentials: [{ name: 'durableSidecarApi', required: true, testedBy: 'durableSidecarApiTest' }],
		properties: idempotencyGuardProperties,
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
		const operation = nodeParameter(this, 'operation', 0) as Operation;
		if (items.length === 0) return operation === 'claim' ? [[], [], []] : [[]];
		const node = nodeOf(this);
		const v2 = node.typeVersion >= 2;
		const client = await sidecarFor(this);
		const executionId = executionIdOf(this);
		// This workflow and execution; read only for items with an instance (an unsaved workflow has no id).
		const own = () => ({ workflowId: workflowIdOf(this), executionId });
		const upstream = new Upstream(this);
		const scopeOf = parameterReader(this, 'scope', '');
		const keyOf = parameterReader(this, 'key', '');
		const text = (name: 'scope' | 'key', i: number, required = true): string => {
			const raw: unknown = (name === 'scope' ? scopeOf : keyOf)(i);
			const value =
				typeof raw === 'string' ? raw.trim() : raw === undefined || raw === null ? '' : String(raw);
			if (!value && required) {
				throw new NodeOperationError(
					node,
					`${name === 'scope' ? 'Scope' : 'Key'} is empty for this item`,
					{
						itemIndex: i,
						description:
							name !== 'key'
								? 'Set Scope, e.g. payment.'
								: v2 && operation === 'claim'
									? 'The Key you set gave nothing for this item: check the field it reads (e.g. {{ $json.line.sku }}), or clear Key to use the instance key.'
									: 'Set Key to an expression that names the side effect, e.g. {{ $json.orderId }}-charge.',
					},
				);
			}
			return value;
		};

		if (operation === 'claim') {
			const outputs: INodeExecutionData[][] = [[], [], []];
			const prepared = new Map<number, ClaimItem>();
			/** v2: the instance found upstream, put on items that do not carry it. */
			const instances = new Map<number, InstanceRef>();
			const problems = new Map<number, NodeError>();
			const duplicates = new Map<number, { scope: string; key: string }>();
			const seen = new Set<string>();
			/** v2: answers claimed ahead by the node before (a Save, the Resume Point): no Claim call. */
			const ahead = new Map<number, AheadAnswer>();
			const fingerprintFromOf = parameterReader(this, 'fingerprintFrom', v2 ? 'instance' : 'item');
			const fieldsOf = parameterReader(this, 'fingerprintFields', '');
			const leaseOf = parameterReader<number>(this, 'options.leaseSeconds', 0);
			const ttlOf = parameterReader<number>(this, 'options.ttlSeconds', 0);
			// Version 2 shared a Key across instances; from 2.1 a Key counts within its instance.
			const shareKeyOf = parameterReader<boolean>(
				this,
				'options.shareKeyAcrossInstances',
				node.typeVersion < 2.1,
			);
			// v2: an empty Key means the instance key, but only when the author left it empty: a Key
			// expression that gives nothing for an item (a misspelt field) would otherwise turn every
			// line's claim into the instance's one claim, and all lines but the first would leave by Busy.
			const keySet = v2 && String(node.parameters.key ?? '').trim() !== '';
			for (let i = 0; i < items.length; i++) {
				try {
					const scope = text('scope', i);
					const from = fingerprintFromOf(i) as string;
					let key = text('key', i, !v2 || keySet);
					const given = key !== '';
					let instance: InstanceRef | undefined;
					if (v2) {
						instance =
							!key || from === 'instance'
								? upstream.requireInstance(
										i,
										items[i],
										from === 'instance'
											? 'Or give a Key and set Fingerprint From to something other than Instance.'
											: 'Or give a Key.',
									)
								: upstream.instance(i, items[i]);
						if (instance && !instanceRefOf(items[i].json)) instances.set(i, instance);
						key ||= instance!.instanceKey;
						if (given && instance && shareKeyOf(i) !== true) {
							key = keyWithinInstance(node, instance.instanceKey, key, i);
						}
					}
					const id = JSON.stringify([scope, key]);
					if (seen.has(id)) {
						duplicates.set(i, { scope, key });
						continue;
					}
					seen.add(id);
					if (v2 && (from === 'instance' || from === 'none')) {
						const answer = takeAheadAnswer(node.name, executionId, scope, key);
						if (answer) {
							ahead.set(i, answer);
							continue;
						}
					}
					// Who claims: the execution holding the instance (the caller's, in a sub-workflow).
					const target = instance ? targetOf(this, instance, i, own()) : undefined;
					if (v2 && instance && target && (from === 'instance' || from === 'none')) {
						// The default form: the same claim a node before would make ahead (shared/claim-ahead).
						prepared.set(
							i,
							instanceClaim(
								{ scope, fingerprintFrom: from, leaseSeconds: leaseOf(i), ttlSeconds: ttlOf(i) },
								instance,
								{ workflowId: target.workflowId, executionId: target.executionId, key },
							),
						);
						continue;
					}
					let payload: unknown;
					if (from === 'fields') {
						payload = pickFields(userJson(items[i]), fieldList(fieldsOf(i) as string));
					} else if (from === 'json') {
						payload = jsonParameter(
							node,
							this.getNodeParameter('fingerprintJson', i, '{}'),
							'Fingerprint (JSON)',
							i,
						);
					} else if (from === 'item') {
						payload = userJson(items[i]);
					}
					// v1 (any fingerprint), or v2 with a chosen fingerprint.
					prepared.set(i, {
						scope,
						key,
						payloadJson: payload === undefined ? Buffer.alloc(0) : toJsonBytes(payload),
						fingerprint: '',
						// v2: 0 means the instance's lease, so the claim lapses with the instance.
						leaseSeconds: leaseOf(i) || (instance?.leaseSeconds ?? 0),
						ttlSeconds: ttlOf(i),
						holder: target?.executionId ?? executionId,
						// Instance-aware: a resumed instance's execution takes over its dead one's claim.
						workflowId: target?.workflowId ?? '',
						instanceKey: target?.instanceKey ?? '',
					});
				} catch (error) {
					problems.set(i, asNodeError(node, error, i));
				}
			}
			if (problems.size > 0 && !this.continueOnFail())
				throw problems.values().next().value as NodeError;
			const indexes = [...prepared.keys()];
			const results = indexes.length
				? await batched(this, client, 'Claiming the idempotency key', indexes, async (batch) => {
						const response = await client.claim({ items: batch.map((i) => prepared.get(i)!) });
						return response.results;
					})
				: new Map<number, { ok: true; value: AheadAnswer } | { ok: false; error: NodeError }>();
			// Answers claimed ahead take the same routes as this node's own answers.
			for (const [i, answer] of ahead) results.set(i, { ok: true, value: answer });
			const routed = (i: number, meta: IDataObject): INodeExecutionData => {
				const out = withIdempotency(items[i], meta, i);
				// v2: this claim's answer only, nothing left over from an earlier one.
				if (v2) out.json[IDEMPOTENCY_FIELD] = meta;
				const instance = instances.get(i);
				if (instance) out.json[DURABLE_FIELD] = { ...instance };
				return out;
			};
			for (let i = 0; i < items.length; i++) {
				const problem = problems.get(i);
				const result = results.get(i);
				const failure = problem ?? (result && !result.ok ? result.error : undefined);
				if (failure) {
					if (!this.continueOnFail()) throw failure;
					// In Progress runs nothing: a failed claim must never take the First Run path.
					outputs[OUTPUT_IN_PROGRESS].push(errorItem(items[i], failure, i));
					continue;
				}
				const duplicate = duplicates.get(i);
				if (duplicate) {
					outputs[OUTPUT_IN_PROGRESS].push(
						routed(i, {
							...duplicate,
							outcome: 'in_progress',
							reason: 'An earlier item of this execution claimed the same key',
						}),
					);
					continue;
				}
				if (!result || !result.ok) continue;
				const meta: IDataObject = {
					...(v2 ? smallKeyMeta(result.value.key) : keyMeta(result.value.key)),
					outcome: (ClaimOutcome[result.value.outcome] ?? 'UNSPECIFIED')
						.replace('CLAIM_OUTCOME_', '')
						.toLowerCase(),
				};
				// Claimed by the node before, in its own call: this node made none.
				if (ahead.has(i)) meta.claimedAhead = true;
				switch (result.value.outcome) {
					case ClaimOutcome.CLAIM_OUTCOME_ACQUIRED:
						outputs[OUTPUT_FIRST_RUN].push(routed(i, meta));
						break;
					case ClaimOutcome.CLAIM_OUTCOME_DUPLICATE:
						meta.result = (fromJsonBytes(result.value.key?.resultJson) ?? null) as IDataObject;
						outputs[OUTPUT_ALREADY_DONE].push(routed(i, meta));
						break;
					default:
						outputs[OUTPUT_IN_PROGRESS].push(routed(i, meta));
				}
			}
			noteGuardRun(executionId, node.name, outputs);
			return outputs;
		}

		const out: INodeExecutionData[] = [];
		const action = operation === 'recordResult' ? 'Recording the result' : 'Releasing the key';
		const settled = await perItem(this, client, action, items.length, async (i) => {
			// v2: empty Scope / Key / Attempt come from the Claim this item descends from.
			const claim = v2 ? upstream.claim(i, items[i]) : undefined;
			if (v2 && !claim && !(text('scope', i, false) && text('key', i, false))) {
				throw new NodeOperationError(
					node,
					'No Idempotency Guard Claim before this node for this item',
					{
						itemIndex: i,
						description:
							'Connect this node after the First Run output of a Claim (nodes in between may replace the item), or give Scope, Key and Attempt.',
					},
				);
			}
			const scope = text('scope', i, !claim) || claim!.scope;
			const key = text('key', i, !claim) || claim!.key;
			const given = Number(nodeParameter(this, 'attempt', i, 0));
			const fromItem = items[i].json[IDEMPOTENCY_FIELD];
			const attempt =
				given || (claim ? claim.attempt : Number(isObject(fromItem) ? fromItem.attempt : 0));
			if (!Number.isInteger(attempt) || attempt < 1) {
				throw new NodeOperationError(
					node,
					`Attempt must be the claim's attempt number (1 or more), got ${String(attempt)}`,
					{
						itemIndex: i,
						description:
							"Set Attempt to {{ $json.idempotency.attempt }} from the Claim, or reach it with $('Idempotency Guard').item.json.idempotency.attempt.",
					},
				);
			}
			if (operation === 'recordResult') {
				const what = nodeParameter(this, 'resultWhat', i, 'item') as string;
				const result =
					what === 'json'
						? jsonParameter(node, this.getNodeParameter('resultJson', i, '{}'), 'Result (JSON)', i)
						: userJson(items[i]);
				return (await client.completeKey({ scope, key, attempt, resultJson: toJsonBytes(result) }))
					.key;
			}
			const message = nodeParameter(this, 'errorMessage', i, '') as string;
			return (await client.releaseKey({ scope, key, attempt, errorMessage: message })).key;
		});
		for (let i = 0; i < items.length; i++) {
			const result = settled[i];
			if (!result.ok) {
				if (!this.continueOnFail()) throw result.error;
				out.push(errorItem(items[i], result.error, i));
				continue;
			}
			out.push(
				withIdempotency(
					items[i],
					{
						...(v2 ? smallKeyMeta(result.value) : keyMeta(result.value)),
						outcome: operation === 'recordResult' ? 'recorded' : 'released',
					},
					i,
				),
			);
		}
		noteGuardRun(executionId, node.name, [out]);
		return [out];
	}
}
