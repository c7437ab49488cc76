/**
 * The Durable Sidecar credential, decrypted once per workflow and credential
 * for a few seconds instead of once per node run.
 *
 * n8n's getCredentials reads the credential row from n8n's database and
 * decrypts it on every call; a durable order runs several of our nodes one
 * after another, each of which needs the same credential. Profiled in n8n
 * 2.41 (bench.n8n --profile) this was about 1 ms of n8n CPU and a database
 * round trip per durable node. Reused only within the same workflow, node
 * type and credential id, so n8n's own checks (which workflow may use which
 * credential, which node type accepts it) were made for exactly this
 * combination; an edited credential applies after at most CREDENTIAL_TTL_MS.
 */
import type { ICredentialDataDecryptedObject, IExecuteFunctions } from 'n8n-workflow';

import { nodeOf } from './run-node';
/** How long a decrypted credential is reused. */
export const CREDENTIAL_TTL_MS = 5_000;
const MAX_ENTRIES = 256;

const cache = new Map<string, { at: number; data: Promise<ICredentialDataDecryptedObject> }>();

export async function cachedCredentials(
	ctx: IExecuteFunctions,
	type: string,
): Promise<ICredentialDataDecryptedObject> {
	const node = nodeOf(ctx);
	const id = node.credentials?.[type]?.id;
	const workflowId = ctx.getWorkflow().id;
	if (!id || !workflowId) return await ctx.getCredentials(type);
	const key = `${workflowId}\u0000${node.type}\u0000${id}`;
	const now = Date.now();
	const hit = cache.get(key);
	if (hit && now - hit.at < CREDENTIAL_TTL_MS) return await hit.data;
	const data = ctx.getCredentials(type);
	cache.set(key, { at: now, data });
	if (cache.size > MAX_ENTRIES) cache.delete(cache.keys().next().value as string);
	// A failure is n8n's answer for this call only; the next node asks again.
	data.catch(() => {
		if (cache.get(key)?.data === data) cache.delete(key);
	});
	return await data;
}

/** Forgets every cached credential (tests). */
export function clearCredentialCache(): void {
	cache.clear();
}
