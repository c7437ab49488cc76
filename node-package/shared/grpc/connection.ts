/**
 * The "Durable Sidecar API" credential as a connection: its fields with their
 * defaults, the sidecar addresses of its Host field and the gRPC target they
 * make. Plain string work, checked when the credential is read.
 */

/** What a node needs from the "Durable Sidecar API" credential. */
export interface SidecarConnection {
	host: string;
	port: number;
	tls: boolean;
	/** PEM CA bundle; empty means the system roots. */
	caCertificate: string;
	token: string;
	/** Deadline of each unary call, in seconds. */
	deadlineSeconds: number;
}

export const DEFAULT_DEADLINE_SECONDS = 30;

/** Reads the credential's fields with defaults; throws on a value no call could use. */
export function connectionFromCredentials(data: Record<string, unknown>): SidecarConnection {
	const host = String(data.host ?? '').trim();
	const port = Number(data.port ?? 0);
	const deadline = Number(data.deadlineSeconds ?? DEFAULT_DEADLINE_SECONDS);
	if (!host) {
		throw new Error('The Durable Sidecar API credential has no host');
	}
	if (!Number.isInteger(port) || port < 1 || port > 65535) {
		throw new Error(
			`The Durable Sidecar API credential's port must be 1 to 65535, got ${String(data.port)}`,
		);
	}
	targetOf({ host, port }); // a malformed address list fails here, with the credential named
	return {
		host,
		port,
		tls: data.tls === true,
		caCertificate: data.tls === true ? String(data.caCertificate ?? '').trim() : '',
		token: String(data.token ?? '').trim(),
		deadlineSeconds:
			Number.isFinite(deadline) && deadline > 0 ? deadline : DEFAULT_DEADLINE_SECONDS,
	};
}

/** 4 or 6 for an IPv4 or IPv6 literal, 0 otherwise (node:net is off limits in a community node). */
function ipFamily(host: string): 0 | 4 | 6 {
	if (/^(\d{1,3})(\.\d{1,3}){3}$/.test(host) && host.split('.').every((o) => Number(o) <= 255))
		return 4;
	// An IPv6 literal has at least two colons ("10.0.0.5:50051" is an IPv4 address and a port).
	if (host.split(':').length > 2 && /^[0-9a-fA-F:.]+(%[\w.-]+)?$/.test(host)) return 6;
	return 0;
}

/** One sidecar address of the credential's Host field. */
export interface SidecarAddress {
	host: string;
	port: number;
}

/**
 * The sidecar addresses of a Host field: one host name or IP address, or a
 * comma-separated list of IP addresses, each with an optional own port
 * ("10.0.0.5, 10.0.0.6:50052", "[fd00::5]:50051"); the Port field is the default.
 */
export function addressesOf(conn: Pick<SidecarConnection, 'host' | 'port'>): SidecarAddress[] {
	const entries = conn.host
		.split(',')
		.map((e) => e.trim())
		.filter((e) => e !== '');
	const addresses = entries.map((entry): SidecarAddress => {
		const bracketed = /^\[([^\]]+)\](?::(\d+))?$/.exec(entry);
		if (bracketed)
			return { host: bracketed[1], port: bracketed[2] ? Number(bracketed[2]) : conn.port };
		if (ipFamily(entry) === 6) return { host: entry, port: conn.port }; // a bare IPv6 literal has no port
		const withPort = /^([^:]+):(\d+)$/.exec(entry);
		if (withPort) return { host: withPort[1], port: Number(withPort[2]) };
		if (entry.includes(':')) {
			throw new Error(`The Durable Sidecar API credential's host "${entry}" is not an address`);
		}
		return { host: entry, port: conn.port };
	});
	for (const a of addresses) {
		if (!Number.isInteger(a.port) || a.port < 1 || a.port > 65535) {
			throw new Error(
				`The Durable Sidecar API credential's port must be 1 to 65535, got ${a.port} in "${conn.host}"`,
			);
		}
	}
	if (addresses.length > 1 && !addresses.every((a) => ipFamily(a.host) !== 0)) {
		throw new Error(
			"The Durable Sidecar API credential's host lists several sidecars: list their IP addresses " +
				'(e.g. "10.0.0.5, 10.0.0.6"), or give one DNS name that resolves to every sidecar',
		);
	}
	return addresses;
}

function hostPort(a: SidecarAddress): string {
	return `${a.host.includes(':') ? `[${a.host}]` : a.host}:${a.port}`;
}

/**
 * The target in gRPC's name syntax: host:port for one sidecar (IPv6 literals
 * bracketed); for several, grpc-js's static multi-address target
 * (ipv4:a:p,b:p or ipv6:[a]:p,[b]:p), which the channel balances round-robin.
 */
export function targetOf(conn: Pick<SidecarConnection, 'host' | 'port'>): string {
	const addresses = addressesOf(conn);
	if (addresses.length === 1) return hostPort(addresses[0]);
	const families = new Set(addresses.map((a) => ipFamily(a.host)));
	if (families.size > 1) {
		throw new Error(
			"The Durable Sidecar API credential's host mixes IPv4 and IPv6 addresses; list one family",
		);
	}
	return `${families.has(6) ? 'ipv6' : 'ipv4'}:${addresses.map(hostPort).join(',')}`;
}
