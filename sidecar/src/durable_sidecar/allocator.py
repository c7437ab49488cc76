"""glibc's allocator tuned for a server that holds large transient buffers (states up to DURABLE_MAX_STATE_BYTES).

By default glibc raises its mmap threshold each time a large block is freed,
so after the first multi-megabyte state every later one is carved from a heap
arena and kept by the process when freed; and every thread that touches a
large state (the executor that checks, hashes and compresses it) gets an arena
of its own. A fixed 1 MiB threshold returns every large buffer to the system
when it is freed, and two arenas bound what the threads keep. Small objects
are unaffected. A no-op outside glibc.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)

_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8
_MMAP_THRESHOLD_BYTES = 1 << 20
_ARENAS = 2


def tune() -> bool:
    """Applies the settings above; whether the C library took them."""
    name = ctypes.util.find_library("c")
    if not name:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False  # not glibc
    ok = bool(mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_BYTES)) and bool(mallopt(_M_ARENA_MAX, _ARENAS))
    log.debug("allocator tuned", extra={"mmap_threshold": _MMAP_THRESHOLD_BYTES, "arenas": _ARENAS, "ok": ok})
    return ok
