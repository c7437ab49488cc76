/** The Resume Point: one class per version (v1/, v2/ for 2 and 2.1), its operation in actions/. */
import { VersionedSidecarNode } from '../../shared/versions';
import { router } from './actions/router';
import { resumePointDescription } from './ResumePointDescription';
import { ResumePointV1 } from './v1/ResumePointV1.node';
import { ResumePointV2 } from './v2/ResumePointV2.node';

export { retryPolicyOf } from './actions/retryPolicy';
export {
	OUTPUT_COMPLETED,
	OUTPUT_IN_PROGRESS,
	OUTPUT_RESUME,
	OUTPUT_START,
} from './actions/routing';

export class ResumePoint extends VersionedSidecarNode {
	constructor() {
		super(resumePointDescription, router, {
			1: new ResumePointV1(),
			2: new ResumePointV2(2),
			2.1: new ResumePointV2(2.1),
		});
	}
}
