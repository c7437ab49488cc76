/**
 * Files (n8n binary data) through the real `durable-sidecar serve` (issue 45):
 * a Save uploads each content once and names it in the checkpoint, a resume
 * gives the files back as binary data, and a Claim answered Done Before gets
 * the files of the save that completed its key.
 */
import { createHash, randomBytes } from 'crypto';

import type { IDataObject, INodeExecutionData } from 'n8n-workflow';

import { DurableCheckpoint } from '../nodes/DurableCheckpoint/DurableCheckpoint.node';
import {
	IdempotencyGuard,
	OUTPUT_ALREADY_DONE,
	OUTPUT_FIRST_RUN,
} from '../nodes/IdempotencyGuard/IdempotencyGuard.node';
import { OUTPUT_RESUME, OUTPUT_START, ResumePoint } from '../nodes/ResumePoint/ResumePoint.node';
import { closeAllSidecarClients, getSidecarClient, type SidecarClient } from '../shared/transport';
import { binaryBytes, executeContext, storedBinary, type ParamValue } from './support/n8n';
import { TestSidecar } from './support/sidecar';

let sidecar: TestSidecar;
let client: SidecarClient;

beforeAll(async () => {
	sidecar = await TestSidecar.start();
	client = getSidecarClient(sidecar.connection());
});

afterAll(async () => {
	closeAllSidecarClients();
	await sidecar?.stop();
});

afterEach(() => jest.restoreAllMocks());

const sha = (bytes: Buffer) => createHash('sha256').update(bytes).digest('hex');

function context(
	items: Array<IDataObject | INodeExecutionData>,
	params: Record<string, ParamValue>,
	opts: { workflowId: string; executionId: string; binaryMode?: 'default' | 'filesystem' },
) {
	return executeContext({ items, params, credentials: sidecar.credentials(), ...opts });
}

async function start(
	wf: string,
	key: string,
	executionId: string,
): Promise<INodeExecutionData[][]> {
	return await new ResumePoint().execute.call(
		context([{ orderId: key }], { instanceKey: key }, { workflowId: wf, executionId }),
	);
}

async function saveWithFiles(
	wf: string,
	key: string,
	binary: INodeExecutionData['binary'],
	params: Record<string, ParamValue> = {},
): Promise<INodeExecutionData[][]> {
	return await new DurableCheckpoint().execute.call(
		context(
			[{ json: { orderId: key, durable: { instanceKey: key, workflowId: wf } }, binary }],
			{ operation: 'save', instanceKey: key, stepName: 'downloaded', saveWhat: 'item', ...params },
			{ workflowId: wf, executionId: 'exec-1' },
		),
	);
}

const pdf = Buffer.concat([Buffer.from('%PDF-1.7\n'), randomBytes(2_500_000)]);
const label = randomBytes(300_000);

function binaryOfOrder(): INodeExecutionData['binary'] {
	return {
		// n8n's memory mode keeps the bytes in the item; its filesystem mode keeps an id.
		data: {
			data: pdf.toString('base64'),
			mimeType: 'application/pdf',
			fileName: 'invoice-1001.pdf',
		},
		label: storedBinary(label, 'label.png', 'image/png'),
	};
}

