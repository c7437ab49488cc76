/* eslint-disable @n8n/community-nodes/no-restricted-globals, @n8n/community-nodes/no-restricted-imports, @n8n/community-nodes/no-dangerous-functions, @n8n/community-nodes/require-node-api-error -- test code runs in Node, never inside n8n */
/**
 * A real durable sidecar for the tests: a fresh PostgreSQL database, a free
 * port, `.venv/bin/durable-sidecar serve`. Anything missing (the venv,
 * PostgreSQL) fails the test run; nothing is skipped.
 */
import { spawn, type ChildProcess } from 'child_process';
import { randomBytes } from 'crypto';
import { existsSync } from 'fs';
import { createServer } from 'net';
import { join, resolve } from 'path';
import { Client as PgClient } from 'pg';

import { newSidecarClient, ServingStatus, type SidecarConnection } from '../../shared/transport';

export const REPO_ROOT = resolve(__dirname, '..', '..', '..');
export const SIDECAR_BIN = join(REPO_ROOT, '.venv', 'bin', 'durable-sidecar');
const PG = { host: '127.0.0.1', port: 5432, user: 'postgres', database: 'postgres' };

export async function freePort(): Promise<number> {
	return await new Promise((resolvePort, reject) => {
		const server = createServer();
		server.once('error', reject);
		server.listen(0, '127.0.0.1', () => {
			const address = server.address();
			const port = typeof address === 'object' && address ? address.port : 0;
			server.close(() => resolvePort(port));
		});
	});
}

async function admin<T>(work: (pg: PgClient) => Promise<T>): Promise<T> {
	const pg = new PgClient({ ...PG, connectionTimeoutMillis: 5000 });
	try {
		await pg.connect();
	} catch (error) {
		throw new Error(
			`PostgreSQL is not reachable at ${PG.host}:${PG.port} as ${PG.user} (${(error as Error).message}); the node tests need it`,
		);
	}
	try {
		return await work(pg);
	} finally {
		await pg.end();
	}
}

export interface SidecarOptions {
	/** Extra DURABLE_* settings. */
	env?: Record<string, string>;
	/** PEM files for TLS. */
	tls?: { certFile: string; keyFile: string; caPem: string };
}

export class TestSidecar {
	readonly token = `test-token-${randomBytes(6).toString('hex')}`;
	readonly namespace = `ns-${randomBytes(4).toString('hex')}`;
	port = 0;
	private child: ChildProcess | undefined;
	private log: string[] = [];

	private constructor(
		readonly database: string,
		private readonly options: SidecarOptions,
	) {}

	static async start(options: SidecarOptions = {}): Promise<TestSidecar> {
		if (!existsSync(SIDECAR_BIN)) {
			throw new Error(`${SIDECAR_BIN} does not exist: run 'make setup' first`);
		}
		const database = `durable_node_test_${randomBytes(6).toString('hex')}`;
		await admin(async (pg) => {
			await pg.query(`CREATE DATABASE ${database}`);
		});
		const sidecar = new TestSidecar(database, options);
		sidecar.port = await freePort();
		try {
			await sidecar.launch();
		} catch (error) {
			// The suite fails; leave no database behind.
			await sidecar.stop();
			throw error;
		}
		return sidecar;
	}

	connection(overrides: Partial<SidecarConnection> = {}): SidecarConnection {
		return {
			host: '127.0.0.1',
			port: this.port,
			tls: false,
			caCertificate: '',
			token: this.token,
			deadlineSeconds: 10,
			...overrides,
		};
	}

	/** Credential data as n8n would hand it to a node. */
	credentials(overrides: Record<string, unknown> = {}): Record<string, unknown> {
		return {
			host: '127.0.0.1',
			port: this.port,
			tls: false,
			caCertificate: '',
			token: this.token,
			deadlineSeconds: 10,
			...overrides,
		};
	}

