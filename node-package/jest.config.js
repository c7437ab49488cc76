/** Jest: TypeScript through ts-jest; every suite talks to a real sidecar it starts. */
module.exports = {
	testEnvironment: 'node',
	roots: ['<rootDir>/test'],
	testMatch: ['**/*.test.ts'],
	transform: { '^.+\\.ts$': ['ts-jest', { tsconfig: 'tsconfig.test.json' }] },
	// Each suite starts a sidecar and a database: one at a time on a 2-core machine.
	maxWorkers: 1,
	testTimeout: 60_000,
};
