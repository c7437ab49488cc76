/* eslint-disable @n8n/community-nodes/no-restricted-imports, @n8n/community-nodes/no-dangerous-functions -- test code runs in Node, never inside n8n */
import { execFileSync } from 'child_process';
import { mkdtempSync, readFileSync, rmSync } from 'fs';
import { tmpdir } from 'os';
import { join } from 'path';
import type { ICredentialsDecrypted } from 'n8n-workflow';

import { DurableSidecarApi } from '../credentials/DurableSidecarApi.credentials';
import { ResumePoint } from '../nodes/ResumePoint/ResumePoint.node';
import { testSidecarCredential } from '../shared/credential-test';
import { closeAllSidecarClients } from '../shared/transport';
import { freePort, TestSidecar } from './support/sidecar';

let plain: TestSidecar;
let tls: TestSidecar;
let certDir: string;
let caPem: string;

function credential(data: Record<string, unknown>): ICredentialsDecrypted {
	return {
		id: 'c1',
		name: 'Durable Sidecar',
		type: 'durableSidecarApi',
		data: data as ICredentialsDecrypted['data'],
	};
}

beforeAll(async () => {
	certDir = mkdtempSync(join(tmpdir(), 'durable-tls-'));
	execFileSync(
		'openssl',
		[
			'req',
			'-x509',
			'-newkey',
			'rsa:2048',
			'-nodes',
			'-days',
			'1',
			'-subj',
			'/CN=localhost',
			'-addext',
			'subjectAltName=DNS:localhost,IP:127.0.0.1',
			'-keyout',
			join(certDir, 'key.pem'),
			'-out',
			join(certDir, 'cert.pem'),
		],
		{ stdio: 'ignore' },
	);
	caPem = readFileSync(join(certDir, 'cert.pem'), 'utf8');
	plain = await TestSidecar.start();
	tls = await TestSidecar.start({
		tls: { certFile: join(certDir, 'cert.pem'), keyFile: join(certDir, 'key.pem'), caPem },
	});
});

afterAll(async () => {
	closeAllSidecarClients();
	await plain?.stop();
	await tls?.stop();
	rmSync(certDir, { recursive: true, force: true });
});

describe('Durable Sidecar API credential', () => {
	test('declares host, port, TLS with CA, a password token and a deadline', () => {
		const cred = new DurableSidecarApi();
		expect(cred.name).toBe('durableSidecarApi');
		const byName = Object.fromEntries(cred.properties.map((p) => [p.name, p]));
		expect(Object.keys(byName)).toEqual([
			'host',
			'port',
			'tls',
			'caCertificate',
			'token',
			'deadlineSeconds',
		]);
		expect(byName.token.typeOptions?.password).toBe(true);
		expect(byName.caCertificate.displayOptions?.show?.tls).toEqual([true]);
	});

	test('every node offers the credential test', () => {
		expect(new ResumePoint().methods.credentialTest.durableSidecarApiTest).toBe(
			testSidecarCredential,
		);
	});

	test('a working sidecar and token pass', async () => {
		const result = await testSidecarCredential(credential(plain.credentials()));
		expect(result).toEqual({ status: 'OK', message: expect.stringContaining('token is accepted') });
	});

	test('a wrong token is explained as such', async () => {
		const result = await testSidecarCredential(
			credential(plain.credentials({ token: 'not-the-token' })),
		);
		expect(result.status).toBe('Error');
		expect(result.message).toMatch(/rejected the Auth Token.*DURABLE_AUTH_TOKENS/);
	});

	test('a refused connection says nothing listens there', async () => {
		const port = await freePort();
		const result = await testSidecarCredential(credential(plain.credentials({ port })));
		expect(result.status).toBe('Error');
		expect(result.message).toMatch(/Connection refused by 127\.0\.0\.1:\d+: nothing listens there/);
	});

	test('TLS against a plain-text sidecar says to turn TLS off', async () => {
		const result = await testSidecarCredential(credential(plain.credentials({ tls: true })));
		expect(result.status).toBe('Error');
		expect(result.message).toMatch(/does not speak TLS\. Turn TLS off/);
	});

	test('a TLS sidecar: passes with its CA, fails with a TLS explanation without it, and plain text is told to use TLS', async () => {
		const ok = await testSidecarCredential(
			credential(tls.credentials({ host: 'localhost', tls: true, caCertificate: caPem })),
		);
		expect(ok.status).toBe('OK');
		const noCa = await testSidecarCredential(
			credential(tls.credentials({ host: 'localhost', tls: true, caCertificate: '' })),
		);
		expect(noCa.status).toBe('Error');
		expect(noCa.message).toMatch(
			/TLS with localhost:\d+ failed \(self-signed certificate.*CA Certificate/,
		);
		const plainText = await testSidecarCredential(
			credential(tls.credentials({ host: 'localhost', tls: false })),
		);
		expect(plainText.status).toBe('Error');
		expect(plainText.message).toMatch(/If the sidecar serves TLS, turn TLS on/);
	});

	test('an empty token is refused before any call', async () => {
		const result = await testSidecarCredential(credential(plain.credentials({ token: '' })));
		expect(result).toMatchObject({
			status: 'Error',
			message: expect.stringContaining('Auth Token is empty'),
		});
	});
});
