/**
 * Finding an item's instance and idempotency claim upstream by n8n's paired
 * items, so that version-2 nodes need no expressions: the item itself first,
 * then the nearest durable node before this one whose paired item carries it.
 */
import {
	NodeOperationError,
	type IDataObject,
	type IExecuteFunctions,
	type INodeExecutionData,
	type INodeParameters,
	type NodeTypeAndVersion,
	type IPairedItemData,
	type ISourceData,
	type IWorkflowDataProxyData,
	type NodeParameterValueType,
} from 'n8n-workflow';

import { ExpiringMap } from './expiring-map';
import { nodeOf } from './run-node';
import { DURABLE_FIELD, IDEMPOTENCY_FIELD, isObject, typeName } from './node-helpers';

/** The instance an item belongs to, as the Resume Point (or a later durable node) put it on an item. */
export interface InstanceRef {
	workflowId: string;
	instanceKey: string;
	/** The instance's lease length in seconds; 0 when unknown. */
	leaseSeconds: number;
}

/** An Idempotency Guard answer upstream of an item. */
export interface ClaimRef {
	scope: string;
	key: string;
	attempt: number;
	/** acquired, duplicate, in_progress, recorded, released */
	outcome: string;
	/** The replayed result of a duplicate. */
	result?: unknown;
}

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

/** An instance and who acts on it in this execution: what every call about an instance names. */
export interface Target {
	workflowId: string;
	instanceKey: string;
	/** The lease owner and claim holder: the execution that holds the instance. */
	executionId: string;
}

/**
 * The instance `ref` and the execution that acts on it here. An instance of
 * this workflow: this execution. Another workflow's instance reaches a node
 * only in a sub-workflow that workflow called (Execute Workflow hands the
 * items on with their `durable` field): the calling execution holds the
 * instance's lease while the sub-workflow runs, so the sub-workflow acts as
 * that execution. Its saves leave the lease where it is, and its claims are
 * the caller's, so a resumed caller takes them over at once as its own.
 * Anywhere else another workflow's instance is an error, before any call.
 */
export function targetOf(
	ctx: IExecuteFunctions,
	ref: InstanceRef,
	itemIndex: number,
	own: { workflowId: string; executionId: string },
): Target {
	if (!ref.workflowId || ref.workflowId === own.workflowId) {
		return {
			workflowId: own.workflowId,
			instanceKey: ref.instanceKey,
			executionId: own.executionId,
		};
	}
	const context =
		typeof ctx.getExecutionContext === 'function' ? ctx.getExecutionContext() : undefined;
	const caller = context?.parentExecutionId;
	if (!caller) {
		throw new NodeOperationError(
			nodeOf(ctx),
			`The item belongs to instance '${ref.instanceKey}' of workflow ${ref.workflowId}, not of this workflow (${own.workflowId})`,
			{
				itemIndex,
				description:
					"A durable node acts on another workflow's instance only in a sub-workflow that workflow runs (Execute Workflow with the items' durable field passed on). Here, remove the item's durable field before the Resume Point, or set Instance to By Key.",
			},
		);
	}
	return { workflowId: ref.workflowId, instanceKey: ref.instanceKey, executionId: String(caller) };
}

export function instanceRefOf(json: IDataObject): InstanceRef | undefined {
	const meta = json[DURABLE_FIELD];
	if (!isObject(meta) || typeof meta.instanceKey !== 'string' || !meta.instanceKey)
		return undefined;
	return {
		workflowId: typeof meta.workflowId === 'string' ? meta.workflowId : '',
		instanceKey: meta.instanceKey,
		leaseSeconds: typeof meta.leaseSeconds === 'number' ? meta.leaseSeconds : 0,
	};
}

export function claimRefOf(json: IDataObject): ClaimRef | undefined {
	const meta = json[IDEMPOTENCY_FIELD];
	if (!isObject(meta) || typeof meta.scope !== 'string' || typeof meta.key !== 'string') {
		return undefined;
	}
	return {
		scope: meta.scope,
		key: meta.key,
		attempt: typeof meta.attempt === 'number' ? meta.attempt : 0,
		outcome: typeof meta.outcome === 'string' ? meta.outcome : '',
		result: meta.result,
	};
}

/**
 * What each Idempotency Guard put out in this n8n process, per execution: how
 * often it ran and, when its one run routed exactly one item, that item (held
 * weakly: n8n's run data keeps it alive while the execution needs it). A node
 * whose every input comes straight from that Guard, or through nodes whose
 * only input is that Guard, can then read the Guard's answer without n8n's
 * paired-item walk, which builds a data proxy per node run (about 0.4 ms of
 * n8n CPU per Save in n8n 2.41, the largest cost of our nodes' own code).
 * Anything else (a second run, several items, a record that is gone) and the
 * walk decides as before.
 */
