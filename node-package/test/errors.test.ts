import { NodeApiError, NodeOperationError, type INodeExecutionData } from 'n8n-workflow';

import { DurableCheckpoint } from '../nodes/DurableCheckpoint/DurableCheckpoint.node';
import { OUTPUT_IN_PROGRESS, ResumePoint } from '../nodes/ResumePoint/ResumePoint.node';
import { batchItemIndex, GrpcStatus, sidecarError } from '../shared/errors';
import { closeAllSidecarClients } from '../shared/transport';
import { executeContext, node } from './support/n8n';
import { freePort, TestSidecar } from './support/sidecar';

let sidecar: TestSidecar;

beforeAll(async () => {
	// A small state limit so RESOURCE_EXHAUSTED is cheap to provoke.
	sidecar = await TestSidecar.start({ env: { DURABLE_MAX_STATE_BYTES: '2048' } });
});

afterAll(async () => {
	closeAllSidecarClients();
	await sidecar?.stop();
});

async function resumePoint(
	credentials: Record<string, unknown>,
	key = 'k-1',
	continueOnFail = false,
): Promise<INodeExecutionData[][]> {
	return await new ResumePoint().execute.call(
		executeContext({
			items: [{ id: 1 }],
			params: { instanceKey: key },
			credentials,
			workflowId: 'wf-errors',
			executionId: 'e1',
			continueOnFail,
		}),
	);
}

async function saveState(state: string, key: string): Promise<unknown> {
	return await new DurableCheckpoint().execute
		.call(
			executeContext({
				items: [{}],
				params: {
					operation: 'save',
					instanceKey: key,
					stepName: 's',
					saveWhat: 'json',
					stateJson: state,
				},
				credentials: sidecar.credentials(),
				workflowId: 'wf-errors',
				executionId: 'e1',
			}),
		)
		.catch((e: unknown) => e);
}

describe('status code mapping through the nodes, against the real sidecar', () => {
	test('UNAUTHENTICATED (wrong token) is a NodeOperationError telling to fix the credential', async () => {
		const error = await resumePoint(sidecar.credentials({ token: 'wrong-token-123' })).catch(
			(e: unknown) => e,
		);
		expect(error).toBeInstanceOf(NodeOperationError);
		expect((error as NodeOperationError).context).toMatchObject({
			grpcCode: 'UNAUTHENTICATED',
			itemIndex: 0,
		});
		expect((error as NodeOperationError).description).toMatch(/DURABLE_AUTH_TOKENS/);
	});

	test('UNAVAILABLE (nothing listening) is a NodeApiError with the address in the hint', async () => {
		const port = await freePort();
		const error = await resumePoint(sidecar.credentials({ port, deadlineSeconds: 5 })).catch(
			(e: unknown) => e,
		);
		expect(error).toBeInstanceOf(NodeApiError);
		expect((error as NodeApiError).context).toMatchObject({
			grpcCode: 'UNAVAILABLE',
			itemIndex: 0,
		});
		expect((error as NodeApiError).description).toContain(`127.0.0.1:${port}`);
	});

	test('UNAVAILABLE with Continue On Fail becomes an error item on the safe output', async () => {
		const port = await freePort();
		const out = await resumePoint(sidecar.credentials({ port, deadlineSeconds: 5 }), 'k-1', true);
		expect(out[OUTPUT_IN_PROGRESS]).toHaveLength(1);
		// The item n8n's error output keeps: the message and the status for a webhook sender (503: retry).
		expect(out[OUTPUT_IN_PROGRESS][0].json).toMatchObject({
			error: expect.stringContaining('could not reach the durable sidecar'),
			details: { httpStatus: 503 },
		});
	});

	test('DEADLINE_EXCEEDED (deadline shorter than any answer) is a NodeApiError naming the deadline', async () => {
		const error = await resumePoint(sidecar.credentials({ deadlineSeconds: 0.0001 })).catch(
			(e: unknown) => e,
		);
		expect(error).toBeInstanceOf(NodeApiError);
		expect((error as NodeApiError).context.grpcCode).toBe('DEADLINE_EXCEEDED');
		expect((error as NodeApiError).description).toMatch(/Call Deadline/);
	});

	test('INVALID_ARGUMENT (a key over 255 characters) is a NodeOperationError', async () => {
		// (The Resume Point refuses such a key itself, before any call: test/door.test.ts.)
		const error = await saveState('{}', 'k'.repeat(256));
		expect(error).toBeInstanceOf(NodeOperationError);
		expect((error as NodeOperationError).context.grpcCode).toBe('INVALID_ARGUMENT');
	});

	test('RESOURCE_EXHAUSTED (state over DURABLE_MAX_STATE_BYTES) is a NodeOperationError with a hint', async () => {
		await resumePoint(sidecar.credentials(), 'big');
		const error = await saveState(JSON.stringify({ blob: 'x'.repeat(4096) }), 'big');
		expect(error).toBeInstanceOf(NodeOperationError);
		expect((error as NodeOperationError).context.grpcCode).toBe('RESOURCE_EXHAUSTED');
		expect((error as NodeOperationError).description).toMatch(/chosen fields/);
	});

	test('NOT_FOUND (saving to an instance never started) is a NodeOperationError', async () => {
		const error = await saveState('{}', 'never-started');
		expect(error).toBeInstanceOf(NodeOperationError);
		expect((error as NodeOperationError).context.grpcCode).toBe('NOT_FOUND');
	});
});

