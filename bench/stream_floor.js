// bench/stream_floor.py's client: unary calls against messages on one open bidirectional stream, through
// the node package's grpc-js, to the echo server stream_floor.py starts. Prints one JSON row per
// measurement (client CPU from process.cpuUsage, the server's from its Cpu method, read outside the loop).
'use strict';
const path = require('path');

const [grpcDir, port, calls, gapCalls, rounds] = process.argv.slice(2);
const grpc = require(path.resolve(grpcDir));
const client = new grpc.Client(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
const same = (b) => b;
const payload = Buffer.alloc(1500, 7); // about a save request of the n8n order
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function call(method, body) {
	return new Promise((resolve, reject) =>
		client.makeUnaryRequest(`/bench.Echo/${method}`, same, same, body, new grpc.Metadata(),
			{ deadline: Date.now() + 10000 }, (error, reply) => (error ? reject(error) : resolve(reply))));
}
const unary = () => call('Unary', payload);
const serverNs = async () => Number((await call('Cpu', Buffer.alloc(0))).toString());

const waiting = [];
const stream = client.makeBidiStreamRequest('/bench.Echo/Stream', same, same);
stream.on('data', (reply) => waiting.shift()(reply));
stream.on('error', (error) => { console.error(error); process.exit(1); });
function onStream() {
	return new Promise((resolve) => { waiting.push(resolve); stream.write(payload); });
}

async function measure(kind, n, gap) {
	const send = kind === 'unary' ? unary : onStream;
	for (let i = 0; i < 20; i++) await send(); // warm
	const server = await serverNs(), cpu = process.cpuUsage(), started = process.hrtime.bigint();
	for (let i = 0; i < n; i++) {
		await send();
		if (gap) await sleep(gap);
	}
	const used = process.cpuUsage(cpu);
	const serverUsed = (await serverNs()) - server;
	return { kind, gap_ms: gap, calls: n, client_cpu_ms: (used.user + used.system) / 1000 / n,
		server_cpu_ms: serverUsed / 1e6 / n, wall_ms: Number(process.hrtime.bigint() - started) / 1e6 / n };
}

(async () => {
	for (let r = 0; r < Number(rounds); r++) {
		for (const gap of [0, 15]) {
			for (const kind of r % 2 ? ['stream', 'unary'] : ['unary', 'stream']) {
				console.log(JSON.stringify({ round: r + 1, ...(await measure(kind, gap ? Number(gapCalls) : Number(calls), gap)) }));
			}
		}
	}
	const cpu = process.cpuUsage();
	for (let i = 0; i < Number(gapCalls); i++) await sleep(15);
	const used = process.cpuUsage(cpu);
	console.log(JSON.stringify({ kind: 'sleep only', gap_ms: 15, client_cpu_ms: (used.user + used.system) / 1000 / Number(gapCalls) }));
	stream.end();
	client.close();
})();
