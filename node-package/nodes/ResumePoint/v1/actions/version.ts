/** Version 1: the whole instance in the metadata, the saved state alone restored, no delivery check. */
import type { IDataObject } from 'n8n-workflow';

import { fromJsonBytes, instanceFields, isoTime } from '../../../../shared/node-helpers';
import type { Instance } from '../../../../shared/transport';
import type { ResumeVersion } from '../../actions/version';
import { outcomeName } from '../../actions/routing';

export const version1: ResumeVersion = {
	differentDelivery: () => 'ignore',
	followsInstance: false,
	answerMeta: (response) => ({
		...instanceMeta(response.instance),
		outcome: outcomeName(response.outcome),
		currentVersion: response.currentVersion,
		versionMismatch: response.versionMismatch,
	}),
	resumedState: (response) => fromJsonBytes(response.latestCheckpoint?.stateJson),
	checkpointMeta: (latest) =>
		latest
			? {
					lastCheckpoint: {
						sequence: latest.sequence,
						stepName: latest.stepName,
						sha256: latest.sha256,
						executionId: latest.executionId,
						createdAt: isoTime(latest.createdAt),
					},
				}
			: {},
};

const instanceMeta = (inst: Instance | undefined): IDataObject =>
	instanceFields(inst, (i) => ({
		boundVersion: i.boundVersion,
		versionLabel: i.versionLabel,
		lastSequence: i.lastSequence,
		lastStep: i.lastStep,
		resumeCount: i.resumeCount,
		leaseOwner: i.leaseOwner,
		leaseExpiresAt: isoTime(i.leaseExpiresAt),
		wakeAt: isoTime(i.wakeAt),
		createdAt: isoTime(i.createdAt),
	}));