describe('files with the real sidecar', () => {
	const wf = 'wf-files';

	test('a Save uploads each content once and names its files in the checkpoint; a resume gives them back', async () => {
		await start(wf, 'o-1', 'exec-1');
		const uploads = jest.spyOn(client, 'uploadFile');
		await saveWithFiles(wf, 'o-1', binaryOfOrder());
		expect(uploads).toHaveBeenCalledTimes(2);
		const listed = await client.listCheckpointFiles({ workflowId: wf, instanceKey: 'o-1' });
		expect(listed.sequence).toBe(1);
		expect(
			listed.files.map((f) => [f.property, f.fileName, f.mimeType, f.sha256, f.sizeBytes]),
		).toEqual([
			['data', 'invoice-1001.pdf', 'application/pdf', sha(pdf), pdf.length],
			['label', 'label.png', 'image/png', sha(label), label.length],
		]);
		// Another order with the same files: nothing uploaded again, one content each in the database.
		await start(wf, 'o-2', 'exec-1');
		uploads.mockClear();
		await saveWithFiles(wf, 'o-2', binaryOfOrder());
		expect(uploads).not.toHaveBeenCalled();
		const rows = await sidecar.sql<{ n: string }>(
			'SELECT count(*) AS n FROM durable_files WHERE sha256 = ANY($1)',
			[[sha(pdf), sha(label)]],
		);
		expect(Number(rows[0].n)).toBe(2);

		// n8n died: the Resume Point of the next execution restores the state and the files.
		await sidecar.expireLease(wf, 'o-1');
		for (const binaryMode of ['default', 'filesystem'] as const) {
			const out = await new ResumePoint().execute.call(
				context(
					[{ orderId: 'o-1' }],
					{ instanceKey: 'o-1' },
					{
						workflowId: wf,
						executionId: `exec-resume-${binaryMode}`,
						binaryMode,
					},
				),
			);
			await sidecar.expireLease(wf, 'o-1');
			expect(out[OUTPUT_START]).toHaveLength(0);
			expect(out[OUTPUT_RESUME]).toHaveLength(1);
			const resumed = out[OUTPUT_RESUME][0];
			expect(resumed.json.orderId).toBe('o-1');
			expect(Object.keys(resumed.binary ?? {})).toEqual(['data', 'label']);
			expect(binaryBytes(resumed.binary!.data).equals(pdf)).toBe(true);
			expect(binaryBytes(resumed.binary!.label).equals(label)).toBe(true);
			expect(resumed.binary!.data).toMatchObject({
				fileName: 'invoice-1001.pdf',
				mimeType: 'application/pdf',
			});
			expect(resumed.binary!.label).toMatchObject({ fileName: 'label.png', mimeType: 'image/png' });
			expect(Boolean(resumed.binary!.label.id)).toBe(binaryMode === 'filesystem');
		}
	});

	test('a resume of a checkpoint without files makes no file call', async () => {
		await start(wf, 'o-plain', 'exec-1');
		await new DurableCheckpoint().execute.call(
			context(
				[{ orderId: 'o-plain', durable: { instanceKey: 'o-plain', workflowId: wf } }],
				{ operation: 'save', instanceKey: 'o-plain', stepName: 'paid', saveWhat: 'item' },
				{ workflowId: wf, executionId: 'exec-1' },
			),
		);
		await sidecar.expireLease(wf, 'o-plain');
		const listing = jest.spyOn(client, 'listCheckpointFiles');
		const stat = jest.spyOn(client, 'statFiles');
		const out = await start(wf, 'o-plain', 'exec-2');
		expect(out[OUTPUT_RESUME]).toHaveLength(1);
		expect(out[OUTPUT_RESUME][0].binary).toBeUndefined();
		expect(listing).not.toHaveBeenCalled();
		expect(stat).not.toHaveBeenCalled();
	});

	test('Save Files off saves the state without the files', async () => {
		await start(wf, 'o-off', 'exec-1');
		const stat = jest.spyOn(client, 'statFiles');
		await saveWithFiles(wf, 'o-off', binaryOfOrder(), { options: { saveFiles: false } });
		expect(stat).not.toHaveBeenCalled();
		const listed = await client.listCheckpointFiles({ workflowId: wf, instanceKey: 'o-off' });
		expect(listed.files).toEqual([]);
	});

	/** A sidecar with `env`, and the nodes run against it in one execution. */
	async function smallSidecar(env: Record<string, string>) {
		const small = await TestSidecar.start({ env });
		const run = (
			node: ResumePoint | DurableCheckpoint,
			items: Array<IDataObject | INodeExecutionData>,
			params: Record<string, ParamValue>,
			continueOnFail = false,
		) =>
			node.execute.call(
				executeContext({
					items,
					params,
					credentials: small.credentials(),
					workflowId: wf,
					executionId: 'exec-1',
					continueOnFail,
				}),
			);
		const start = async (...keys: string[]) => {
			for (const key of keys)
				await run(new ResumePoint(), [{ orderId: key }], { instanceKey: key });
		};
		const instances = async (like: string) =>
			await small.sql<{ instance_key: string; status: string; error_message: string }>(
				'SELECT instance_key, status, error_message FROM durable_instances WHERE instance_key LIKE $1 ORDER BY instance_key',
				[like],
			);
		const checkpoints = async (like: string) =>
			Number(
				(
					await small.sql<{ n: string }>(
						'SELECT count(*) AS n FROM durable_checkpoints WHERE instance_key LIKE $1',
						[like],
					)
				)[0].n,
			);
		return { small, run, start, instances, checkpoints };
	}

	/** `body` against a sidecar with `env`, stopped afterwards whatever happens. */
	async function withSmallSidecar(
		env: Record<string, string>,
		body: (s: Awaited<ReturnType<typeof smallSidecar>>) => Promise<void>,
	): Promise<void> {
		const s = await smallSidecar(env);
		try {
			await body(s);
		} finally {
			await s.small.stop();
		}
	}

	const saveParams = { operation: 'save', stepName: 'downloaded', saveWhat: 'item' };
	const itemOf = (key: string, extra: Partial<INodeExecutionData> = {}): INodeExecutionData => ({
		json: { orderId: key, durable: { instanceKey: key, workflowId: wf } },
		...extra,
	});

	test('a file over the sidecar limit fails the Save with the file and limit named, saves nothing and fails the instance at once', async () => {
		await withSmallSidecar(
			{
				DURABLE_MAX_FILE_BYTES: '1000000',
			},
			async ({ run, start, instances, checkpoints }) => {
				await start('o-big');
				await expect(
					run(new DurableCheckpoint(), [itemOf('o-big', { binary: binaryOfOrder() })], {
						...saveParams,
						instanceKey: 'o-big',
					}),
				).rejects.toMatchObject({
					message: expect.stringMatching(
						/^Uploading file 'invoice-1001.pdf' \(binary property 'data'\) failed: .*1,000,000 bytes \(DURABLE_MAX_FILE_BYTES\)/,
					),
					// The hint is the file limit's, not the state limit's.
					description: expect.stringMatching(/Save Files/),
				});
				expect(await checkpoints('o-big')).toBe(0);
				// Every resume would be refused alike: the instance is failed at once, with the reason.
				const [inst] = await instances('o-big');
				expect(inst.status).toBe('failed');
				expect(inst.error_message).toMatch(
					/^Durable Node: step 'downloaded' not saved\. .*DURABLE_MAX_FILE_BYTES.*retry the instance/,
				);
			},
		);
	});

	test('with Continue On Fail, an item whose file is refused leaves as an error item and its instance is failed; the others are saved', async () => {
		await withSmallSidecar(
			{
				DURABLE_MAX_FILE_BYTES: '1000000',
			},
			async ({ run, start, instances, checkpoints }) => {
				await start('c-big', 'c-small');
				const [out] = await run(
					new DurableCheckpoint(),
					[
						itemOf('c-big', { binary: binaryOfOrder() }),
						itemOf('c-small', {
							binary: { label: storedBinary(Buffer.from('ok'), 'ok.txt', 'text/plain') },
						}),
					],
					{ ...saveParams, instanceKey: (i: number) => ['c-big', 'c-small'][i] },
					true,
				);
				expect(out).toHaveLength(2);
				expect(out[0].json.error).toMatch(/DURABLE_MAX_FILE_BYTES/);
				expect(out[1].json.error).toBeUndefined();
				expect(await checkpoints('c-big')).toBe(0);
				expect(await checkpoints('c-small')).toBe(1);
				expect((await instances('c-%')).map((r) => [r.instance_key, r.status])).toEqual([
					['c-big', 'failed'],
					['c-small', 'running'],
				]);
			},
		);
	});

	test('a state over the sidecar limit fails its instance at once with the reason, with or without Continue On Fail', async () => {
		await withSmallSidecar(
			{
				DURABLE_MAX_STATE_BYTES: '2000',
			},
			async ({ run, start, instances, checkpoints }) => {
				await start('o-state', 'o-state-cof');
				const big = 'x'.repeat(5000);
				const save = (key: string, continueOnFail: boolean) =>
					run(
						new DurableCheckpoint(),
						[{ json: { orderId: key, big, durable: { instanceKey: key, workflowId: wf } } }],
						{ ...saveParams, instanceKey: key, stepName: 'fetched' },
						continueOnFail,
					);
				await expect(save('o-state', false)).rejects.toMatchObject({
					message: expect.stringMatching(/DURABLE_MAX_STATE_BYTES/),
					description: expect.stringMatching(/fails its instance/),
				});
				// Continue On Fail: the error branch gets the item, and the instance is failed all the same.
				const [out] = await save('o-state-cof', true);
				expect(out[0].json.error).toMatch(/DURABLE_MAX_STATE_BYTES/);
				const rows = await instances('o-state%');
				expect(rows.map((r) => [r.instance_key, r.status])).toEqual([
					['o-state', 'failed'],
					['o-state-cof', 'failed'],
				]);
				for (const r of rows) {
					expect(r.error_message).toMatch(
						/^Durable Node: step 'fetched' not saved\. .*DURABLE_MAX_STATE_BYTES/,
					);
				}
				expect(await checkpoints('o-state%')).toBe(0);
			},
		);
	});

	test('a Claim answered Done Before gets the files of the save that completed its key', async () => {
		const guard = (executionId: string) =>
			new IdempotencyGuard().execute.call(
				context(
					[{ orderId: 'o-inv', amount: 12 }],
					{
						operation: 'claim',
						scope: 'invoice',
						key: 'o-inv-invoice',
						fingerprintFrom: 'fields',
						fingerprintFields: 'orderId, amount',
					},
					{ workflowId: wf, executionId },
				),
			);
		const first = await guard('exec-1');
		expect(first[OUTPUT_FIRST_RUN]).toHaveLength(1);
		const attempt = (first[OUTPUT_FIRST_RUN][0].json.idempotency as IDataObject).attempt as number;
		// The invoice step's save completes the key with the invoice PDF (as a v2 Save after the call does).
		await client.startOrResume({ workflowId: wf, instanceKey: 'o-inv', executionId: 'exec-1' });
		await client.uploadFile(sha(pdf), pdf.length, async () => [pdf]);
		await client.saveCheckpoints({
			items: [
				{
					workflowId: wf,
					instanceKey: 'o-inv',
					stepName: 'invoiced',
					stateJson: Buffer.from('{"invoice":"INV-7"}'),
					executionId: 'exec-1',
					completeKey: { scope: 'invoice', key: 'o-inv-invoice', attempt },
					files: [
						{
							property: 'invoice',
							fileName: 'INV-7.pdf',
							mimeType: 'application/pdf',
							sha256: sha(pdf),
							sizeBytes: pdf.length,
						},
					],
				},
			],
		});
		const again = await guard('exec-2');
		expect(again[OUTPUT_ALREADY_DONE]).toHaveLength(1);
		const done = again[OUTPUT_ALREADY_DONE][0];
		expect(binaryBytes(done.binary!.invoice).equals(pdf)).toBe(true);
		expect(done.binary!.invoice).toMatchObject({
			fileName: 'INV-7.pdf',
			mimeType: 'application/pdf',
		});
	});
});
