/**
 * The credential test the nodes offer for "Durable Sidecar API": a health
 * check (is anything answering, does TLS work) and then an authenticated call
 * (is the token right), each failure explained in words a user can act on.
 */
import type { ICredentialsDecrypted, INodeCredentialTestResult } from 'n8n-workflow';

import { GrpcStatus, isGrpcFailure } from './errors';
import { connectionFromCredentials, newSidecarClient, ServingStatus, targetOf } from './transport';

/** Deadline of each test call: a test should answer quickly. */
const TEST_DEADLINE_SECONDS = 10;

/** grpc-js details can carry OpenSSL's file and line: keep the part a person reads. */
function short(details: string): string {
	const line = details
		.replace(/^No connection established\. Last error: (Error: )?/, '')
		.split('\n')[0];
	const ssl = /SSL routines:[^:]*:([^:]+)/.exec(line);
	return (ssl ? ssl[1] : line.replace(/\s*Resolution note:.*$/, '')).slice(0, 200).trim();
}

function explainUnreachable(details: string, target: string, tls: boolean): string {
	if (tls && /wrong version number|packet length too long|http request/i.test(details)) {
		return `The sidecar at ${target} does not speak TLS. Turn TLS off in this credential, or start the sidecar with DURABLE_TLS_CERT_FILE and DURABLE_TLS_KEY_FILE.`;
	}
	if (/ECONNREFUSED/i.test(details)) {
		return `Connection refused by ${target}: nothing listens there. Check that the sidecar is running and that Host and Port match its DURABLE_LISTEN_ADDRESS.`;
	}
	if (/ENOTFOUND|EAI_AGAIN|getaddrinfo|Name resolution/i.test(details)) {
		return `The host name in ${target} cannot be resolved. Check Host.`;
	}
	if (
		/ssl|tls|certificate|handshake|wrong version number|self[- ]signed|unable to verify/i.test(
			details,
		)
	) {
		return tls
			? `TLS with ${target} failed (${short(details)}). Check that the sidecar serves TLS and that CA Certificate holds the authority that signed its certificate (a self-signed certificate must be given here).`
			: `The sidecar at ${target} expects TLS. Turn TLS on in this credential.`;
	}
	if (tls) {
		return `No TLS connection to ${target} (${short(details)}). If the sidecar runs without DURABLE_TLS_CERT_FILE, turn TLS off; otherwise check CA Certificate.`;
	}
	return `Cannot reach the sidecar at ${target} (${short(details)}). If the sidecar serves TLS, turn TLS on; otherwise check Host, Port and any firewall in between.`;
}

export async function testSidecarCredential(
	credential: ICredentialsDecrypted,
): Promise<INodeCredentialTestResult> {
	let conn;
	try {
		conn = connectionFromCredentials(credential.data ?? {});
	} catch (error) {
		return { status: 'Error', message: (error as Error).message };
	}
	if (!conn.token) {
		return {
			status: 'Error',
			message: "Auth Token is empty: give one of the tokens in the sidecar's DURABLE_AUTH_TOKENS.",
		};
	}
	const target = targetOf(conn);
	const client = newSidecarClient(conn);
	try {
		try {
			const status = await client.healthCheck('', TEST_DEADLINE_SECONDS);
			if (status !== ServingStatus.SERVING) {
				return {
					status: 'Error',
					message: `The sidecar at ${target} answers but is not serving (${ServingStatus[status]}): it is starting, shutting down or has lost its database. Check its log.`,
				};
			}
		} catch (error) {
			if (!isGrpcFailure(error)) {
				return {
					status: 'Error',
					message: `Checking the sidecar's health failed: ${(error as Error).message}`,
				};
			}
			if (error.code === GrpcStatus.DEADLINE_EXCEEDED) {
				return {
					status: 'Error',
					message: `No answer from ${target} within ${TEST_DEADLINE_SECONDS} s. ${explainUnreachable(error.details, target, conn.tls)}`,
				};
			}
			if (error.code === GrpcStatus.UNIMPLEMENTED) {
				return {
					status: 'Error',
					message: `${target} answers gRPC but is not a durable sidecar (no health service).`,
				};
			}
			return { status: 'Error', message: explainUnreachable(error.details, target, conn.tls) };
		}
		try {
			await client.listInstances(
				{ pageSize: 1, workflowId: 'credential-test' },
				TEST_DEADLINE_SECONDS,
			);
		} catch (error) {
			if (!isGrpcFailure(error)) {
				return {
					status: 'Error',
					message: `The authenticated test call failed: ${(error as Error).message}`,
				};
			}
			if (error.code === GrpcStatus.UNAUTHENTICATED) {
				return {
					status: 'Error',
					message: `The sidecar at ${target} rejected the Auth Token (${error.details}). Use one of the tokens in its DURABLE_AUTH_TOKENS (token=namespace pairs: give the part before '=').`,
				};
			}
			return {
				status: 'Error',
				message: `The sidecar is reachable, but an authenticated call failed: ${error.details}`,
			};
		}
		return {
			status: 'OK',
			message: `Connected to the durable sidecar at ${target}; the token is accepted.`,
		};
	} catch (error) {
		return {
			status: 'Error',
			message: `Testing the connection failed: ${(error as Error).message}`,
		};
	} finally {
		client.close();
	}
}

/** The methods of every node that calls the sidecar: the test its credential runs. */
export const sidecarNodeMethods = {
	credentialTest: {
		durableSidecarApiTest: testSidecarCredential,
	},
};