describe('sidecarError maps every status code', () => {
	const authorCodes = [
		GrpcStatus.INVALID_ARGUMENT,
		GrpcStatus.NOT_FOUND,
		GrpcStatus.ALREADY_EXISTS,
		GrpcStatus.PERMISSION_DENIED,
		GrpcStatus.RESOURCE_EXHAUSTED,
		GrpcStatus.FAILED_PRECONDITION,
		GrpcStatus.ABORTED,
		GrpcStatus.OUT_OF_RANGE,
		GrpcStatus.UNAUTHENTICATED,
	];
	const remoteCodes = [
		GrpcStatus.CANCELLED,
		GrpcStatus.UNKNOWN,
		GrpcStatus.DEADLINE_EXCEEDED,
		GrpcStatus.UNIMPLEMENTED,
		GrpcStatus.INTERNAL,
		GrpcStatus.UNAVAILABLE,
		GrpcStatus.DATA_LOSS,
	];
	const context = { action: 'Testing', target: '127.0.0.1:1', deadlineSeconds: 3, itemIndex: 4 };

	test.each(authorCodes)('code %i is a NodeOperationError with item index and hint', (code) => {
		const error = sidecarError(node(), { code, details: 'items[0]: refused' }, context);
		expect(error).toBeInstanceOf(NodeOperationError);
		expect(error).not.toBeInstanceOf(NodeApiError);
		expect(error.context).toMatchObject({ itemIndex: 4, grpcCode: GrpcStatus[code] });
		expect(error.description?.length).toBeGreaterThan(20);
		expect(error.message).toBe('Testing failed: items[0]: refused');
	});

	test.each(remoteCodes)('code %i is a NodeApiError with item index and hint', (code) => {
		const error = sidecarError(node(), { code, details: 'remote trouble' }, context);
		expect(error).toBeInstanceOf(NodeApiError);
		expect(error.context).toMatchObject({ itemIndex: 4, grpcCode: GrpcStatus[code] });
		expect(error.description?.length).toBeGreaterThan(20);
		expect(error.message).toBe('Testing failed: remote trouble');
	});

	test('a TLS failure gets a TLS hint; a plain Error stays a NodeOperationError', () => {
		const tls = sidecarError(
			node(),
			{ code: GrpcStatus.UNAVAILABLE, details: 'SSL routines: wrong version number' },
			context,
		);
		expect(tls.description).toMatch(/TLS/);
		const plain = sidecarError(node(), new Error('boom'), context);
		expect(plain).toBeInstanceOf(NodeOperationError);
		expect(plain.message).toBe('Testing failed: boom');
	});

	test('batch errors name their item as items[N]', () => {
		expect(batchItemIndex('items[12]: instance x/y does not exist')).toBe(12);
		expect(batchItemIndex('unknown token')).toBeUndefined();
	});
});
