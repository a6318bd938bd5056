"""A real time limit on a tool backend: the call runs on a worker thread and the caller stops waiting.

A backend that hangs (a network call that never answers, an infinite loop) must not hang the run: the
caller waits at most the limit, then gets `DeadlineExceeded` and goes on, and the worker thread that is
still inside the hung call is abandoned (a daemon thread, so it never keeps the interpreter alive); the
next call starts a fresh worker. One worker serves calls one at a time, so the common case costs a
queue hand-off, not a thread start.

It leaves out killing the hung call: Python cannot stop a thread, so a backend that never returns
keeps its thread (and whatever it holds) until the process ends; `abandoned_calls()` counts them.
A backend that must be killed outright belongs in a subprocess.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


class DeadlineExceeded(Exception):
    """The call did not return within its limit; its worker thread was abandoned."""


class _Worker:
    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue[tuple[Callable[[], Any], list[tuple[bool, Any]], threading.Event]] = \
            queue.SimpleQueue()
        threading.Thread(target=self._serve, daemon=True, name="tool-call").start()

    def _serve(self) -> None:
        while True:
            fn, box, done = self.jobs.get()
            try:
                box.append((True, fn()))
            except BaseException as exc:  # noqa: BLE001 - handed back to the caller, who decides
                box.append((False, exc))
            done.set()


_lock = threading.Lock()
_worker: _Worker | None = None
_abandoned = 0


def call_with_deadline(fn: Callable[[], T], timeout_s: float) -> T:
    """`fn()` on the worker thread: its value, or its exception re-raised here, or `DeadlineExceeded`
    once `timeout_s` seconds have passed without an answer."""
    global _worker, _abandoned
    box: list[tuple[bool, Any]] = []
    done = threading.Event()
    with _lock:  # one call at a time per worker: callers on several threads queue here
        if _worker is None:
            _worker = _Worker()
        _worker.jobs.put((fn, box, done))
        if not done.wait(timeout_s):
            _worker, _abandoned = None, _abandoned + 1
            raise DeadlineExceeded(f"no answer within {timeout_s:g} s")
    ok, value = box[0]
    if not ok:
        raise value
    return value


def abandoned_calls() -> int:
    """Calls given up on so far in this process (each left a thread inside a hung backend)."""
    return _abandoned
