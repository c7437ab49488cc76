/** Versions 2 and 2.1 of the Resume Point as n8n sees them (2.1: Different Delivery refuses by default). */
import { describeVersion } from '../../../shared/versions';
import { resumePointDescription } from '../ResumePointDescription';

export const versionDescription = (version: 2 | 2.1) =>
	describeVersion(resumePointDescription, version);
