import type { ICredentialType, INodeProperties, Icon } from 'n8n-workflow';

/**
 * Connection to the durable sidecar (gRPC). Tested by the nodes'
 * `durableSidecarApiTest` method: a health check, then an authenticated call.
 */
export class DurableSidecarApi implements ICredentialType {
	name = 'durableSidecarApi';

	displayName = 'Durable Sidecar API';

	icon: Icon = { light: 'file:durableSidecar.svg', dark: 'file:durableSidecar.dark.svg' };

	documentationUrl = 'https://github.com/durable-n8n/durable-n8n/blob/main/node-package/README.md#credential-durable-sidecar-api';

	properties: INodeProperties[] = [
		{
			displayName: 'Host',
			name: 'host',
			type: 'string',
			default: '127.0.0.1',
			required: true,
			placeholder: 'durable-sidecar.internal',
			description:
				'Host name or IP address the sidecar listens on (DURABLE_LISTEN_ADDRESS). Several sidecars: their IP addresses separated by commas, each with an optional own port (10.0.0.5, 10.0.0.6:50052); calls are spread round-robin over those that answer.',
		},
		{
			displayName: 'Port',
			name: 'port',
			type: 'number',
			default: 50051,
			required: true,
			typeOptions: { minValue: 1, maxValue: 65535 },
			description: 'gRPC port of the sidecar',
		},
		{
			displayName: 'TLS',
			name: 'tls',
			type: 'boolean',
			default: false,
			description:
				'Whether to connect with TLS. Turn on only when the sidecar has DURABLE_TLS_CERT_FILE set.',
		},
		{
			displayName: 'CA Certificate',
			name: 'caCertificate',
			type: 'string',
			typeOptions: { password: true, rows: 4 },
			default: '',
			placeholder: '-----BEGIN CERTIFICATE-----',
			description:
				"PEM certificate of the authority that signed the sidecar's certificate. Leave empty to trust the system's authorities.",
			displayOptions: { show: { tls: [true] } },
		},
		{
			displayName: 'Auth Token',
			name: 'token',
			type: 'string',
			typeOptions: { password: true },
			default: '',
			required: true,
			description:
				"One of the tokens in the sidecar's DURABLE_AUTH_TOKENS; it selects the namespace your instances and keys live in. Sent as 'authorization: Bearer <token>'.",
		},
		{
			displayName: 'Call Deadline (Seconds)',
			name: 'deadlineSeconds',
			type: 'number',
			default: 30,
			typeOptions: { minValue: 1, maxValue: 3600 },
			description: 'How long a node waits for the sidecar to answer one call before failing it',
		},
	];
}
