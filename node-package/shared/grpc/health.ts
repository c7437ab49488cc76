/**
 * grpc.health.v1.Health/Check on a sidecar. Its two one-field messages are
 * encoded by hand rather than generated, because its .proto is not part of
 * our contract.
 */
import { Metadata, type CallOptions, type Client } from '@grpc/grpc-js';

/** grpc.health.v1.HealthCheckResponse.ServingStatus */
export enum ServingStatus {
	UNKNOWN = 0,
	SERVING = 1,
	NOT_SERVING = 2,
	SERVICE_UNKNOWN = 3,
}

function encodeHealthRequest(service: string): Buffer {
	const name = Buffer.from(service, 'utf8');
	if (name.length === 0) return Buffer.alloc(0);
	if (name.length > 127) throw new Error('health service name too long');
	return Buffer.concat([Buffer.from([0x0a, name.length]), name]);
}

function decodeHealthResponse(buf: Buffer): ServingStatus {
	// Field 1 (status), wire type 0 (varint); absent means UNKNOWN.
	for (let i = 0; i < buf.length - 1; i++) {
		if (buf[i] === 0x08) return buf[i + 1] as ServingStatus;
	}
	return ServingStatus.UNKNOWN;
}

/** One Check of `service` ('' for the server as a whole), without a token (the sidecar needs none for it). */
export function checkHealth(
	client: Client,
	service: string,
	options: Partial<CallOptions>,
): Promise<ServingStatus> {
	return new Promise<ServingStatus>((resolve, reject) => {
		client.makeUnaryRequest<string, ServingStatus>(
			'/grpc.health.v1.Health/Check',
			encodeHealthRequest,
			decodeHealthResponse,
			service,
			new Metadata(),
			options,
			(error, response) => {
				if (error) reject(error);
				else resolve(response ?? ServingStatus.UNKNOWN);
			},
		);
	});
}
