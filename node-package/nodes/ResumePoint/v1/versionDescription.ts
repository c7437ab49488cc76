/** Version 1 of the Resume Point as n8n sees it. */
import { describeVersion } from '../../../shared/versions';
import { resumePointDescription } from '../ResumePointDescription';

export const versionDescription = describeVersion(resumePointDescription, 1);
