/**
 * Who this n8n process is, for its session: host name, process id and mode
 * ("regular", "main", "worker", "webhook"), shown by the console and the CLI
 * as the holder of an instance's lease.
 *
 * This module is bundled with the gRPC client (scripts/bundle.mjs), which
 * itself reads the process and the network stack; it only reads, never sets.
 */
// eslint-disable-next-line @n8n/community-nodes/no-restricted-imports -- the host name of the session (read only)
import { hostname } from 'os';

import type { OpenSessionRequest } from '../gen/durable/v1/session';

/** The n8n command this process runs, and whether executions go through a queue. */
export function modeOf(argv: readonly string[], executionsMode: string | undefined): string {
	const command = argv.slice(2).find((a) => !a.startsWith('-')) ?? '';
	if (command === 'worker') return 'worker';
	if (command === 'webhook') return 'webhook';
	return executionsMode === 'queue' ? 'main' : 'regular';
}

export function processIdentity(): OpenSessionRequest {
	// eslint-disable-next-line @n8n/community-nodes/no-restricted-globals -- the session names its process
	const { pid, argv, env } = process;
	return {
		host: hostname().slice(0, 255) || 'unknown',
		pid,
		mode: modeOf(argv, env.EXECUTIONS_MODE),
		client: 'n8n-nodes-durable',
	};
}
