/**
 * A workflow's connections for the node under test, answered the way n8n's
 * getChildNodes (every node below, nearest first) and getParentNodes (every
 * node above, or `depth` levels of them) answer them. For tests whose wiring
 * is more than the straight line executeContext's upstream and downstream
 * describe: chains, branches, nodes with several inputs.
 */
import type { IExecuteFunctions, INodeParameters, NodeTypeAndVersion } from 'n8n-workflow';

export interface GraphNode {
	name: string;
	type: string;
	typeVersion?: number;
	parameters?: INodeParameters;
	disabled?: boolean;
}

/** Connections as [from, to] node names (outputs are not told apart, as n8n's lookups do not). */
export type Edge = [string, string];

function walk(start: string, next: (name: string) => string[], depth: number): string[] {
	const seen = new Set<string>([start]);
	const order: string[] = [];
	let level = [start];
	for (let d = 0; level.length && (depth < 0 || d < depth); d++) {
		const following: string[] = [];
		for (const name of level) {
			for (const n of next(name)) {
				if (seen.has(n)) continue;
				seen.add(n);
				order.push(n);
				following.push(n);
			}
		}
		level = following;
	}
	return order;
}

/** `ctx` with getChildNodes and getParentNodes answered from `nodes` and `edges`. */
export function withGraph(
	ctx: IExecuteFunctions,
	nodes: GraphNode[],
	edges: Edge[],
): IExecuteFunctions {
	const byName = new Map(nodes.map((n) => [n.name, n]));
	const describe = (name: string, parameters?: boolean): NodeTypeAndVersion => {
		const n = byName.get(name);
		if (!n) throw new Error(`the graph has no node '${name}'`);
		return {
			name,
			type: n.type,
			typeVersion: n.typeVersion ?? 1,
			disabled: n.disabled ?? false,
			...(parameters ? { parameters: n.parameters ?? {} } : {}),
		};
	};
	const children = (name: string) => edges.filter(([a]) => a === name).map(([, b]) => b);
	const parents = (name: string) => edges.filter(([, b]) => b === name).map(([a]) => a);
	return {
		...ctx,
		getChildNodes: (name: string, opts?: { includeNodeParameters?: boolean }) =>
			walk(name, children, -1).map((n) => describe(n, opts?.includeNodeParameters)),
		getParentNodes: (name: string, opts?: { depth?: number; includeNodeParameters?: boolean }) =>
			walk(name, parents, opts?.depth ?? -1).map((n) => describe(n, opts?.includeNodeParameters)),
	} as IExecuteFunctions;
}
