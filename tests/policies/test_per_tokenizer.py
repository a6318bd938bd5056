"""`PerTokenizer`: compile-time tables remembered per tokenizer object, never handed to another one."""

from __future__ import annotations

import gc
import weakref

from policies.per_tokenizer import PerTokenizer


class _Tok:
    """Stands in for a tokenizer: only its identity matters here."""


def test_a_value_is_found_for_its_own_tokenizer_only() -> None:
    held: PerTokenizer[str] = PerTokenizer()
    a, b = _Tok(), _Tok()
    held.put(a, "table of a")
    assert held.get(a) == "table of a"
    assert held.get(b) is None
    held.put(a, "new table")
    assert held.get(a) == "new table"


def test_the_tokenizer_stays_alive_so_its_id_cannot_name_another_object() -> None:
    held: PerTokenizer[int] = PerTokenizer()
    tok = _Tok()
    ref = weakref.ref(tok)
    held.put(tok, 1)
    del tok
    gc.collect()
    assert ref() is not None  # a freed tokenizer's id could be reused by a new one, which would then get its table
    assert held.get(ref()) == 1
