/**
 * A bounded map whose entries expire: what the nodes keep in the n8n process
 * between one node's run and the next one's (answers claimed ahead, the
 * Guards' runs). Entries are kept oldest first; setting one again moves it
 * last. Each set first drops the entries past their time to live and, beyond
 * the bound, the oldest. A read never returns an expired entry.
 */
export class ExpiringMap<V> {
	private readonly entries = new Map<string, { value: V; at: number }>();

	constructor(
		readonly maxEntries: number,
		readonly ttlMs: number,
	) {}

	get size(): number {
		return this.entries.size;
	}

	/** The entry's value while it lives, else undefined. */
	get(key: string): V | undefined {
		const entry = this.entries.get(key);
		return entry && Date.now() - entry.at < this.ttlMs ? entry.value : undefined;
	}

	/** The entry's value while it lives, else undefined; either way the entry is gone after. */
	take(key: string): V | undefined {
		const value = this.get(key);
		this.entries.delete(key);
		return value;
	}

	set(key: string, value: V): void {
		const now = Date.now();
		for (const [id, entry] of this.entries) {
			if (this.entries.size < this.maxEntries && now - entry.at < this.ttlMs) break;
			this.entries.delete(id);
		}
		this.entries.delete(key); // re-inserted last: the map stays oldest first
		this.entries.set(key, { value, at: now });
	}

	clear(): void {
		this.entries.clear();
	}
}
