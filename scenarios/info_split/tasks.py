"""Team task generators of ``info_split``: one tool-use question per episode, from a seed.

A team task is a question about a fresh tool-use ``World`` (reused from ``scenarios.tool_use``),
the *facts* the question leaves out (single entities such as the event or the payment
currency, dealt to agents by ``roles.py`` and never written in the question), the solution
path (the useful calls in dependency order) and the single correct answer entity.

- ``basic``: one hand-off stage. Facts -> one call (``split_weather``: trip city and trip day
  -> weather; ``split_convert``: budget and payment currency -> conversion), or call -> call
  with the route in the question (``book_relay``: flights -> booking; ``flight_budget``:
  flights -> conversion into the payment currency, a fact).
- ``hard``: two or three dependent stages. ``event_weather`` (event -> calendar -> weather),
  ``trip_booking`` (trip city and day -> flights -> booking), ``event_booking`` (event ->
  calendar -> flights -> booking).
- ``train``: a seeded mixture of the two groups (option ``train_mix``).

The task depends on the seed and split only, not on the number of agents, so one seed is the
same question at every team size. It leaves out who holds what (``roles.py``) and the
environment loop (``env.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from scenarios.tool_use.tasks import Call, pick
from scenarios.tool_use.world import (
    CITIES,
    CURRENCIES,
    DAYS,
    ENTITY_KINDS,
    EVENTS,
    SLOTS,
    Flight,
    World,
    convert_money,
    make_world,
    money_currency,
)

SPLITS = ("train", "basic", "hard")
SPLIT_CODE = {s: i for i, s in enumerate(SPLITS)}

Facts = tuple[tuple[str, str], ...]


@dataclass
class TeamTask:
    family: str
    group: str
    text: str
    facts: Facts  # (label, entity) pairs, dealt to agents; never in ``text``
    solution: tuple[Call, ...]
    answer: str
    answer_kind: str
    world: World


def _weather_answer(rng: np.random.Generator) -> tuple[str, str, int]:
    # (answer kind, words for it, index in the weather tuple (condition, temperature))
    return ("temperature", "temperature", 1) if rng.random() < 0.5 else ("condition", "weather condition", 0)


def _slot_flight(rng: np.random.Generator, w: World, slot: str, origin: str | None = None,
                 destination: str | None = None, day: str | None = None) -> tuple[str, str, str, Flight]:
    """Add a route of 3-4 flights, one per slot and always one in ``slot``; return it and that flight."""
    origin = origin or pick(rng, CITIES, exclude=(destination,) if destination else ())
    destination = destination or pick(rng, CITIES, exclude=(origin,))
    day = day or pick(rng, DAYS)
    others = [s for s in SLOTS if s != slot]
    chosen = {slot, *(others[int(i)] for i in rng.choice(len(others), size=int(rng.integers(2, 4)), replace=False))}
    slots = tuple(s for s in SLOTS if s in chosen)
    flights = w.add_route(rng, origin, destination, day, slots, pick(rng, CURRENCIES))
    return origin, destination, day, next(f for f in flights if f.slot == slot)


Family = Callable[[np.random.Generator, World], tuple[str, Facts, tuple[Call, ...], str, str]]


def split_weather(rng: np.random.Generator, w: World):
    city, day = pick(rng, CITIES), pick(rng, DAYS)
    kind, words, idx = _weather_answer(rng)
    text = f"What {words} is forecast in the trip city on the trip day? Answer with the {words}."
    calls = (Call.make("get_weather", {"city": city, "day": day}),)
    return text, (("trip city", city), ("trip day", day)), calls, w.weather[(city, day)][idx], kind


def split_convert(rng: np.random.Generator, w: World):
    amount = pick(rng, ENTITY_KINDS["money"])
    to = pick(rng, CURRENCIES, exclude=(money_currency(amount),))
    text = "How much is the budget in the payment currency? Answer with the amount."
    calls = (Call.make("convert", {"amount": amount, "to": to}),)
    return text, (("budget", amount), ("payment currency", to)), calls, convert_money(amount, to), "money"


def book_relay(rng: np.random.Generator, w: World):
    slot = pick(rng, SLOTS)
    o, d, day, f = _slot_flight(rng, w, slot)
    text = f"Book the {slot} flight from {o} to {d} on {day}. Answer with the booking code."
    calls = (Call.make("find_flights", {"origin": o, "destination": d, "day": day, "slot": slot}),
             Call.make("book_flight", {"flight": f.id}))
    return text, (), calls, f.code, "code"


def flight_budget(rng: np.random.Generator, w: World):
    slot = pick(rng, SLOTS)
    o, d, day, f = _slot_flight(rng, w, slot)
    to = pick(rng, CURRENCIES, exclude=(money_currency(f.price),))
    text = f"What does the {slot} flight from {o} to {d} on {day} cost in the payment currency? Answer with the amount."
    calls = (Call.make("find_flights", {"origin": o, "destination": d, "day": day, "slot": slot}),
             Call.make("convert", {"amount": f.price, "to": to}))
    return text, (("payment currency", to),), calls, convert_money(f.price, to), "money"


def event_weather(rng: np.random.Generator, w: World):
    event = pick(rng, EVENTS)
    city, day = w.events[event]
    kind, words, idx = _weather_answer(rng)
    text = f"What {words} is forecast where the event takes place, on its day? Answer with the {words}."
    calls = (Call.make("get_event", {"name": event}), Call.make("get_weather", {"city": city, "day": day}))
    return text, (("event", event),), calls, w.weather[(city, day)][idx], kind


def trip_booking(rng: np.random.Generator, w: World):
    slot = pick(rng, SLOTS)
    o, d, day, f = _slot_flight(rng, w, slot)
    text = f"Book the {slot} flight from {o} to the trip city on the trip day. Answer with the booking code."
    calls = (Call.make("find_flights", {"origin": o, "destination": d, "day": day, "slot": slot}),
             Call.make("book_flight", {"flight": f.id}))
    return text, (("trip city", d), ("trip day", day)), calls, f.code, "code"


def event_booking(rng: np.random.Generator, w: World):
    event, slot = pick(rng, EVENTS), pick(rng, SLOTS)
    city, day = w.events[event]
    o, _, _, f = _slot_flight(rng, w, slot, destination=city, day=day)
    text = f"Book the {slot} flight from {o} to the city of the event, on its day. Answer with the booking code."
    calls = (Call.make("get_event", {"name": event}),
             Call.make("find_flights", {"origin": o, "destination": city, "day": day, "slot": slot}),
             Call.make("book_flight", {"flight": f.id}))
    return text, (("event", event),), calls, f.code, "code"


BASIC: dict[str, Family] = {"split_weather": split_weather, "split_convert": split_convert,
                            "book_relay": book_relay, "flight_budget": flight_budget}
HARD: dict[str, Family] = {"event_weather": event_weather, "trip_booking": trip_booking,
                           "event_booking": event_booking}


def generate_task(split: str, seed: int, train_mix: tuple[float, float]) -> TeamTask:
    """The team task of an episode seed on ``split`` (independent of the number of agents)."""
    rng = np.random.default_rng([seed, SPLIT_CODE[split]])
    group = split
    if split == "train":
        p = np.asarray(train_mix, dtype=float)
        group = ("basic", "hard")[int(rng.choice(2, p=p / p.sum()))]
    families = BASIC if group == "basic" else HARD
    name = sorted(families)[int(rng.integers(len(families)))]
    world = make_world(rng)
    text, facts, solution, answer, kind = families[name](rng, world)
    return TeamTask(name, group, text, facts, solution, answer, kind, world)