interface GuardRun {
	runs: number;
	item: WeakRef<INodeExecutionData> | undefined;
}
export const GUARD_RUNS_MAX = 10_000;
export const GUARD_RUNS_TTL_MS = 10 * 60 * 1000;
const guardRuns = new ExpiringMap<GuardRun>(GUARD_RUNS_MAX, GUARD_RUNS_TTL_MS);

function guardRunSlot(executionId: string, guard: string): string {
	return JSON.stringify([executionId, guard]);
}

/** Notes one run of the Guard `guard` in `executionId` and what its outputs hold (called by the Guard). */
export function noteGuardRun(
	executionId: string,
	guard: string,
	outputs: INodeExecutionData[][],
): void {
	const slot = guardRunSlot(executionId, guard);
	const before = guardRuns.get(slot);
	const all = outputs.flat();
	guardRuns.set(slot, {
		runs: (before?.runs ?? 0) + 1,
		item: !before && all.length === 1 ? new WeakRef(all[0]) : undefined,
	});
}

/** The Guard's one output item when it ran once with one item in this execution, else undefined (tests too). */
export function soleGuardItem(executionId: string, guard: string): INodeExecutionData | undefined {
	const entry = guardRuns.get(guardRunSlot(executionId, guard));
	return entry?.runs === 1 ? entry.item?.deref() : undefined;
}

/** Forgets every noted Guard run (tests). */
export function clearGuardRuns(): void {
	guardRuns.clear();
}

/**
 * The instances each execution's Resume Point took (started or resumed) in
 * this n8n process. A sub-workflow runs in its caller's process, so for an
 * item that came into it without the `durable` field (a Split Out at its
 * default, an Edit Fields node, drop it in the caller) the nodes there act on
 * the instance the calling execution took, when it took exactly one: any
 * durable work that execution hands on is that instance's. Kept as long as a
 * lease with a wait can last (a day), at most HELD_MAX executions: a miss (an
 * n8n restart since the Resume Point ran, say during a Wait node) leaves the
 * author's error, the execution fails, and the instance's next resume takes
 * it again here.
 */
export const HELD_MAX = 10_000;
export const HELD_TTL_MS = 24 * 60 * 60 * 1000;
const heldInstances = new ExpiringMap<InstanceRef[]>(HELD_MAX, HELD_TTL_MS);

/** Notes the instances the Resume Point of `executionId` took in this run (called by the Resume Point). */
export function noteHeldInstances(executionId: string, refs: InstanceRef[]): void {
	if (refs.length === 0) return;
	const held = [...(heldInstances.get(executionId) ?? [])];
	for (const ref of refs) {
		const i = held.findIndex(
			(h) => h.workflowId === ref.workflowId && h.instanceKey === ref.instanceKey,
		);
		if (i >= 0) held[i] = ref;
		else held.push(ref);
	}
	heldInstances.set(executionId, held);
}

