/**
 * The process-wide clients: one per credential, reused by every node and
 * execution of this n8n process, and closed together when it shuts down.
 */
import { createHash } from 'crypto';

import { SidecarClient } from './client';
import { connectionFromCredentials, type SidecarConnection } from './connection';

const clients = new Map<string, SidecarClient>();

function cacheKey(conn: SidecarConnection): string {
	// The token is part of the key so that editing a credential never reuses a
	// client built with the old one; hashed so it is not kept as plain text.
	return createHash('sha256')
		.update(
			JSON.stringify([
				conn.host,
				conn.port,
				conn.tls,
				conn.caCertificate,
				conn.token,
				conn.deadlineSeconds,
			]),
		)
		.digest('hex');
}

/** The process-wide client for a credential: built once, then reused. */
export function getSidecarClient(conn: SidecarConnection): SidecarClient {
	const key = cacheKey(conn);
	let client = clients.get(key);
	if (!client) {
		client = new SidecarClient(conn);
		clients.set(key, client);
	}
	return client;
}

/** Bumped by closeAllSidecarClients, so clients remembered per credential object are not reused after it. */
let generation = 0;
const byCredentialData = new WeakMap<object, { generation: number; client: SidecarClient }>();

/**
 * getSidecarClient(connectionFromCredentials(data)), remembered per
 * credential data object: the nodes reuse one decrypted credential object for
 * a few seconds (credential-cache.ts), and building the connection and hashing
 * the cache key on every node run was a tenth of a millisecond of n8n CPU per
 * durable node (profiled in n8n 2.41).
 */
export function sidecarClientFor(data: Record<string, unknown>): SidecarClient {
	const hit = byCredentialData.get(data);
	if (hit && hit.generation === generation) return hit.client;
	const client = getSidecarClient(connectionFromCredentials(data));
	byCredentialData.set(data, { generation, client });
	return client;
}

/** A throwaway client (credential tests), closed by the caller. */
export function newSidecarClient(conn: SidecarConnection): SidecarClient {
	return new SidecarClient(conn);
}

/** Closes every cached client (tests, and n8n shutting the process down). */
export function closeAllSidecarClients(): void {
	for (const client of clients.values()) client.close();
	clients.clear();
	generation++;
}
