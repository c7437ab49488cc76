/** What every Idempotency Guard operation works with, and what a version does its own way. */
import type { IDataObject, IExecuteFunctions, INode, INodeExecutionData } from 'n8n-workflow';

import type { AheadAnswer } from '../../../shared/claim-ahead';
import {
	executionIdOf,
	IDEMPOTENCY_FIELD,
	isObject,
	setupError,
	sidecarFor,
	workflowIdOf,
} from '../../../shared/node-helpers';
import { nodeOf } from '../../../shared/run-node';
import { KeyStatus, type IdempotencyKey, type SidecarClient } from '../../../shared/transport';
import {
	parameterReader,
	targetOf,
	Upstream,
	type ClaimRef,
	type InstanceRef,
	type Target,
} from '../../../shared/upstream';
import type { Operation } from '../IdempotencyGuardDescription';

export interface GuardRun {
	node: INode;
	items: INodeExecutionData[];
	client: SidecarClient;
	executionId: string;
	upstream: Upstream;
	version: GuardVersion;
	/** The Scope or Key parameter for an item, trimmed; empty and required is a setup error. */
	text: (name: 'scope' | 'key', i: number, required?: boolean) => string;
	/** The instance an item belongs to, found upstream (and who acts on it), if any. */
	targetAt: (i: number) => Target | undefined;
}

/** A Claim item's key, and the instance it belongs to where the version looks for one. */
export interface ClaimKey {
	key: string;
	instance?: InstanceRef;
}

/** What a version of the Guard does its own way. */
export interface GuardVersion {
	/** The Fingerprint From a Claim uses when the parameter is not given. */
	defaultFingerprintFrom: string;
	/**
	 * Whether the Guard follows the instance (version 2): a Claim finds its instance upstream,
	 * takes answers claimed ahead, and its answer replaces the item's idempotency field.
	 */
	followsInstance: boolean;
	/** What an empty Key on a Claim item says. */
	claimKeyHint: string;
	/** How a Claim run finds each item's key (and instance). */
	claimKeys: (ctx: IExecuteFunctions, run: GuardRun) => (i: number, from: string) => ClaimKey;
	/** Record Result / Release: the Claim the item descends from, when the version looks for it. */
	claimOf: (run: GuardRun, i: number) => ClaimRef | undefined;
	/** The key's metadata on the item. */
	keyMeta: (key: IdempotencyKey | undefined) => IDataObject;
}

export type OperationFn = (
	ctx: IExecuteFunctions,
	run: GuardRun,
) => Promise<INodeExecutionData[][]>;

export type AnswerOf = { ok: true; value: AheadAnswer } | { ok: false; error: Error };

export async function runOf(
	ctx: IExecuteFunctions,
	version: GuardVersion,
	operation: Operation,
): Promise<GuardRun> {
	const node = nodeOf(ctx);
	const client = await sidecarFor(ctx);
	const executionId = executionIdOf(ctx);
	const upstream = new Upstream(ctx);
	const scopeOf = parameterReader(ctx, 'scope', '');
	const keyOf = parameterReader(ctx, 'key', '');
	const text = (name: 'scope' | 'key', i: number, required = true): string => {
		const raw: unknown = (name === 'scope' ? scopeOf : keyOf)(i);
		const value =
			typeof raw === 'string' ? raw.trim() : raw === undefined || raw === null ? '' : String(raw);
		if (!value && required) {
			throw setupError(
				node,
				`${name === 'scope' ? 'Scope' : 'Key'} is empty for this item`,
				i,
				name !== 'key'
					? 'Set Scope, e.g. payment.'
					: operation === 'claim'
						? version.claimKeyHint
						: KEY_HINT,
			);
		}
		return value;
	};
	const items = ctx.getInputData();
	const own = { workflowId: workflowIdOf(ctx), executionId };
	const targetAt = (i: number): Target | undefined => {
		const instance = upstream.instance(i, items[i]);
		return instance ? targetOf(ctx, instance, i, own) : undefined;
	};
	return { node, items, client, executionId, upstream, version, text, targetAt };
}

/** What an empty Key says outside a version-2 Claim. */
export const KEY_HINT =
	'Set Key to an expression that names the side effect, e.g. {{ $json.orderId }}-charge.';

/** Version 1's metadata: the key as stored. */
export function keyMeta(key: IdempotencyKey | undefined): IDataObject {
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
export function smallKeyMeta(key: IdempotencyKey | undefined): IDataObject {
	if (!key) return {};
	return { scope: key.scope, key: key.key, attempt: key.attempt, derivedKey: key.derivedKey };
}

export function withIdempotency(
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
