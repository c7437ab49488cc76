/**
 * The door: the Resume Point refuses a key that can never name one instance
 * (an object, a list, "[object Object]", empty, too long, control
 * characters) before any call, and, from version 2.1, another delivery under
 * a key in use; a refused item carries the HTTP status its sender should get,
 * and nothing is stored.
 */
import {
	NodeApiError,
	NodeOperationError,
	type IDataObject,
	type INodeExecutionData,
} from 'n8n-workflow';

import {
	OUTPUT_COMPLETED,
	OUTPUT_IN_PROGRESS,
	OUTPUT_RESUME,
	OUTPUT_START,
	ResumePoint,
} from '../nodes/ResumePoint/ResumePoint.node';
import { DurableInstance } from '../nodes/DurableInstance/DurableInstance.node';
import { senderStatus } from '../shared/door';
import { sidecarError } from '../shared/errors';
import { closeAllSidecarClients } from '../shared/transport';
import { executeContext, node, type ParamValue } from './support/n8n';
import { TestSidecar } from './support/sidecar';

let sidecar: TestSidecar;
const resumePoint = new ResumePoint();

beforeAll(async () => {
	sidecar = await TestSidecar.start();
});

afterAll(async () => {
	closeAllSidecarClients();
	await sidecar?.stop();
});

/** A Webhook node's item: the body the sender posted, and headers that change with every delivery. */
function delivery(body: unknown, requestId = 'r1'): IDataObject {
	return {
		headers: { 'content-type': 'application/json', 'x-request-id': requestId },
		params: {},
		query: {},
		body: body as IDataObject,
		webhookUrl: 'http://localhost/webhook/orders',
		executionMode: 'production',
	};
}

async function run(
	workflowId: string,
	executionId: string,
	items: IDataObject[],
	opts: {
		typeVersion?: number;
		continueOnFail?: boolean;
		params?: Record<string, ParamValue>;
	} = {},
): Promise<INodeExecutionData[][]> {
	return await resumePoint.execute.call(
		executeContext({
			items,
			params: {
				instanceKey: (_i: number, item: INodeExecutionData) =>
					(item.json.body as IDataObject | undefined)?.orderId,
				...opts.params,
			},
			credentials: sidecar.credentials(),
			workflowId,
			executionId,
			continueOnFail: opts.continueOnFail,
			nodeName: 'Resume Point',
			typeVersion: opts.typeVersion ?? 2.1,
			description: resumePoint.description,
		}),
	);
}

/** The status a Respond to Webhook on the error output answers (docs/intake.md). */
function statusOf(item: INodeExecutionData): unknown {
	return (item.json.details as IDataObject | undefined)?.httpStatus;
}

async function instances(workflowId: string): Promise<Array<Record<string, unknown>>> {
	return await sidecar.sql(
		'SELECT instance_key, lease_owner, resume_count FROM durable_instances WHERE workflow_id = $1 ORDER BY instance_key',
		[workflowId],
	);
}

async function events(workflowId: string): Promise<number> {
	const rows = await sidecar.sql<{ n: string }>(
		'SELECT count(*) AS n FROM durable_instance_events WHERE workflow_id = $1',
		[workflowId],
	);
	return Number(rows[0].n);
}

const BAD_KEYS: Array<[string, unknown, RegExp]> = [
	['an object', { nested: true }, /is an object/],
	['another object', { customer: 'bob' }, /is an object/],
	['a list', ['a', 'b'], /is a list/],
	['an empty list', [], /is a list/],
	['missing', undefined, /is empty/],
	['null', null, /is empty/],
	['empty text', '', /is empty/],
	['blanks', '   ', /is empty/],
	['an object turned into text', '[object Object]', /reads "\[object Object\]"/],
	['too long', 'k'.repeat(256), /256 characters long; the limit is 255/],
	['with a control character', 'order\u0007-1', /control characters/],
	['with a C1 control', 'order\u0085-1', /control characters/],
	['with a lone surrogate', 'order-\ud800', /broken Unicode/],
	['a boolean', true, /is true/],
];

