/** The Durable Limit's outputs. */
import type { INodeParameters } from 'n8n-workflow';

/**
 * The outputs from the operation and Over the Limit. Self-contained: n8n
 * evaluates it as an expression.
 */
export const configuredOutputs = (parameters: INodeParameters) => {
	const busy = parameters.overLimit === 'busy';
	switch (parameters.operation) {
		case 'leaveSection':
			return [{ type: 'main', displayName: 'Left' }];
		case 'rateLimit':
			return busy
				? [
						{ type: 'main', displayName: 'Allowed' },
						{ type: 'main', displayName: 'Busy' },
					]
				: [{ type: 'main', displayName: 'Allowed' }];
		case 'debounce':
			return [
				{ type: 'main', displayName: 'Run' },
				{ type: 'main', displayName: 'Debounced' },
			];
		default:
			return busy
				? [
						{ type: 'main', displayName: 'Entered' },
						{ type: 'main', displayName: 'Busy' },
					]
				: [{ type: 'main', displayName: 'Entered' }];
	}
};
