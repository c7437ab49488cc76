/**
 * Finding an item's instance and idempotency claim upstream by n8n's paired
 * items, so that version-2 nodes need no expressions: the item itself first,
 * then the nearest durable node before this one whose paired item carries it.
 */
import {
	NodeOperationError,
	type IExecuteFunctions,
	type INodeExecutionData,
	type INodeParameters,
	type NodeTypeAndVersion,
	type IPairedItemData,
	type ISourceData,
	type IWorkflowDataProxyData,
} from 'n8n-workflow';

import { isObject, typeName } from './node-helpers';
import {
	claimRefOf,
	instanceRefOf,
	parentExecutionIdOf,
	type ClaimRef,
	type InstanceRef,
} from './refs';
import { heldBy, soleGuardItem } from './run-memory';
import { nodeOf } from './run-node';

// What the nodes import from here and now lives in its own module: kept
// importable from this path while the nodes still name it.
export { jsonPathOf, nodeParameter, parameterReader, scalarAt } from './parameters';
export {
	claimRefOf,
	instanceRefOf,
	targetOf,
	type ClaimRef,
	type InstanceRef,
	type Target,
} from './refs';
export {
	clearGuardRuns,
	GUARD_RUNS_MAX,
	GUARD_RUNS_TTL_MS,
	HELD_MAX,
	HELD_TTL_MS,
	heldBy,
	noteGuardRun,
	noteHeldInstances,
	soleGuardItem,
} from './run-memory';
export { shareUnchanged } from './share-unchanged';

type DurableRole = 'resumePoint' | 'checkpointSave' | 'checkpointOther' | 'guard';

interface Candidate {
	name: string;
	role: DurableRole;
}

/** Our node types end in these names, whatever the package prefix. */
function roleOf(type: string, parameters: INodeParameters | undefined): DurableRole | undefined {
	const name = typeName(type);
	// n8n leaves parameters at their default out of the saved workflow.
	const operation = parameters?.operation;
	switch (name) {
		case 'resumePoint':
			return 'resumePoint';
		case 'durableCheckpoint':
			return operation === undefined || operation === 'save' ? 'checkpointSave' : 'checkpointOther';
		case 'idempotencyGuard':
			return 'guard';
		default:
			return undefined;
	}
}

/**
 * Per node run: the durable nodes upstream of this one (computed once, from
 * the workflow's connections) and, per item, their paired items (resolved
 * lazily, only for items that do not carry what is looked for themselves).
 */
export class Upstream {
	private candidates: Candidate[] | undefined;
	private readonly resolved = new Map<string, INodeExecutionData | null>();
	/** The data proxy of the item being looked up (items are looked up one after another). */
	private proxy: { itemIndex: number; data: IWorkflowDataProxyData } | undefined;

	/** The Guard whose every item reaches this node (see noteGuardRun); null: none, undefined: not looked yet. */
	private feedingGuard: string | null | undefined;
	/** That Guard's one output item (fromSoleGuardRun); null: none, undefined: not looked yet. */
	private soleGuardItem: INodeExecutionData | null | undefined;
	/** In a sub-workflow: the instances the calling execution took (callerHeld); null: not a sub-workflow; undefined: not looked yet. */
	private caller: InstanceRef[] | null | undefined;

	constructor(private readonly ctx: IExecuteFunctions) {}

	/**
	 * The Idempotency Guard every input of this node comes from, directly or
	 * through non-durable nodes whose only input is that Guard (Guard → HTTP
	 * Request → Save, and the Guard's Done Before output straight into the
	 * Save); null for any other wiring. Four depth-1 lookups at most.
	 */
	private guardFeedingAll(): string | null {
		if (this.feedingGuard !== undefined) return this.feedingGuard;
		let guard: string | undefined;
		/** `p` is an enabled Guard, the same one as every other Guard seen. */
		const theGuard = (p: NodeTypeAndVersion): boolean => {
			if (p.disabled || roleOf(p.type, {}) !== 'guard') return false;
			guard ??= p.name;
			return p.name === guard;
		};
		let ok: boolean;
		try {
			const direct = this.ctx.getParentNodes(nodeOf(this.ctx).name, { depth: 1 });
			ok = direct.length > 0;
			for (const parent of direct) {
				if (!ok) break;
				const role = roleOf(parent.type, {});
				if (role === 'guard') {
					ok = theGuard(parent);
				} else if (role !== undefined) {
					ok = false; // another durable node in between: the walk decides
				} else {
					const above = this.ctx.getParentNodes(parent.name, { depth: 1 });
					ok = above.length > 0 && above.every(theGuard);
				}
			}
		} catch {
			ok = false;
		}
		this.feedingGuard = ok && guard ? guard : null;
		return this.feedingGuard;
	}