describe('the door: keys that can never name one instance', () => {
	test.each(BAD_KEYS)(
		'%s: refused before any call, httpStatus 400, nothing stored',
		async (_name, key, why) => {
			const wf = 'wf-door-keys';
			const before = await instances(wf);
			const out = await run(wf, 'e1', [delivery({ orderId: key, amount: 5 })], {
				continueOnFail: true,
			});
			expect(out[OUTPUT_START]).toHaveLength(0);
			const failed = out[OUTPUT_IN_PROGRESS][0];
			expect(String(failed.json.error)).toMatch(why);
			expect(statusOf(failed)).toBe(400);
			expect(failed.pairedItem).toEqual({ item: 0 });
			expect(await instances(wf)).toEqual(before);
		},
	);

	test('Continue On Fail off: the refusal is thrown with its item index before any call: the good item is not started either', async () => {
		const wf = 'wf-door-throw';
		await expect(
			run(wf, 'e1', [delivery({ orderId: 'ok-1' }), delivery({ orderId: { nested: true } })]),
		).rejects.toMatchObject({
			constructor: NodeOperationError,
			context: { itemIndex: 1, httpStatus: 400 },
		});
		expect(await instances(wf)).toEqual([]);
	});

	test('two orders whose ids are objects do not collapse into one instance', async () => {
		const wf = 'wf-door-collapse';
		const out = await run(
			wf,
			'e1',
			[
				delivery({ orderId: { nested: true } }),
				delivery({ orderId: { customer: 'bob' }, amount: 999 }),
			],
			{ continueOnFail: true },
		);
		expect(out[OUTPUT_IN_PROGRESS].map((i) => statusOf(i))).toEqual([400, 400]);
		expect(await instances(wf)).toEqual([]);
	});

	test('a number is its decimal text; 255 characters counted as code points pass', async () => {
		const wf = 'wf-door-good';
		const long = '🙂'.repeat(255); // 510 UTF-16 units, 255 characters
		const out = await run(wf, 'e1', [delivery({ orderId: 12345 }), delivery({ orderId: long })]);
		expect(out[OUTPUT_START].map((i) => (i.json.durable as IDataObject).instanceKey)).toEqual([
			'12345',
			long,
		]);
	});
});

test('Durable Instance (Signal) refuses an object as Instance Key instead of signalling "[object Object]"', async () => {
	const ctx = executeContext({
		items: [{ body: { orderId: { nested: true }, eventId: 'e-1' } }],
		params: {
			operation: 'signal',
			workflowId: 'wf-door-signal',
			instanceKey: (_i: number, item: INodeExecutionData) =>
				(item.json.body as IDataObject).orderId,
			eventName: 'delivered',
			payloadFrom: 'json',
			payloadJson: '{}',
			dedupeId: 'e-1',
			options: {},
		},
		credentials: sidecar.credentials(),
		workflowId: 'wf-door-carrier',
		executionId: 'e1',
	});
	await expect(new DurableInstance().execute.call(ctx)).rejects.toMatchObject({
		constructor: NodeOperationError,
		message: 'Instance Key is an object, not a business key',
		context: { itemIndex: 0 },
	});
});

