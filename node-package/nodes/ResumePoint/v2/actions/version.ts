/**
 * Version 2: small metadata; a resumed item gets the start item with the saved steps on top;
 * the delivery is stored with a new instance and a different one refused (2.1) or let through (2).
 */
import type { IDataObject } from 'n8n-workflow';

import { fromJsonBytes, isObject } from '../../../../shared/node-helpers';
import { nodeOf } from '../../../../shared/run-node';
import { nodeParameter } from '../../../../shared/upstream';
import type { DifferentDelivery } from '../../ResumePointDescription';
import { outcomeName, smallInstanceMeta } from '../../actions/routing';
import type { ResumeVersion } from '../../actions/version';

export const version2: ResumeVersion = {
	differentDelivery: (ctx) =>
		nodeParameter(
			ctx,
			'differentDelivery',
			0,
			nodeOf(ctx).typeVersion >= 2.1 ? 'refuse' : 'ignore',
		) as DifferentDelivery,
	followsInstance: true,
	answerMeta: (response) => {
		const meta: IDataObject = {
			...smallInstanceMeta(response.instance),
			outcome: outcomeName(response.outcome),
		};
		if (response.versionMismatch) meta.versionMismatch = true;
		return meta;
	},
	resumedState: (response) => {
		// The start item, then the saved state on top: a resumed execution sees
		// the delivery that started the instance and every step saved since.
		const state = fromJsonBytes(response.latestCheckpoint?.stateJson);
		const start = fromJsonBytes(response.startItemJson);
		if (!isObject(start)) return state;
		if (state === undefined) return start;
		return isObject(state)
			? { ...start, ...state }
			: { ...start, state: state as IDataObject[string] };
	},
	checkpointMeta: () => ({}),
};
