/** sidecarClientFor: one client per credential data object, none reused after closeAllSidecarClients. */
import { closeAllSidecarClients, getSidecarClient, sidecarClientFor } from '../shared/transport';

afterAll(() => closeAllSidecarClients());

describe('sidecarClientFor', () => {
	const data = () => ({
		host: '127.0.0.1',
		port: 59999,
		tls: false,
		token: 't',
		deadlineSeconds: 5,
	});

	it('answers what getSidecarClient answers, and the same client for the same object', () => {
		const creds = data();
		const client = sidecarClientFor(creds);
		expect(sidecarClientFor(creds)).toBe(client);
		// An equal credential object (the next decrypt) gets the process-wide client of that credential.
		expect(sidecarClientFor(data())).toBe(client);
		expect(client.connection).toEqual({ ...data(), caCertificate: '' });
		expect(getSidecarClient(client.connection)).toBe(client);
	});

	it('builds a new client after closeAllSidecarClients', () => {
		const creds = data();
		const before = sidecarClientFor(creds);
		closeAllSidecarClients();
		const after = sidecarClientFor(creds);
		expect(after).not.toBe(before);
		expect(sidecarClientFor(creds)).toBe(after);
	});

	it('refuses a credential without a host, every time', () => {
		const bad = { ...data(), host: '' };
		expect(() => sidecarClientFor(bad)).toThrow('has no host');
		expect(() => sidecarClientFor(bad)).toThrow('has no host');
	});
});
