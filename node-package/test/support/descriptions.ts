/**
 * The node descriptions as n8n's editor evaluates them, for the description tests: n8n-workflow's own
 * parameter defaults and expression engine, no sidecar.
 */
import {
	NodeHelpers,
	Workflow,
	type INode,
	type INodeParameters,
	type INodeType,
	type INodeTypes,
} from 'n8n-workflow';

/** The node's parameters with n8n's defaults for `version`, as the editor stores them. */
export function parametersOf(
	type: INodeType,
	version: number,
	given: INodeParameters,
): INodeParameters {
	return (
		NodeHelpers.getNodeParameters(
			type.description.properties,
			given,
			true,
			false,
			{ typeVersion: version },
			type.description,
		) ?? {}
	);
}

/** Evaluates a description expression (subtitle, outputs) for a node with these parameters. */
export function evaluate(
	type: INodeType,
	version: number,
	given: INodeParameters,
	expression: string,
) {
	const nodeTypes = {
		getByName: () => type,
		getByNameAndVersion: () => type,
		getKnownTypes: () => ({}),
	} as unknown as INodeTypes;
	const node: INode = {
		id: '1',
		name: type.description.displayName,
		type: `n8n-nodes-durable.${type.description.name}`,
		typeVersion: version,
		position: [0, 0],
		parameters: parametersOf(type, version, given),
	};
	const workflow = new Workflow({ nodes: [node], connections: {}, active: false, nodeTypes });
	return workflow.expression.getSimpleParameterValue(node, expression, 'internal', {});
}
