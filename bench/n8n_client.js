// The durable order's 4 RPCs through the nodes' own bundled client (node-package/dist/shared/transport.js),
// as bench/n8n_rpcs.py sends them, and the whole process's CPU (user + system, every thread) per order:
// what "the RPC client's share" of a durable node costs n8n, without n8n. Rounds alternate with a
// control that only sleeps the same gaps (timers cost a little too), and the figure is the median
// difference. Usage: node bench/n8n_client.js HOST PORT TOKEN ORDERS GAP_MS ROUNDS; prints one JSON line.
'use strict';
const path = require('path');
const transport = require(path.join(__dirname, '..', 'node-package', 'dist', 'shared', 'transport.js'));

const [host, port, token, orders, gapMs, rounds] = process.argv.slice(2);
const client = transport.getSidecarClient({
	host, port: Number(port), tls: false, caCertificate: '', token, deadlineSeconds: 30,
});
const ORDERS = Number(orders);
const GAP_MS = Number(gapMs);
const ROUNDS = Number(rounds);
const WORKFLOW = 'bench-n8n-client';
const CALLS = ['payment', 'inventory', 'shipping'];
const ADD_STEP_RESULT = 2; // StateMode.STATE_MODE_ADD_STEP_RESULT
const pause = () => (GAP_MS > 0 ? new Promise((resolve) => setTimeout(resolve, GAP_MS)) : Promise.resolve());

async function order(withCalls) {
	if (!withCalls) {
		for (let i = 0; i <= CALLS.length; i++) await pause();
		return;
	}
	const key = Math.random().toString(36).slice(2, 14);
	const execution = String(Math.floor(Math.random() * 1e9));
	const fingerprint = Buffer.from(JSON.stringify({ instanceKey: key, workflowId: WORKFLOW }));
	const claim = (scope) => ({ scope, key, payloadJson: fingerprint, holder: execution, workflowId: WORKFLOW, instanceKey: key });
	const item = { headers: { host: '127.0.0.1:5678', 'content-type': 'application/json' }, params: {}, query: {},
		body: { orderId: key, amount: 42.0, email: `${key}@example.com` } };
	const started = await client.startOrResume({
		workflowId: WORKFLOW, instanceKey: key, executionId: execution, includeState: true,
		startItemJson: Buffer.from(JSON.stringify(item)), claimOnStart: claim(CALLS[0]),
	});
	let attempt = started.startClaim.key.attempt;
	await pause();
	for (let n = 0; n < CALLS.length; n++) {
		const last = n === CALLS.length - 1;
		const saved = await client.saveCheckpoints({ items: [{
			workflowId: WORKFLOW, instanceKey: key, stepName: CALLS[n], executionId: execution,
			stateJson: Buffer.from(JSON.stringify({ ok: true, service: CALLS[n], orderId: key })),
			nodeName: `Save ${CALLS[n]}`, stateMode: ADD_STEP_RESULT, completeKey: { scope: CALLS[n], key, attempt },
			completeInstance: last, claimNext: last ? undefined : claim(CALLS[n + 1]),
		}] });
		if (!last) attempt = saved.results[0].nextClaim.key.attempt;
		await pause();
	}
}

async function main() {
	for (let i = 0; i < 10; i++) await order(true); // warm-up: connection, JIT
	const cpu = { rpcs: [], control: [] };
	const wall = { rpcs: [], control: [] };
	for (let round = 0; round < ROUNDS; round++) {
		for (const kind of ['control', 'rpcs']) {
			const before = process.cpuUsage();
			const started = process.hrtime.bigint();
			for (let i = 0; i < ORDERS; i++) await order(kind === 'rpcs');
			const used = process.cpuUsage(before);
			cpu[kind].push((used.user + used.system) / 1000 / ORDERS);
			wall[kind].push(Number(process.hrtime.bigint() - started) / 1e6 / ORDERS);
		}
	}
	const median = (values) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];
	const extra = cpu.rpcs.map((v, i) => v - cpu.control[i]);
	console.log(JSON.stringify({
		gap_ms: GAP_MS, orders: ORDERS, rounds: ROUNDS, rpcs_per_order: 1 + CALLS.length,
		cpu_ms_per_order: median(extra), cpu_ms_per_rpc: median(extra) / (1 + CALLS.length),
		rounds_cpu_ms: { rpcs: cpu.rpcs, control: cpu.control }, wall_ms_per_order: median(wall.rpcs),
	}));
	transport.closeAllSidecarClients();
}

main().catch((error) => {
	console.error(error);
	process.exit(1);
});
