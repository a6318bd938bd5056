"""Process memory helpers: the peak a run logs, and handing freed heap back (Linux: /proc reads the current RSS)."""

import os
import sys

import pytest

from marl.run.memory import peak_rss_gb, trim_heap

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc; malloc_trim is glibc's")


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_the_peak_is_at_least_the_current_resident_set():
    assert peak_rss_gb() >= _rss_bytes() / (1 << 30) * 0.99 > 0


def test_trimming_returns_freed_heap():
    blocks = [bytearray(64 * 1024) for _ in range(2000)]  # ~128 MB of small heap blocks, then freed
    del blocks
    before = _rss_bytes()
    assert trim_heap() is True
    assert _rss_bytes() <= before
