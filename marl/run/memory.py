"""Process memory: the resident set a run reports (now and at its peak), and handing freed heap back to the system.

A training process allocates tensors of ever-changing shapes (batches of different widths, KV caches
that grow by a chunk per step); glibc's allocator keeps much of what is freed in its arenas, so the
resident set creeps up with the steps even though nothing leaks. `trim_heap` returns that memory
between stages and iterations. Left out: per-tensor accounting and GPU memory.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import resource
import sys
from functools import cache


def rss_gb() -> float:
    """The process's resident memory now, in GB (Linux's `/proc/self/statm`; elsewhere the peak so far)."""
    try:
        pages = int(open("/proc/self/statm").read().split()[1])
    except (OSError, IndexError, ValueError):
        return peak_rss_gb()
    return pages * resource.getpagesize() / (1 << 30)


def peak_rss_gb() -> float:
    """The process's peak resident memory so far, in GB (what `/usr/bin/time -v` reports at the end)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1 << 30) if sys.platform == "darwin" else peak / (1 << 20)  # bytes on macOS, KiB on Linux


@cache
def _malloc_trim() -> object | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return getattr(libc, "malloc_trim", None)  # glibc only (musl has none)
    except OSError:
        return None


def trim_heap() -> bool:
    """Give the allocator's free memory back to the system (glibc's `malloc_trim`); False where there is none."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
