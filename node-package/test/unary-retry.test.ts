/* eslint-disable @n8n/community-nodes/no-restricted-globals -- test code runs in Node, never inside n8n */
/**
 * callUnary's retries run from a timer: a client closed while a call waits to retry (n8n shutting down, a test
 * closing its probe) ends that call with the error, and nothing escapes as an unhandled rejection (which n8n
 * may treat as fatal, and jest blamed on whichever test ran next).
 */
import type { Client, ServiceError } from '@grpc/grpc-js';
import { Metadata, status } from '@grpc/grpc-js';

import type { SidecarChannel } from '../shared/grpc/channel';
import { callUnary, type UnaryMethod } from '../shared/grpc/unary';

const method: UnaryMethod<string, string> = {
	path: '/durable.v1.InstanceService/GetInstance',
	requestSerialize: (request: string) => Buffer.from(request),
	responseDeserialize: (bytes: Buffer) => bytes.toString(),
} as unknown as UnaryMethod<string, string>;

test('a client closed while a call waits to retry ends the call, with no unhandled rejection', async () => {
	const unhandled: unknown[] = [];
	const note = (reason: unknown) => unhandled.push(reason);
	process.on('unhandledRejection', note);
	let calls = 0;
	const service = {
		makeUnaryRequest: (...args: unknown[]) => {
			calls++;
			if (calls > 1) throw new Error('Channel has been shut down'); // what grpc-js does once closed
			const callback = args[args.length - 1] as (error: ServiceError | null) => void;
			const unavailable = Object.assign(new Error('14 UNAVAILABLE: sidecar restarting'), {
				code: status.UNAVAILABLE,
				details: 'sidecar restarting',
				metadata: new Metadata(),
			});
			setImmediate(() => callback(unavailable));
			return {};
		},
	} as unknown as Client;
	const channel = {
		target: '127.0.0.1:1',
		isFailing: () => false,
		isReady: () => true,
		metadata: () => new Metadata(),
		failedToConnectSince: () => false,
	} as unknown as SidecarChannel;
	try {
		await expect(callUnary(channel, service, method, 'request', 5)).rejects.toThrow(
			'Channel has been shut down',
		);
		await new Promise((done) => setTimeout(done, 50));
		expect(calls).toBe(2);
		expect(unhandled).toEqual([]);
	} finally {
		process.off('unhandledRejection', note);
	}
});
