/** What a version of the Resume Point does its own way. */
import type { IDataObject, IExecuteFunctions } from 'n8n-workflow';

import type { Checkpoint, StartOrResumeResponse } from '../../../shared/transport';
import type { DifferentDelivery } from '../ResumePointDescription';

export interface ResumeVersion {
	/** What a known key with another delivery does. */
	differentDelivery: (ctx: IExecuteFunctions) => DifferentDelivery;
	/**
	 * Whether the Resume Point follows its instance (version 2): its lease covers a Wait node
	 * after it, a new instance claims the key of the Guard it feeds, and the delivery is stored
	 * with a new instance.
	 */
	followsInstance: boolean;
	/** The durable metadata of an answer. */
	answerMeta: (response: StartOrResumeResponse) => IDataObject;
	/** The state a resumed item gets back. */
	resumedState: (response: StartOrResumeResponse) => unknown;
	/** Metadata about the last checkpoint of a resumed instance. */
	checkpointMeta: (latest: Checkpoint | undefined) => IDataObject;
}
