import { ExpiringMap } from '../shared/expiring-map';

describe('ExpiringMap', () => {
	afterEach(() => jest.useRealTimers());

	it('returns an entry while it lives and never after its time to live', () => {
		jest.useFakeTimers({ now: 1_000_000 });
		const map = new ExpiringMap<string>(10, 1_000);
		map.set('a', 'one');
		jest.setSystemTime(1_000_999);
		expect(map.get('a')).toBe('one');
		jest.setSystemTime(1_001_000);
		expect(map.get('a')).toBeUndefined();
		expect(map.take('a')).toBeUndefined();
		expect(map.size).toBe(0);
	});

	it('takes an entry once', () => {
		const map = new ExpiringMap<number>(10, 60_000);
		map.set('k', 7);
		expect(map.take('k')).toBe(7);
		expect(map.take('k')).toBeUndefined();
	});

	it('drops the oldest beyond its bound, and setting an entry again makes it the newest', () => {
		const map = new ExpiringMap<number>(3, 60_000);
		map.set('a', 1);
		map.set('b', 2);
		map.set('c', 3);
		map.set('a', 10); // now the newest: b is the oldest
		map.set('d', 4);
		expect(map.size).toBe(3);
		expect(map.get('b')).toBeUndefined();
		expect([map.get('a'), map.get('c'), map.get('d')]).toEqual([10, 3, 4]);
	});

	it('drops expired entries when a new one is set', () => {
		jest.useFakeTimers({ now: 5_000 });
		const map = new ExpiringMap<number>(100, 1_000);
		map.set('old', 1);
		jest.setSystemTime(7_000);
		map.set('new', 2);
		expect(map.size).toBe(1);
		map.clear();
		expect(map.size).toBe(0);
	});
});
