/** The Resume Trigger: hands each resumable instance of this workflow to a new execution. */
import {
	NodeConnectionTypes,
	NodeOperationError,
	type IDataObject,
	type INodeType,
	type INodeTypeDescription,
	type ITriggerFunctions,
	type ITriggerResponse,
} from 'n8n-workflow';

import { sidecarNodeMethods } from '../../shared/credential-test';
import { optionsCollection } from '../../shared/descriptions';
import type { ResumableInstance } from '../../shared/transport';
import { ResumableWatcher, resumableItem, triggerClient, watchSettingsOf } from './watcher';

export { ResumableWatcher, resumableItem, type WatchSettings } from './watcher';

export class ResumeTrigger implements INodeType {
	description: INodeTypeDescription = {
		displayName: 'Resume Trigger',
		name: 'resumeTrigger',
		icon: { light: 'file:resumeTrigger.svg', dark: 'file:resumeTrigger.dark.svg' },
		group: ['trigger'],
		version: 1,
		subtitle: '=every {{$parameter["pollIntervalSeconds"]}} s',
		description:
			'Starts an execution for every instance of this workflow whose execution died (its lease lapsed), whose scheduled wake-up or retry is due, whose awaited event arrived or whose wait timed out',
		defaults: { name: 'Resume Trigger' },
		inputs: [],
		outputs: [NodeConnectionTypes.Main],
		credentials: [{ name: 'durableSidecarApi', required: true, testedBy: 'durableSidecarApiTest' }],
		properties: [
			{
				displayName:
					'Connect this trigger to the Resume Point of the same workflow. Each claimed instance starts one execution; the Resume Point takes the claim over (from durable.claimToken) and routes the instance by its last checkpoint.',
				name: 'notice',
				type: 'notice',
				default: '',
			},
			{
				displayName: 'Poll Interval (Seconds)',
				name: 'pollIntervalSeconds',
				type: 'number',
				default: 5,
				typeOptions: { minValue: 0.1, maxValue: 600 },
				description:
					"How often the sidecar looks for stalled instances and due wake-ups. A crashed execution's instance resumes at most its lease (Resume Point option, default 300 s) plus this long after its last checkpoint.",
			},
			optionsCollection([
				{
					displayName: 'Claim Lease (Seconds)',
					name: 'claimLeaseSeconds',
					type: 'number',
					default: 60,
					typeOptions: { minValue: 1, maxValue: 86400 },
					description:
						'How long a claimed instance waits for its execution to reach the Resume Point; after that another n8n process may claim it again',
				},
				{
					displayName: 'Max Instances per Poll',
					name: 'maxInstances',
					type: 'number',
					default: 10,
					typeOptions: { minValue: 1, maxValue: 1000 },
					description: 'Most instances claimed at once (more are claimed right after)',
				},
			]),
		],
	};

	methods = sidecarNodeMethods;

	async trigger(this: ITriggerFunctions): Promise<ITriggerResponse> {
		const node = this.getNode();
		const workflowId = this.getWorkflow().id;
		if (!workflowId) {
			throw new NodeOperationError(node, 'This workflow has no id yet', {
				description: 'Save the workflow before activating the Resume Trigger.',
			});
		}
		const client = await triggerClient(this);
		const settings = watchSettingsOf(this, String(workflowId));
		const log = (level: 'debug' | 'info' | 'warn', message: string, meta?: IDataObject) =>
			this.logger[level](message, { workflowId: settings.workflowId, ...meta });
		const emitOne = (resumable: ResumableInstance) => {
			// One execution per instance; the claim token deduplicates a repeated emit.
			this.emit([[resumableItem(resumable, settings)]], undefined, undefined, resumable.claimToken);
		};

		if (this.getMode() === 'manual') {
			// "Test step": emit the first instance that is due, then stop watching.
			let watcher: ResumableWatcher | undefined;
			const manualTriggerFunction = async () =>
				await new Promise<void>((resolve, reject) => {
					watcher = new ResumableWatcher(
						client,
						settings,
						(resumable) => {
							emitOne(resumable);
							resolve();
							void watcher?.stop();
						},
						(error) => {
							reject(new NodeOperationError(node, error));
							void watcher?.stop();
						},
						log,
					);
					watcher.start();
				});
			return {
				manualTriggerFunction,
				closeFunction: async () => {
					await watcher?.stop();
				},
			};
		}

		const watcher = new ResumableWatcher(
			client,
			settings,
			emitOne,
			(error) => this.emitError(new NodeOperationError(node, error)),
			log,
		);
		watcher.start();
		return {
			closeFunction: async () => {
				await watcher.stop();
			},
		};
	}
}
