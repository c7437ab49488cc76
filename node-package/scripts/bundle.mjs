// Bundles the gRPC client into dist so the package installs with no runtime
// dependencies: dist/shared/transport.js (which alone imports shared/grpc/, the
// only importers of @grpc/grpc-js with the generated code) becomes one
// self-contained file, and the files it took in are removed; n8n-workflow
// stays external (n8n provides it). Then checks that nothing in dist still
// requires a package n8n does not have, or a file the bundle took in.
import { build } from 'esbuild';
import { builtinModules } from 'node:module';
import {
	cpSync,
	existsSync,
	mkdirSync,
	readFileSync,
	readdirSync,
	rmSync,
	statSync,
	writeFileSync,
} from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';

const root = resolve(dirname(new URL(import.meta.url).pathname), '..');
const dist = join(root, 'dist');
const entry = join(dist, 'shared', 'transport.js');
if (!existsSync(entry)) {
	console.error('bundle: dist/shared/transport.js is missing: run tsc (n8n-node build) first');
	process.exit(1);
}

const result = await build({
	entryPoints: [entry],
	outfile: entry,
	allowOverwrite: true,
	bundle: true,
	platform: 'node',
	format: 'cjs',
	target: 'node20',
	external: ['n8n-workflow'],
	legalComments: 'eof',
	metafile: true,
	logLevel: 'warning',
});
for (const bundled of ['gen', 'grpc']) {
	rmSync(join(dist, 'shared', bundled), { recursive: true, force: true });
}

// Licences of the bundled packages travel with the bundle.
const packages = new Set();
for (const input of Object.keys(result.metafile.inputs)) {
	const m = /node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(input);
	if (m) packages.add(m[1]);
}
const licenceDir = join(dist, 'shared', 'licenses');
mkdirSync(licenceDir, { recursive: true });
const notices = [];
for (const name of [...packages].sort()) {
	const dir = join(root, 'node_modules', name);
	const pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8'));
	notices.push(`${name}@${pkg.version} (${pkg.license ?? 'see licence file'})`);
	for (const file of readdirSync(dir)) {
		if (/^(licen[sc]e|notice|copying)/i.test(file)) {
			cpSync(join(dir, file), join(licenceDir, `${name.replace('/', '__')}.${file}`));
		}
	}
}
writeFileSync(
	join(licenceDir, 'BUNDLED.txt'),
	`dist/shared/transport.js bundles these packages:\n${notices.join('\n')}\n`,
);

// Every require in dist must be relative (and exist), a Node built-in, or n8n-workflow.
const builtins = new Set([...builtinModules, ...builtinModules.map((m) => `node:${m}`)]);
const problems = [];
function walk(dir) {
	for (const name of readdirSync(dir)) {
		const path = join(dir, name);
		if (statSync(path).isDirectory()) walk(path);
		else if (path.endsWith('.js')) check(path);
	}
}
function check(file) {
	const text = readFileSync(file, 'utf8');
	for (const m of text.matchAll(/\brequire\((['"])([^'"]+)\1\)/g)) {
		const spec = m[2];
		if (spec.startsWith('.')) {
			const base = resolve(dirname(file), spec);
			if (
				![base, `${base}.js`, join(base, 'index.js')].some(
					(p) => existsSync(p) && statSync(p).isFile(),
				)
			) {
				problems.push(`${relative(root, file)}: require('${spec}') does not resolve`);
			}
		} else if (!builtins.has(spec) && spec !== 'n8n-workflow') {
			problems.push(`${relative(root, file)}: require('${spec}') is not bundled`);
		}
	}
}
walk(dist);
const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
for (const file of [...pkg.n8n.nodes, ...pkg.n8n.credentials]) {
	if (!existsSync(join(root, file)))
		problems.push(`package.json n8n section lists ${file}, which was not built`);
}
if (problems.length) {
	console.error(`bundle: dist is not self-contained:\n  ${problems.join('\n  ')}`);
	process.exit(1);
}
const size = (statSync(entry).size / 1024).toFixed(0);
console.log(
	`bundle: dist/shared/transport.js (${size} KiB) bundles ${packages.size} packages; dist needs only n8n-workflow`,
);
