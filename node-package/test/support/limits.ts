/** The Durable Limit's tests against the real sidecar: instances started and resumed as the Resume Point does. */
import { sleep, type INodeExecutionData } from 'n8n-workflow';

import { DurableLimit } from '../../nodes/DurableLimit/DurableLimit.node';
import { OUTPUT_RESUME, OUTPUT_START, ResumePoint } from '../../nodes/ResumePoint/ResumePoint.node';
import { ResumeReason } from '../../shared/transport';
import type { ParamValue } from './n8n';
import { client, runNode } from './waits-and-signals';

export const wf = 'wf-limits';
let n = 0;
export const unique = (prefix: string) => `${prefix}-${Date.now()}-${++n}`;

/** New instances through the Resume Point, as a webhook's executions would start them: their Start items. */
export async function started(
	keys: string[],
	executionId = 'exec-1',
): Promise<INodeExecutionData[]> {
	const out = await runNode(
		new ResumePoint(),
		{ instanceKey: '={{ $json.orderId }}' },
		{ workflowId: wf, executionId, items: keys.map((orderId) => ({ orderId })) },
	);
	expect(out[OUTPUT_START]).toHaveLength(keys.length);
	return out[OUTPUT_START];
}

export const limit = (
	params: Record<string, ParamValue>,
	items: INodeExecutionData[],
	executionId = 'exec-1',
	continueOnFail = false,
) => runNode(new DurableLimit(), params, { workflowId: wf, executionId, items, continueOnFail });

/** What the Resume Trigger does: claim the instances that are due, then the Resume Point takes each. */
export async function resumed(keys: string[], executionId: string): Promise<INodeExecutionData[]> {
	for (let attempt = 0; attempt < 50; attempt++) {
		const claimed = await new Promise<
			Array<{ claimToken: string; reason: ResumeReason; instance?: { instanceKey: string } }>
		>((resolve, reject) =>
			client.instances.claimResumable(
				{ workflowIds: [wf], claimant: 'jest', maxInstances: 50, leaseSeconds: 30 },
				client.metadata(),
				client.options(),
				(error, response) => (error ? reject(error) : resolve(response.instances)),
			),
		);
		const mine = claimed.filter((c) => keys.includes(c.instance?.instanceKey ?? ''));
		if (mine.length > 0) {
			for (const c of mine) expect(c.reason).toBe(ResumeReason.RESUME_REASON_WAKE_UP);
			const out = await runNode(
				new ResumePoint(),
				{ instanceKey: 'ignored' },
				{
					workflowId: wf,
					executionId,
					items: mine.map((c) => ({
						durable: {
							claimToken: c.claimToken,
							instanceKey: c.instance?.instanceKey,
							workflowId: wf,
						},
					})),
				},
			);
			return out[OUTPUT_RESUME];
		}
		await sleep(100);
	}
	return [];
}

export const keysOf = (items: INodeExecutionData[]) =>
	items.map((i) => (i.json.durable as { instanceKey: string }).instanceKey);
