"""Shared test data for tests/policies: grammar types, a synthetic JSON tool-call corpus, grammars."""

from __future__ import annotations

import json
import random

from scenarios.grammar import ActionGrammar, Slot

__all__ = ["ActionGrammar", "Slot", "ENTITIES", "corpus", "grammars"]

CITIES = ("Paris", "New York", "Tokyo", "Rio de Janeiro", "Oslo")
DAYS = ("mon", "tue", "wed")
CODES = ("FL01", "FL02", "BK2355", "21C", "-3C", "EUR")
ENTITIES: tuple[str, ...] = CITIES + DAYS + CODES


def corpus(n: int = 400, seed: int = 0) -> list[str]:
    """JSON tool calls and tool results, with numbers, as a scenario would show them."""
    rng = random.Random(seed)
    texts = []
    for _ in range(n):
        call = {"tool": rng.choice(["get_weather", "find_flights", "book", "convert"]),
                "args": {"city": rng.choice(CITIES), "day": rng.choice(DAYS)}}
        texts.append(json.dumps(call))
        texts.append(f"Result: {rng.choice(CODES)} costs {rng.randint(0, 9999)} {rng.choice(CODES)}.")
        texts.append(f"Task: what is the weather in {rng.choice(CITIES)} on {rng.choice(DAYS)}? Tools: "
                     "get_weather(city, day), find_flights(origin, destination), answer(value)")
    return texts


def grammars() -> list[ActionGrammar]:
    """A few grammars of different shapes: prefix-sharing actions, slots, an action that is a prefix."""
    city, day, code = Slot("city", CITIES), Slot("day", DAYS), Slot("code", CODES)
    return [
        ActionGrammar(((' {"tool": "get_weather", "args": {"city": "', city, '", "day": "', day, '"}}'),)),
        ActionGrammar((("answer(", code, ")"), ("answer(", city, ")"))),
        ActionGrammar((("yes",), ("yes please",), ("no",))),
        ActionGrammar((('{"tool": "find_flights", "origin": "', Slot("o", CITIES[:2]), '", "dest": "',
                        Slot("d", CITIES[2:]), '"}'), ("give up",))),
    ]
