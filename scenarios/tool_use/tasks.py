"""Task generators of the tool-use scenario, per split, from a seed.

A task is a question about a freshly drawn ``World``, the tools listed to the agent, the
solution path (the sequence of useful calls, used by the expert and by the tool-choice and
argument reward layers) and the single correct answer entity.

- ``basic``: 1-2 calls (weather, conversion, booking a flight picked by slot).
- ``hard``: 2-3 dependent calls with distractor tools listed (book the cheapest of a list,
  event -> weather, flight -> conversion, event -> flight -> booking).
- ``adversarial``: a basic or hard task whose solution path has a tool that fails once
  ("temporarily unavailable, retry") and whose text carries a misleading value.
- ``train``: a seeded mixture of the three (``train_mix``).

It leaves out the environment loop and text parsing.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from scenarios.tool_use.tools import CORE_TOOLS, HARD_TOOLS, TOOLS
from scenarios.tool_use.world import (
    CITIES,
    CURRENCIES,
    DAYS,
    ENTITY_KINDS,
    SLOTS,
    World,
    convert_money,
    make_world,
    money_currency,
    money_value_usd,
)

SPLITS = ("train", "basic", "hard", "adversarial")
_SPLIT_CODE = {s: i for i, s in enumerate(SPLITS)}


@dataclass(frozen=True)
class Call:
    """One tool call; ``args`` in the tool's parameter order (so equal calls compare equal)."""

    tool: str
    args: tuple[tuple[str, str], ...]

    @staticmethod
    def make(tool: str, args: dict[str, str]) -> Call:
        order = [p.name for p in TOOLS[tool].params]
        return Call(tool, tuple((k, args[k]) for k in order if k in args))

    def json(self) -> str:
        # Canonical form: json.dumps default separators, arguments in parameter order.
        return json.dumps({"tool": self.tool, "args": dict(self.args)})


@dataclass
class Task:
    family: str
    split: str
    text: str
    tools: tuple[str, ...]
    solution: tuple[Call, ...]
    answer: str
    answer_kind: str
    world: World


def skipped_conversion(call: Call | None) -> str | None:
    """The amount a demonstrator that skips conversions answers where ``call`` is the next useful one: the
    amount ``convert`` would have converted (None where ``call`` is no conversion)."""
    return dict(call.args)["amount"] if call is not None and call.tool == "convert" else None


def pick(rng: np.random.Generator, values: tuple[str, ...], exclude: tuple[str, ...] = ()) -> str:
    """A uniformly drawn value of ``values`` outside ``exclude`` (seeded task drawing)."""
    pool = [v for v in values if v not in exclude]
    return pool[int(rng.integers(len(pool)))]


def _route_slots(rng: np.random.Generator, must: str | None) -> tuple[str, ...]:
    # 3-4 flights on a route, one per slot, always including the slot the task names.
    n = int(rng.integers(3, 5))
    chosen = set(rng.choice(len(SLOTS), size=n, replace=False).tolist())
    slots = [s for i, s in enumerate(SLOTS) if i in chosen]
    if must is not None and must not in slots:
        slots[int(rng.integers(len(slots)))] = must
    return tuple(s for s in SLOTS if s in slots)


Family = Callable[[np.random.Generator, World], tuple[str, tuple[Call, ...], str, str]]


def weather_temp(rng: np.random.Generator, w: World):
    city, day = pick(rng, CITIES), pick(rng, DAYS)
    text = f"What temperature is forecast in {city} on {day}? Answer with the temperature."
    return text, (Call.make("get_weather", {"city": city, "day": day}),), w.weather[(city, day)][1], "temperature"


def weather_condition(rng: np.random.Generator, w: World):
    city, day = pick(rng, CITIES), pick(rng, DAYS)
    text = f"What weather condition is forecast in {city} on {day}? Answer with the condition."
    return text, (Call.make("get_weather", {"city": city, "day": day}),), w.weather[(city, day)][0], "condition"


def convert(rng: np.random.Generator, w: World):
    amount = pick(rng, ENTITY_KINDS["money"])
    to = pick(rng, CURRENCIES, exclude=(money_currency(amount),))
    text = f"How much is {amount} in {to}? Answer with the converted amount."
    return text, (Call.make("convert", {"amount": amount, "to": to}),), convert_money(amount, to), "money"


def _route(rng: np.random.Generator, w: World, slot: str | None, origin: str | None = None,
           destination: str | None = None, day: str | None = None):
    origin = origin or pick(rng, CITIES, exclude=(destination,) if destination else ())
    destination = destination or pick(rng, CITIES, exclude=(origin,))
    day = day or pick(rng, DAYS)
    flights = w.add_route(rng, origin, destination, day, _route_slots(rng, slot), pick(rng, CURRENCIES))
    return origin, destination, day, flights