	/**
	 * The Guard's output item every item here descends from, when noteGuardRun makes that certain; looked up
	 * once per node run (the Guard ran before this node started, so the answer cannot change meanwhile).
	 */
	private fromSoleGuardRun(): INodeExecutionData | undefined {
		if (this.soleGuardItem === undefined) {
			const guard = this.guardFeedingAll();
			const found = guard ? soleGuardItem(String(this.ctx.getExecutionId()), guard) : undefined;
			this.soleGuardItem = found && claimRefOf(found.json) ? found : null;
		}
		return this.soleGuardItem ?? undefined;
	}

	/**
	 * Durable nodes before this one, nearest first. A node that has another
	 * candidate among its own ancestors comes before it, so candidates are
	 * ordered by how many of the others lie upstream of them. (Only the
	 * all-ancestors form of getParentNodes is used: older n8n versions ignore
	 * its depth option.)
	 */
	private durableAncestors(): Candidate[] {
		if (this.candidates) return this.candidates;
		const found: Array<Candidate & { above: number }> = [];
		const parents = this.ctx.getParentNodes(nodeOf(this.ctx).name, {
			includeNodeParameters: true,
		});
		for (const parent of parents) {
			const role = parent.disabled ? undefined : roleOf(parent.type, parent.parameters);
			if (role) found.push({ name: parent.name, role, above: 0 });
		}
		if (found.length > 1) {
			const names = new Set(found.map((c) => c.name));
			for (const candidate of found) {
				candidate.above = this.ctx
					.getParentNodes(candidate.name)
					.filter((p) => names.has(p.name)).length;
			}
			found.sort((a, b) => b.above - a.above);
		}
		this.candidates = found.map(({ name, role }) => ({ name, role }));
		return this.candidates;
	}

	/** The item `name` output that `itemIndex` descends from (paired items), or null. */
	private pairedItem(itemIndex: number, name: string): INodeExecutionData | null {
		const id = `${itemIndex}\u0000${name}`;
		const cached = this.resolved.get(id);
		if (cached !== undefined) return cached;
		let item: INodeExecutionData | null = null;
		try {
			// $('Node').item follows the paired items back to that node's output;
			// it throws when the item did not pass through it.
			if (this.proxy?.itemIndex !== itemIndex) {
				this.proxy = { itemIndex, data: this.ctx.getWorkflowDataProxy(itemIndex) };
			}
			const value = this.direct(itemIndex, name, this.proxy.data) ?? this.viaNodeProxy(name);
			if (isObject(value) && isObject(value.json)) item = value as unknown as INodeExecutionData;
		} catch {
			item = null;
		}
		this.resolved.set(id, item);
		return item;
	}

	/**
	 * What `$(name).item` answers, without its checks: the data proxy's own
	 * paired-item walk ($getPairedItem) from this item's pairedItem and input
	 * source, which is what `.item` calls after them. Those checks make n8n
	 * 2.41 evaluate this node's `outputs` expression (getParentMainInputNode)
	 * on every lookup, milliseconds of CPU each; the node is known to be a
	 * parent already (durableAncestors). Undefined where this form does not
	 * apply (no $getPairedItem in this n8n, no single pairedItem): `.item` then.
	 */
	private direct(itemIndex: number, name: string, data: IWorkflowDataProxyData): unknown {
		const walk = (data as { $getPairedItem?: unknown }).$getPairedItem;
		if (typeof walk !== 'function' || typeof this.ctx.getInputSourceData !== 'function') {
			return undefined;
		}
		const raw = this.ctx.getInputData()[itemIndex]?.pairedItem;
		const paired: IPairedItemData | undefined =
			typeof raw === 'number'
				? { item: raw }
				: isObject(raw)
					? (raw as IPairedItemData)
					: undefined;
		if (!paired) return undefined;
		let source: ISourceData | undefined;
		try {
			source = this.ctx.getInputSourceData(paired.input || 0) ?? this.ctx.getInputSourceData(0);
		} catch {
			return undefined;
		}
		if (!source) return undefined;
		return (walk as (n: string, s: ISourceData, p: IPairedItemData) => unknown)(
			name,
			source,
			paired,
		);
	}

	private viaNodeProxy(name: string): unknown {
		return (this.proxy!.data.$(name) as { item?: unknown }).item;
	}