	async launch(): Promise<void> {
		this.log = [];
		const env: NodeJS.ProcessEnv = {
			...process.env,
			DURABLE_DATABASE_URL: `postgresql://${PG.user}@${PG.host}:${PG.port}/${this.database}`,
			DURABLE_REDIS_URL: 'redis://127.0.0.1:6379/0',
			DURABLE_LISTEN_ADDRESS: `127.0.0.1:${this.port}`,
			DURABLE_METRICS_ADDRESS: '',
			DURABLE_AUTH_TOKENS: `${this.token}=${this.namespace}`,
			DURABLE_LOG_LEVEL: 'WARNING',
			DURABLE_SHUTDOWN_GRACE_SECONDS: '1',
			...(this.options.tls
				? {
						DURABLE_TLS_CERT_FILE: this.options.tls.certFile,
						DURABLE_TLS_KEY_FILE: this.options.tls.keyFile,
					}
				: {}),
			...this.options.env,
		};
		const child = spawn(SIDECAR_BIN, ['serve'], { env, stdio: ['ignore', 'pipe', 'pipe'] });
		this.child = child;
		const keep = (chunk: Buffer) => {
			this.log.push(chunk.toString());
			if (this.log.length > 200) this.log.shift();
		};
		child.stdout?.on('data', keep);
		child.stderr?.on('data', keep);
		let exited: number | null | undefined;
		child.once('exit', (code) => {
			exited = code;
		});
		const deadline = Date.now() + 30_000;
		const tls = this.options.tls;
		const probe = newSidecarClient(
			this.connection({
				tls: Boolean(tls),
				caCertificate: tls?.caPem ?? '',
				host: tls ? 'localhost' : '127.0.0.1',
				deadlineSeconds: 1,
			}),
		);
		try {
			while (Date.now() < deadline) {
				if (exited !== undefined) {
					throw new Error(
						`the sidecar exited with ${String(exited)} at start:\n${this.log.join('')}`,
					);
				}
				try {
					if ((await probe.healthCheck('', 1)) === ServingStatus.SERVING) return;
				} catch {
					// not up yet
				}
				await new Promise((r) => setTimeout(r, 200));
			}
			throw new Error(`the sidecar did not become healthy within 30 s:\n${this.log.join('')}`);
		} finally {
			probe.close();
		}
	}

	/** SIGTERM and wait for the exit (graceful stop). */
	async stopProcess(): Promise<void> {
		const child = this.child;
		if (!child || child.exitCode !== null || child.signalCode !== null) return;
		await new Promise<void>((done) => {
			const kill = setTimeout(() => child.kill('SIGKILL'), 10_000);
			child.once('exit', () => {
				clearTimeout(kill);
				done();
			});
			child.kill('SIGTERM');
		});
	}

	async restart(): Promise<void> {
		await this.stopProcess();
		await this.launch();
	}

	/** SIGKILL (a crash: nothing drained, connections cut) and wait for the exit. */
	async kill(): Promise<void> {
		const child = this.child;
		if (!child || child.exitCode !== null || child.signalCode !== null) return;
		await new Promise<void>((done) => {
			child.once('exit', () => done());
			child.kill('SIGKILL');
		});
	}

	async stop(): Promise<void> {
		await this.stopProcess();
		await admin(async (pg) => {
			await pg.query(`DROP DATABASE IF EXISTS ${this.database} WITH (FORCE)`);
		});
	}

	/** Runs SQL against this sidecar's database (to inspect or age rows). */
	/** Lets the leases of a workflow's instances (or of one) lapse, as when their execution died. */
	async expireLease(workflowId: string, instanceKey?: string): Promise<void> {
		await this.sql(
			"UPDATE durable_instances SET lease_expires_at = now() - interval '1 second' WHERE workflow_id = $1" +
				(instanceKey === undefined ? '' : ' AND instance_key = $2'),
			instanceKey === undefined ? [workflowId] : [workflowId, instanceKey],
		);
	}

	async sql<T extends Record<string, unknown>>(text: string, values: unknown[] = []): Promise<T[]> {
		const pg = new PgClient({ ...PG, database: this.database });
		await pg.connect();
		try {
			return (await pg.query<T>(text, values)).rows;
		} finally {
			await pg.end();
		}
	}
}