def book_slot(rng: np.random.Generator, w: World):
    slot = pick(rng, SLOTS)
    o, d, day, flights = _route(rng, w, slot)
    f = next(f for f in flights if f.slot == slot)
    text = f"Book the {slot} flight from {o} to {d} on {day}. Answer with the booking code."
    calls = (Call.make("find_flights", {"origin": o, "destination": d, "day": day, "slot": slot}),
             Call.make("book_flight", {"flight": f.id}))
    return text, calls, f.code, "code"


def cheapest(rng: np.random.Generator, w: World):
    o, d, day, flights = _route(rng, w, None)
    f = min(flights, key=lambda f: money_value_usd(f.price))
    text = f"Book the cheapest flight from {o} to {d} on {day}. Answer with the booking code."
    calls = (Call.make("find_flights", {"origin": o, "destination": d, "day": day}),
             Call.make("book_flight", {"flight": f.id}))
    return text, calls, f.code, "code"


def event_weather(rng: np.random.Generator, w: World):
    event = pick(rng, ENTITY_KINDS["event"])
    city, day = w.events[event]
    text = f"What temperature is forecast where the {event} takes place, on its day? Answer with the temperature."
    calls = (Call.make("get_event", {"name": event}), Call.make("get_weather", {"city": city, "day": day}))
    return text, calls, w.weather[(city, day)][1], "temperature"


def flight_convert(rng: np.random.Generator, w: World):
    slot = pick(rng, SLOTS)
    o, d, day, flights = _route(rng, w, slot)
    f = next(f for f in flights if f.slot == slot)
    to = pick(rng, CURRENCIES, exclude=(money_currency(f.price),))
    text = f"What does the {slot} flight from {o} to {d} on {day} cost in {to}? Answer with the amount."
    calls = (Call.make("find_flights", {"origin": o, "destination": d, "day": day, "slot": slot}),
             Call.make("convert", {"amount": f.price, "to": to}))
    return text, calls, convert_money(f.price, to), "money"


def event_booking(rng: np.random.Generator, w: World):
    event, slot = pick(rng, ENTITY_KINDS["event"]), pick(rng, SLOTS)
    city, day = w.events[event]
    o, _, _, flights = _route(rng, w, slot, destination=city, day=day)
    f = next(f for f in flights if f.slot == slot)
    text = (f"Book the {slot} flight from {o} to the city of the {event}, on the day of the {event}. "
            "Answer with the booking code.")
    calls = (Call.make("get_event", {"name": event}),
             Call.make("find_flights", {"origin": o, "destination": city, "day": day, "slot": slot}),
             Call.make("book_flight", {"flight": f.id}))
    return text, calls, f.code, "code"


BASIC: dict[str, Family] = {"weather_temp": weather_temp, "weather_condition": weather_condition,
                            "convert": convert, "book_slot": book_slot}
HARD: dict[str, Family] = {"cheapest": cheapest, "event_weather": event_weather,
                           "flight_convert": flight_convert, "event_booking": event_booking}
_RUMOUR = ("A colleague guesses {v}, from an old note.", "Rumour says {v}; it is unconfirmed.",
           "An outdated page says {v}.")


def _wrong_value(rng: np.random.Generator, kind: str, answer: str) -> str:
    values = ENTITY_KINDS[kind]
    if kind == "money":  # same currency as the answer, so the decoy is tempting
        values = tuple(v for v in values if money_currency(v) == money_currency(answer))
    return pick(rng, values, exclude=(answer,))


def generate_task(split: str, seed: int, agent_index: int, train_mix: tuple[float, float, float]) -> Task:
    """The task of agent ``agent_index`` for an episode seed: independent across agents and splits."""
    rng = np.random.default_rng([seed, agent_index, _SPLIT_CODE[split]])
    group = split
    if split == "train":
        p = np.asarray(train_mix, dtype=float)
        group = ("basic", "hard", "adversarial")[int(rng.choice(3, p=p / p.sum()))]
    if group == "adversarial":
        families = {**BASIC, **HARD}
    else:
        families = BASIC if group == "basic" else HARD
    name = sorted(families)[int(rng.integers(len(families)))]
    world = make_world(rng)
    text, solution, answer, kind = families[name](rng, world)
    tools = HARD_TOOLS if name in HARD or group != "basic" else CORE_TOOLS
    if group == "adversarial":
        world.flaky.add(solution[int(rng.integers(len(solution)))].tool)
        text = f"{text} {_RUMOUR[int(rng.integers(len(_RUMOUR)))].format(v=_wrong_value(rng, kind, answer))}"
    return Task(name, group, text, tools, solution, answer, kind, world)
