/**
 * The one gRPC channel of a sidecar connection: its credentials and options
 * (message sizes, reconnect backoff, round-robin over several sidecars), the
 * bearer-token metadata, and the channel's connectivity, followed for its
 * whole life so a call that runs out of time can tell an unreachable sidecar
 * from a deadline that was merely short.
 */
import { Channel, ChannelCredentials, connectivityState, Metadata } from '@grpc/grpc-js';

import { addressesOf, targetOf, type SidecarConnection } from './connection';

/**
 * Several sidecars: round_robin spreads calls over every connected sidecar and
 * leaves out those that refuse connections or went away (a stopped or
 * restarting sidecar, whose GOAWAY closes its connection); a call that gets
 * UNAVAILABLE from one (its database down) is retried, and the retry goes to
 * the next. grpc-js has no client-side grpc.health.v1 checking (gRFC A17), so
 * the connection state is the health signal. One sidecar: grpc-js's default.
 */
function serviceConfigOf(conn: Pick<SidecarConnection, 'host' | 'port'>): Record<string, string> {
	if (addressesOf(conn).length === 1) return {};
	return { 'grpc.service_config': JSON.stringify({ loadBalancingConfig: [{ round_robin: {} }] }) };
}

export class SidecarChannel {
	/** The connection's target in gRPC's name syntax (targetOf). */
	readonly target: string;
	readonly credentials: ChannelCredentials;
	/** The grpc-js channel every service client of the connection shares (channelOverride). */
	readonly channel: Channel;
	/** When the channel last failed to connect (ms since the epoch; 0: never). */
	private lastConnectFailureAt = 0;

	constructor(readonly connection: SidecarConnection) {
		this.target = targetOf(connection);
		this.credentials = connection.tls
			? ChannelCredentials.createSsl(
					connection.caCertificate ? Buffer.from(connection.caCertificate, 'utf8') : null,
				)
			: ChannelCredentials.createInsecure();
		this.channel = new Channel(this.target, this.credentials, {
			// Checkpoint states may be large; the sidecar's own limit applies.
			'grpc.max_receive_message_length': 64 * 1024 * 1024,
			'grpc.max_send_message_length': 64 * 1024 * 1024,
			// Calls wait for the channel (waitForReady): after a sidecar restart the
			// channel must notice within a couple of seconds, not after 10.
			'grpc.initial_reconnect_backoff_ms': 100,
			'grpc.max_reconnect_backoff_ms': 2_000,
			...serviceConfigOf(connection),
		});
		this.followConnectivity();
	}

	/** Bearer token metadata for an authenticated call. */
	metadata(): Metadata {
		const md = new Metadata();
		if (this.connection.token) md.set('authorization', `Bearer ${this.connection.token}`);
		return md;
	}

	/** Whether the channel is connected now. */
	isReady(): boolean {
		return this.channel.getConnectivityState(false) === connectivityState.READY;
	}

	/** Whether the channel's last attempt to connect failed (TRANSIENT_FAILURE). */
	isFailing(): boolean {
		return this.channel.getConnectivityState(false) === connectivityState.TRANSIENT_FAILURE;
	}

	/** Whether the channel failed to connect at `since` (ms since the epoch) or later. */
	failedToConnectSince(since: number): boolean {
		return this.lastConnectFailureAt >= since;
	}

	/**
	 * Follows the channel's state for its whole life and notes when it last
	 * failed to connect (TRANSIENT_FAILURE): a call that runs out of time after
	 * such a failure could not reach the sidecar, unlike one whose deadline was
	 * merely too short for a channel that was still connecting. No deadline, so
	 * no timer keeps the process alive; closing the channel ends the watch.
	 */
	private followConnectivity(): void {
		const state = this.channel.getConnectivityState(false);
		if (state === connectivityState.TRANSIENT_FAILURE) this.lastConnectFailureAt = Date.now();
		if (state === connectivityState.SHUTDOWN) return;
		try {
			this.channel.watchConnectivityState(state, Infinity, () => this.followConnectivity());
		} catch {
			// The channel was closed meanwhile.
		}
	}

	close(): void {
		this.channel.close();
	}
}
