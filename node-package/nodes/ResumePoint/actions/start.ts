/** The StartOrResume calls of one Resume Point run: one per item, a few at a time. */
import type { IDataObject, IExecuteFunctions, INode, INodeExecutionData } from 'n8n-workflow';

import type { NodeError } from '../../../shared/batch';
import { findAheadGuard, instanceClaim, type AheadGuard } from '../../../shared/claim-ahead';
import { isWebhookDelivery } from '../../../shared/door';
import { isSidecarUnreachable } from '../../../shared/errors';
import { workflowFingerprint } from '../../../shared/fingerprint';
import {
	callContext,
	durableOf,
	isObject,
	mapLimited,
	sidecarError,
	toJsonBytes,
	userJson,
} from '../../../shared/node-helpers';
import type { SidecarClient, StartOrResumeResponse } from '../../../shared/transport';
import { nodeParameter, parameterReader } from '../../../shared/upstream';
import { longestWait, MAX_LEASE_SECONDS, uncoverableWait, waitsAhead } from '../../../shared/waits';
import type { DifferentDelivery } from '../ResumePointDescription';
import type { Prepared } from './prepare';
import { retryPolicyOf } from './retryPolicy';
import type { ResumeVersion } from './version';

/** StartOrResume calls in flight at once (one per item; the contract has no batch form). */
const CONCURRENCY = 8;

export interface StartRun {
	node: INode;
	items: INodeExecutionData[];
	client: SidecarClient;
	workflowId: string;
	executionId: string;
	version: ResumeVersion;
	onDifferent: DifferentDelivery;
	prepared: Prepared[];
}

/** Each item's answer (or its error; nothing for an item not sent), and the Guard claimed ahead. */
export async function startOrResumeAll(
	ctx: IExecuteFunctions,
	{ node, items, client, workflowId, executionId, version, onDifferent, prepared }: StartRun,
): Promise<{ results: Array<StartOrResumeResponse | NodeError | undefined>; ahead?: AheadGuard }> {
	const follows = version.followsInstance;
	const versionLabel = nodeParameter(ctx, 'versionLabel', 0, '') as string;
	const retryPolicy = retryPolicyOf(nodeParameter(ctx, 'options', 0, {}) as IDataObject);
	const leaseOf = parameterReader<number>(ctx, 'options.leaseSeconds', 0);
	// v2: an n8n Wait node after this Resume Point: the lease it takes covers the wait too
	// (shared/waits). A Lease option the author set is their choice: no check then.
	const wait = follows ? longestWait(waitsAhead(ctx)) : undefined;
	const options: unknown = node.parameters.options;
	const leaseSet = isObject(options) && !!options.leaseSeconds;
	if (wait && !leaseSet) {
		const error = uncoverableWait(node, 'Resume Point', wait, wait.seconds ?? 0, 0);
		if (error) throw error;
	}
	const waitSeconds = Math.min(wait?.seconds ?? 0, MAX_LEASE_SECONDS);
	const pinnedOf = parameterReader<number>(ctx, 'options.pinnedVersion', 0);
	// v2: a new instance claims the key of the Guard this node feeds, when it feeds only that Guard.
	const ahead = follows ? findAheadGuard(ctx, { onlyChild: true }) : undefined;
	// Which workflow this execution runs: a version published a moment ago is bound at once.
	const fingerprint = workflowFingerprint(ctx);
	// Once the sidecar proved unreachable for a whole deadline, the remaining
	// items fail at once instead of each waiting out its own deadline.
	let unreachable: unknown;
	const results = await mapLimited(items.length, CONCURRENCY, async (i) => {
		const prep = prepared[i];
		if (prep.kind !== 'call') return undefined;
		// An item from the Resume Trigger is no delivery.
		const delivery = follows && !prep.claimToken;
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
				// v2: the delivery belongs to the instance (stored with a new one only).
				startItemJson: delivery ? toJsonBytes(userJson(items[i])) : Buffer.alloc(0),
				// A known key with another delivery: answered DIFFERENT, nothing taken (v2.1 refuses it).
				checkDelivery: delivery && onDifferent !== 'ignore' && isWebhookDelivery(items[i]),
				searchFieldsJson: prep.searchFields,
				// Not for an item handed over to run its bound (older) version.
				workflowFingerprint: durableOf(items[i]).runsBoundVersion ? '' : fingerprint,
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
			return sidecarError(node, error, callContext(client, 'Starting or resuming the instance', i));
		}
	});
	return { results, ahead };
}
