"""Benchmark payloads: JSON states of an exact size, shaped like an n8n item (an order with lines)."""

from __future__ import annotations

import functools
import json
import random
import string

KB = 1024
MB = 1024 * 1024
SIZES = (1 * KB, 10 * KB, 100 * KB, 1 * MB, 10 * MB)


def label(size: int) -> str:
    return f"{size // MB} MB" if size >= MB else f"{size // KB} KB"


@functools.cache
def state_json(size: int, seed: int = 7) -> bytes:
    """A JSON object of exactly `size` bytes.

    Order lines with random ids, prices and words compress about as well as
    real workflow data (zlib level 1 gets roughly 2-3x), unlike a run of one
    repeated character, which would flatter compression and the network.
    """
    rng = random.Random(seed)
    words = ["".join(rng.choices(string.ascii_lowercase, k=rng.randint(3, 9))) for _ in range(512)]
    head = (f'{{"orderId":"ord_{rng.getrandbits(48):012x}","customer":{{"id":"cus_{rng.getrandbits(40):010x}",'
            f'"email":"{rng.choice(words)}@example.com"}},"lines":[')
    tail_open, tail_close = '],"note":"', '"}'
    budget = size - len(head) - len(tail_open) - len(tail_close)
    if budget < 0:
        raise ValueError(f"{size} bytes is too small for a benchmark state")
    lines: list[str] = []
    used = 0
    while True:
        line = (f'{{"sku":"SKU-{rng.getrandbits(32):08X}","qty":{rng.randint(1, 9)},'
                f'"price":{rng.randint(100, 50000) / 100},"title":"{" ".join(rng.choices(words, k=4))}"}}')
        cost = len(line) + (1 if lines else 0)
        if used + cost > budget:
            break
        lines.append(line)
        used += cost
    note = "".join(rng.choices(string.ascii_letters + " ", k=budget - used))
    out = (head + ",".join(lines) + tail_open + note + tail_close).encode()
    assert len(out) == size, (len(out), size)
    json.loads(out)  # a benchmark of invalid JSON would measure the error path
    return out
