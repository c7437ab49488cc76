/**
 * The node of one node run, read once.
 *
 * n8n's getNode() returns a deep copy of the node (parameters and
 * credentials included) on every call; our nodes and shared helpers ask for
 * it about ten times per run. One copy per run (per execution context) is
 * enough: nothing here changes it.
 */
import type { INode } from 'n8n-workflow';

const nodes = new WeakMap<object, INode>();

export function nodeOf(ctx: { getNode(): INode }): INode {
	let node = nodes.get(ctx);
	if (node === undefined) {
		node = ctx.getNode();
		nodes.set(ctx, node);
	}
	return node;
}