describe('the door: another delivery under a key in use', () => {
	test('version 2.1 refuses it by default: httpStatus 422, the instance untouched', async () => {
		const wf = 'wf-door-refuse';
		const first = await run(wf, 'e1', [delivery({ orderId: 'o-1', amount: 10 })]);
		expect(first[OUTPUT_START]).toHaveLength(1);
		const before = { rows: await instances(wf), events: await events(wf) };

		const out = await run(wf, 'e2', [delivery({ orderId: 'o-1', amount: 9999 }, 'r2')], {
			continueOnFail: true,
		});
		const refused = out[OUTPUT_IN_PROGRESS][0];
		expect(statusOf(refused)).toBe(422);
		expect(String(refused.json.error)).toMatch(/"o-1" is in use by another delivery/);
		expect({ rows: await instances(wf), events: await events(wf) }).toEqual(before);

		await expect(run(wf, 'e3', [delivery({ orderId: 'o-1', amount: 9999 })])).rejects.toMatchObject(
			{
				constructor: NodeOperationError,
				context: { itemIndex: 0, httpStatus: 422 },
			},
		);
	});

	test('a re-delivery of the same body with other headers and key order is the same delivery', async () => {
		const wf = 'wf-door-same';
		await run(wf, 'e1', [delivery({ orderId: 'o-2', amount: 10, email: 'a@b' })]);
		const again = await run(wf, 'e2', [
			delivery({ email: 'a@b', amount: 10.0, orderId: 'o-2' }, 'r9'),
		]);
		// e1 still holds the lease: Busy, as before this option existed.
		expect(again[OUTPUT_IN_PROGRESS]).toHaveLength(1);
		expect((again[OUTPUT_IN_PROGRESS][0].json.durable as IDataObject).outcome).toBe('busy');
		expect(statusOf(again[OUTPUT_IN_PROGRESS][0])).toBeUndefined();
	});

	test('a finished instance refuses another delivery too', async () => {
		const wf = 'wf-door-finished';
		await run(wf, 'e1', [delivery({ orderId: 'o-3', amount: 1 })]);
		await sidecar.sql(
			"UPDATE durable_instances SET status = 'completed' WHERE workflow_id = $1 AND instance_key = 'o-3'",
			[wf],
		);
		const same = await run(wf, 'e2', [delivery({ orderId: 'o-3', amount: 1 })]);
		expect(same[OUTPUT_COMPLETED]).toHaveLength(1);
		const other = await run(wf, 'e3', [delivery({ orderId: 'o-3', amount: 2 })], {
			continueOnFail: true,
		});
		expect(statusOf(other[OUTPUT_IN_PROGRESS][0])).toBe(422);
	});

	test('items of other triggers are never judged: a poll that reads an order again with newer fields resumes it', async () => {
		const wf = 'wf-door-poll';
		await run(wf, 'e1', [{ body: { orderId: 'o-6', status: 'paid' } }]);
		await sidecar.expireLease(wf);
		const again = await run(wf, 'e2', [{ body: { orderId: 'o-6', status: 'shipped' } }]);
		expect((again[OUTPUT_RESUME][0].json.durable as IDataObject).outcome).toBe('resumed');
	});

	test('Ignore (version 2 default): the other delivery is a re-delivery, as before', async () => {
		const wf = 'wf-door-ignore';
		await run(wf, 'e1', [delivery({ orderId: 'o-4', amount: 10 })], { typeVersion: 2 });
		const again = await run(wf, 'e2', [delivery({ orderId: 'o-4', amount: 9999 })], {
			typeVersion: 2,
		});
		expect((again[OUTPUT_IN_PROGRESS][0].json.durable as IDataObject).outcome).toBe('busy');
		const chosen = await run(wf, 'e3', [delivery({ orderId: 'o-4', amount: 9999 })], {
			params: { differentDelivery: 'ignore' },
		});
		expect((chosen[OUTPUT_IN_PROGRESS][0].json.durable as IDataObject).outcome).toBe('busy');
	});

	test('Route to Output: the item leaves by Different with the stored start item; nothing changes', async () => {
		const wf = 'wf-door-output';
		await run(wf, 'e1', [delivery({ orderId: 'o-5', amount: 10 })]);
		const before = { rows: await instances(wf), events: await events(wf) };
		const out = await run(wf, 'e2', [delivery({ orderId: 'o-5', amount: 11 })], {
			params: { differentDelivery: 'output' },
		});
		expect(out).toHaveLength(5);
		const different = out[4][0];
		expect(different.json.body).toEqual({ orderId: 'o-5', amount: 11 });
		expect(different.json.durable).toMatchObject({
			outcome: 'different',
			instanceKey: 'o-5',
			startItem: { body: { orderId: 'o-5', amount: 10 } },
		});
		expect(different.pairedItem).toEqual({ item: 0 });
		expect({ rows: await instances(wf), events: await events(wf) }).toEqual(before);
	});
});

describe('the status a sender gets for a failed item', () => {
	const n = node('Resume Point');
	const grpc = (code: number, details: string) => ({ code, details, metadata: undefined });
	const ctx = {
		action: 'Starting or resuming the instance',
		target: 'localhost:50051',
		deadlineSeconds: 30,
	};

	test('the sidecar away or slow: 503, so the sender delivers again', () => {
		const unreachable = {
			...grpc(14, 'No connection established'),
			target: 'localhost:50051',
			unreachableWithinSeconds: 30,
		};
		expect(senderStatus(sidecarError(n, unreachable, ctx))).toBe(503);
		expect(senderStatus(sidecarError(n, grpc(14, 'database unavailable'), ctx))).toBe(503);
		expect(senderStatus(sidecarError(n, grpc(4, 'Deadline exceeded'), ctx))).toBe(503);
	});

	test("the sidecar refusing the delivery's own body: 413 or 400", () => {
		expect(
			senderStatus(
				sidecarError(n, grpc(8, 'start_item_json is 70000 bytes; the limit is 65536'), ctx),
			),
		).toBe(413);
		expect(senderStatus(sidecarError(n, grpc(3, 'start_item_json is not valid JSON'), ctx))).toBe(
			400,
		);
	});

	test('anything the author must fix: 500, never a 4xx that would make the sender give up', () => {
		expect(
			senderStatus(sidecarError(n, grpc(3, 'version_label contains control characters'), ctx)),
		).toBe(500);
		expect(senderStatus(new NodeOperationError(n, 'a Wait the lease cannot cover'))).toBe(500);
		expect(senderStatus(new NodeApiError(n, { message: 'x' }))).toBe(500);
	});
});
