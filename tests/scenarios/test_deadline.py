"""The tool-call time limit: values and exceptions come back, a hung call is given up on at its limit."""

import threading
import time

import pytest

from scenarios.tool_use.deadline import DeadlineExceeded, abandoned_calls, call_with_deadline


def test_value_and_exception_come_back_from_the_worker():
    assert call_with_deadline(lambda: 41 + 1, 1.0) == 42
    with pytest.raises(KeyError, match="gone"):
        call_with_deadline(lambda: {}["gone"], 1.0)


def test_a_hung_call_is_abandoned_at_its_limit_and_counted():
    release = threading.Event()
    before = abandoned_calls()
    start = time.perf_counter()
    with pytest.raises(DeadlineExceeded, match="0.1 s"):
        call_with_deadline(lambda: release.wait(60), 0.1)
    assert time.perf_counter() - start < 0.6
    assert abandoned_calls() == before + 1
    assert call_with_deadline(lambda: "fresh", 1.0) == "fresh"  # the next call does not queue behind the hung one
    release.set()


def test_callers_on_several_threads_each_get_their_own_answer():
    results: dict[int, int] = {}

    def caller(i: int) -> None:
        results[i] = call_with_deadline(lambda: i * i, 5.0)

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {i: i * i for i in range(8)}
