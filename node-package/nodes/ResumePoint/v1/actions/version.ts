/** Version 1: the whole instance in the metadata, the saved state alone restored, no delivery check. */
import type { IDataObject } from 'n8n-workflow';

import { fromJsonBytes, instanceStatusName, isoTime } from '../../../../shared/node-helpers';
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

function instanceMeta(inst: Instance | undefined): IDataObject {
	if (!inst) return {};
	return {
		workflowId: inst.workflowId,
		instanceKey: inst.instanceKey,
		status: instanceStatusName(inst),
		boundVersion: inst.boundVersion,
		versionLabel: inst.versionLabel,
		lastSequence: inst.lastSequence,
		lastStep: inst.lastStep,
		resumeCount: inst.resumeCount,
		leaseOwner: inst.leaseOwner,
		leaseExpiresAt: isoTime(inst.leaseExpiresAt),
		wakeAt: isoTime(inst.wakeAt),
		createdAt: isoTime(inst.createdAt),
	};
}
