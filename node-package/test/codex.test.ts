/* eslint-disable @n8n/community-nodes/no-restricted-globals, @n8n/community-nodes/no-restricted-imports -- test code runs in Node, never inside n8n */
/**
 * The codex files (nodes/<Node>/<Node>.node.json) that n8n's node panel searches and links from:
 * every node is found by each of the four words a user tries, and every documentation link
 * points into this repository's node README at a heading that exists. No sidecar needed.
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

const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
const anchors = new Set(
	readme
		.split('\n')
		.filter((line) => /^#{1,6} /.test(line))
		.map((line) => anchorOf(line.replace(/^#+ /, ''))),
);
const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as {
	repository: { url: string; directory: string };
	homepage: string;
};
const repoUrl = pkg.repository.url.replace(/^git\+/, '').replace(/\.git$/, '');
const readmeUrl = `${repoUrl}/blob/main/${pkg.repository.directory}/README.md`;

describe('codex files', () => {
	it('cover the five nodes', () => {
		expect(codexes.map(([folder]) => folder).sort()).toEqual([
			'DurableCheckpoint',
			'DurableInstance',
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
		'%s links to a heading of the node README in the repository',
		(_folder, codex) => {
			const urls = Object.values(codex.resources)
				.flat()
				.map((r) => r.url);
			expect(urls.length).toBeGreaterThanOrEqual(2);
			for (const url of urls) {
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
