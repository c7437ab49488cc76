/* eslint-disable @n8n/community-nodes/no-restricted-globals, @n8n/community-nodes/no-restricted-imports -- test code runs in Node, never inside n8n */
/**
 * The codex files (nodes/<Node>/<Node>.node.json) that n8n's node panel searches and links from:
 * every node is found by each of the four words a user tries, and every documentation link
 * points at a heading that exists: the node's in docs/nodes.md, the credential's in the node README. No sidecar needed.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

import { DurableSidecarApi } from '../credentials/DurableSidecarApi.credentials';

const ROOT = join(__dirname, '..');
const SEARCH_WORDS = ['durable', 'checkpoint', 'idempotency', 'resume'];

interface Codex {
	node: string;
	categories: string[];
	alias: string[];
	resources: Record<string, Array<{ url: string }>>;
}

const codexes: Array<[string, Codex]> = readdirSync(join(ROOT, 'nodes')).map((folder) => [
	folder,
	JSON.parse(readFileSync(join(ROOT, 'nodes', folder, `${folder}.node.json`), 'utf8')) as Codex,
]);

/** GitHub's anchor for a Markdown heading: lower case, punctuation dropped, spaces to dashes. */
function anchorOf(heading: string): string {
	return heading
		.trim()
		.toLowerCase()
		.replace(/[^\p{L}\p{N} _-]/gu, '')
		.replace(/ /g, '-');
}

/** The headings' anchors of a Markdown page of this repository. */
function anchorsOf(path: string): Set<string> {
	return new Set(
		readFileSync(path, 'utf8')
			.split('\n')
			.filter((line) => /^#{1,6} /.test(line))
			.map((line) => anchorOf(line.replace(/^#+ /, ''))),
	);
}

const anchors = anchorsOf(join(ROOT, 'README.md'));
/** The node reference moved out of the README (docs/nodes.md); the wiring and the credential stay in it. */
const nodeAnchors = anchorsOf(join(ROOT, '..', 'docs', 'nodes.md'));
const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as {
	repository: { url: string; directory: string };
	homepage: string;
};
const repoUrl = pkg.repository.url.replace(/^git\+/, '').replace(/\.git$/, '');
const readmeUrl = `${repoUrl}/blob/main/${pkg.repository.directory}/README.md`;
const nodesUrl = `${repoUrl}/blob/main/docs/nodes.md`;

describe('codex files', () => {
	it('cover the six nodes', () => {
		expect(codexes.map(([folder]) => folder).sort()).toEqual([
			'DurableCheckpoint',
			'DurableInstance',
			'DurableLimit',
			'IdempotencyGuard',
			'ResumePoint',
			'ResumeTrigger',
		]);
	});

	it.each(codexes)('%s is found by each search word and sits in Development', (_folder, codex) => {
		for (const word of SEARCH_WORDS) expect(codex.alias).toContain(word);
		expect(codex.categories).toContain('Development');
	});

	it.each(codexes)(
		"%s links to its heading of the node reference and the credential's of the node README",
		(_folder, codex) => {
			const primary = codex.resources.primaryDocumentation.map((r) => r.url);
			const credential = codex.resources.credentialDocumentation.map((r) => r.url);
			expect(primary.length).toBe(1);
			for (const url of primary) {
				const [page, anchor] = url.split('#');
				expect(page).toBe(nodesUrl);
				expect(nodeAnchors).toContain(anchor);
			}
			for (const url of credential) {
				const [page, anchor] = url.split('#');
				expect(page).toBe(readmeUrl);
				expect(anchors).toContain(anchor);
			}
		},
	);

	it('the credential links to its heading of the node README', () => {
		const [page, anchor] = new DurableSidecarApi().documentationUrl.split('#');
		expect(page).toBe(readmeUrl);
		expect(anchors).toContain(anchor);
	});

	it('package.json points at the same repository', () => {
		expect(repoUrl).toMatch(/^https:\/\/github\.com\/[^/]+\/[^/]+$/);
		expect(pkg.homepage.startsWith(repoUrl)).toBe(true);
	});
});