/** The instances `executionId`'s Resume Point took in this process, [] when none is known. */
export function heldBy(executionId: string): InstanceRef[] {
	return heldInstances.get(executionId) ?? [];
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
			const context =
				typeof this.ctx.getExecutionContext === 'function'
					? this.ctx.getExecutionContext()
					: undefined;
			const parent = context?.parentExecutionId;
			this.caller = parent ? heldBy(String(parent)) : null;
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

/** Deep equality of JSON values (objects, arrays, strings, numbers, booleans, null). */
function sameJson(a: unknown, b: unknown): boolean {
	if (a === b) return true;
	if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return false;
	if (Array.isArray(a) !== Array.isArray(b)) return false;
	const ka = Object.keys(a);
	const kb = Object.keys(b);
	if (ka.length !== kb.length) return false;
	for (const k of ka) {
		if (!Object.prototype.hasOwnProperty.call(b, k)) return false;
		if (!sameJson((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k]))
			return false;
	}
	return true;
}

/**
 * Points the top-level fields of `next` that equal the same field of `before`
 * at `before`'s value instead of an equal copy. n8n stores an execution's
 * items with flatted, which writes an object once however often it is
 * referenced: a Save's output item (the whole instance state, parsed from the
 * sidecar's answer) then adds only what changed to the execution record
 * instead of another copy of the start item and every earlier step result.
 */
export function shareUnchanged(
	next: IDataObject,
	before: IDataObject | undefined,
	skip: string,
): void {
	if (!before) return;
	for (const key of Object.keys(next)) {
		if (key === skip || !Object.prototype.hasOwnProperty.call(before, key)) continue;
		const value = before[key];
		if (value !== next[key] && typeof value === 'object' && sameJson(next[key], value)) {
			next[key] = value;
		}
	}
}

/** `={{ $json.a.b }}`, `={{ $json["a b"][0] }}`: the whole parameter is one path into the item's JSON. */
const JSON_PATH_EXPRESSION =
	/^=\{\{\s*\$json((?:\s*\.\s*[A-Za-z_$][\w$]*|\s*\[\s*(?:'[^'\\]*'|"[^"\\]*"|\d+)\s*\])+)\s*\}\}$/;
const JSON_PATH_PART = /\.\s*([A-Za-z_$][\w$]*)|\[\s*(?:'([^'\\]*)'|"([^"\\]*)"|(\d+))\s*\]/g;

/**
 * The path of an expression that only reads a field of the item's own JSON
 * (`{{ $json.body.orderId }}`, the usual Instance Key), or undefined for any
 * other expression.
 */
export function jsonPathOf(expression: string): string[] | undefined {
	const match = JSON_PATH_EXPRESSION.exec(expression);
	if (!match) return undefined;
	const path: string[] = [];
	for (const part of match[1].matchAll(JSON_PATH_PART)) {
		path.push(part[1] ?? part[2] ?? part[3] ?? part[4]);
	}
	return path.length ? path : undefined;
}

/**
 * The value at `path` in `json` when it is a string, number or boolean;
 * undefined otherwise (a missing field, an object), where n8n's own
 * evaluation decides (its value, or its error).
 */
export function scalarAt(json: unknown, path: string[]): string | number | boolean | undefined {
	let value: unknown = json;
	for (const part of path) {
		if (!isObject(value) && !Array.isArray(value)) return undefined;
		if (!Object.prototype.hasOwnProperty.call(value, part)) return undefined;
		value = (value as Record<string, unknown>)[part];
	}
	return typeof value === 'string' || typeof value === 'number' || typeof value === 'boolean'
		? value
		: undefined;
}

/**
 * A parameter read once per node run unless the author made it an expression
 * (then per item, as n8n resolves it): keeps expression evaluation off the
 * per-item path for the usual plain values. An expression that only reads a
 * field of the item (`{{ $json.body.orderId }}`) is read from the item
 * directly: the same value n8n's expression engine would give, without
 * starting it (in n8n 2.41 one evaluation costs milliseconds of CPU).
 */
export function parameterReader<T extends NodeParameterValueType | object>(
	ctx: IExecuteFunctions,
	name: string,
	fallback: T,
): (itemIndex: number) => T {
	let raw: unknown = nodeOf(ctx).parameters;
	for (const part of name.split('.')) raw = isObject(raw) ? raw[part] : undefined;
	if (typeof raw === 'string' && raw.startsWith('=')) {
		const path = jsonPathOf(raw);
		if (path) {
			const items = ctx.getInputData();
			return (itemIndex) => {
				const value = scalarAt(items[itemIndex]?.json, path);
				return value !== undefined
					? (value as T)
					: (ctx.getNodeParameter(name, itemIndex, fallback) as T);
			};
		}
		return (itemIndex) => ctx.getNodeParameter(name, itemIndex, fallback) as T;
	}
	let once: { value: T } | undefined;
	return () => {
		once ??= { value: nodeParameter<T>(ctx, name, 0, fallback) };
		return once.value;
	};
}

/** A string that is no expression, a number, a boolean, null, or arrays and objects of these. */
function isPlain(value: unknown): boolean {
	if (value === null || typeof value === 'number' || typeof value === 'boolean') return true;
	if (typeof value === 'string') return value.charAt(0) !== '=';
	if (Array.isArray(value)) return value.every(isPlain);
	if (isObject(value)) return Object.values(value).every(isPlain);
	return false;
}

/**
 * What ctx.getNodeParameter(name, itemIndex, fallback) answers, read from the
 * node itself when nothing needs evaluating: a stored value that holds no
 * expression (n8n returns it as it is: our properties declare no validateType),
 * or an option missing from a collection that is there (n8n's lookup gives the
 * fallback). Anything else (an expression, a parameter the node does not
 * have) goes to n8n. Saves n8n's resolution and its search of the description
 * per call; profiled in n8n 2.41 a few hundredths of a millisecond each, about
 * 45 calls per durable order.
 */
export function nodeParameter<T = unknown>(
	ctx: IExecuteFunctions,
	name: string,
	itemIndex: number,
	fallback?: unknown,
): T {
	const parts = name.split('.');
	let parent: unknown;
	let raw: unknown = nodeOf(ctx).parameters;
	for (const part of parts) {
		parent = raw;
		raw = isObject(raw) ? raw[part] : undefined;
	}
	if (raw !== undefined && isPlain(raw)) {
		return (typeof raw === 'object' && raw !== null ? structuredClone(raw) : raw) as T;
	}
	if (raw === undefined && parts.length > 1 && isObject(parent) && fallback !== undefined) {
		if (isPlain(fallback)) return fallback as T;
	}
	return (
		fallback === undefined
			? ctx.getNodeParameter(name, itemIndex)
			: ctx.getNodeParameter(name, itemIndex, fallback as NodeParameterValueType | object)
	) as T;
}