	/** The item's instance: its own `durable.instanceKey`, else the nearest upstream one. */
	instance(itemIndex: number, item: INodeExecutionData): InstanceRef | undefined {
		const own = instanceRefOf(item.json);
		if (own) return own;
		const guarded = this.fromSoleGuardRun();
		const fromGuard = guarded ? instanceRefOf(guarded.json) : undefined;
		if (fromGuard) return fromGuard;
		for (const candidate of this.durableAncestors()) {
			const upstream = this.pairedItem(itemIndex, candidate.name);
			const ref = upstream ? instanceRefOf(upstream.json) : undefined;
			if (ref) return ref;
		}
		return undefined;
	}

	/** In a sub-workflow, the instances the calling execution's Resume Point took in this process; else null. */
	private callerHeld(): InstanceRef[] | null {
		if (this.caller === undefined) {
			const parent = parentExecutionIdOf(this.ctx);
			this.caller = parent ? heldBy(parent) : null;
		}
		return this.caller;
	}

	/**
	 * In a sub-workflow, the one instance the calling execution took (noteHeldInstances): what an item
	 * that lost its durable field in the caller belongs to. Undefined elsewhere, or when it took several.
	 */
	callerInstance(): InstanceRef | undefined {
		const held = this.callerHeld();
		return held?.length === 1 ? held[0] : undefined;
	}

	/** Like instance(), but a clear error when there is none; `alternative` says what else the author can do. */
	requireInstance(itemIndex: number, item: INodeExecutionData, alternative = ''): InstanceRef {
		const ref = this.instance(itemIndex, item);
		if (ref) return ref;
		// Only where an instance is required: an optional one (a Claim with its own Key) keeps its meaning.
		const fromCaller = this.callerInstance();
		if (fromCaller) return fromCaller;
		const caller = this.callerHeld();
		if (caller) {
			const many = caller.length;
			throw new NodeOperationError(
				nodeOf(this.ctx),
				"The item came into this sub-workflow without its instance (the durable field its caller's Resume Point put on it)",
				{
					itemIndex,
					description: `${many > 1 ? `The calling execution holds ${many} instances, so the item must say which. ` : ''}Two things drop the field. Here: the Execute Workflow Trigger's Input Data Mode must be Accept All Data (or add an input field durable of type Object and map it to {{ $json.durable }} in the Execute Workflow node). In the caller: a node between the Resume Point and the Execute Workflow that makes new items, such as Split Out with Include: No Other Fields (its default; choose All Other Fields) or Edit Fields without Include Other Input Fields. Nothing was saved or claimed for this item.`,
				},
			);
		}
		const resumePoint = this.durableAncestors().find((c) => c.role === 'resumePoint');
		if (resumePoint) {
			// Connected, but this item's paired items do not lead back to it.
			throw new NodeOperationError(
				nodeOf(this.ctx),
				`This item cannot be traced back to the Resume Point '${resumePoint.name}'`,
				{
					itemIndex,
					description: `This node finds the item's instance on its durable field or by n8n's paired items (each item's link to the item it came from). Neither leads to the Resume Point here: a node on the way made a different number of items without linking them, such as a Code node returning new items. Keep the durable field on its items ({ ...item.json }), or set pairedItem on each. Nothing was saved or claimed for this item.${alternative ? ' ' + alternative : ''}`,
				},
			);
		}
		throw new NodeOperationError(
			nodeOf(this.ctx),
			'No Resume Point before this node for this item',
			{
				itemIndex,
				description: `Connect a Resume Point before this node (right after the trigger): this node finds its instance through the items that came from it.${alternative ? ' ' + alternative : ''}`,
			},
		);
	}

	/**
	 * The nearest Idempotency Guard answer this item descends from, with no
	 * Durable Checkpoint Save in between (a save ends the side effect it
	 * recorded). The item's own `idempotency` field counts first.
	 */
	claim(itemIndex: number, item: INodeExecutionData): ClaimRef | undefined {
		const found = this.claimItem(itemIndex, item);
		return found ? claimRefOf(found.json) : undefined;
	}

	/** The item claim() reads the answer from: this item, or the Guard's paired output item. */
	claimItem(itemIndex: number, item: INodeExecutionData): INodeExecutionData | undefined {
		if (claimRefOf(item.json)) return item;
		const guarded = this.fromSoleGuardRun();
		if (guarded) return guarded;
		const candidates = this.durableAncestors();
		if (!candidates.some((c) => c.role === 'guard')) return undefined;
		for (const candidate of candidates) {
			if (candidate.role !== 'guard' && candidate.role !== 'checkpointSave') continue;
			const upstream = this.pairedItem(itemIndex, candidate.name);
			if (!upstream) continue;
			if (candidate.role === 'checkpointSave') return undefined;
			if (claimRefOf(upstream.json)) return upstream;
		}
		return undefined;
	}
}
