"""The seeded mock world behind the tool-use scenario: entities, weather, events, flights, money.

Every value an agent must pass on or answer is an *entity*: one distinctive token (``Paris``,
``Tue``, ``21C``, ``FL07``, ``BK12``, ``230USD``) that never occurs inside an ordinary word of
the task templates, so a tokenizer can keep it whole and a tiny model only has to copy one
token. Money uses a fixed set of amounts and FIXED exchange rates, so every conversion result
is itself an entity. ``entity_vocabulary()`` is constant (no seed involved).

It leaves out tools, tasks and the environment loop: ``tools.py`` reads this world,
``tasks.py`` fills it, ``env.py`` runs it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

CITIES = ("Berlin", "Boston", "Cairo", "Delhi", "Denver", "Dubai", "Lima", "Madrid",
          "Oslo", "Paris", "Prague", "Rome", "Seoul", "Sydney", "Tokyo", "Vienna")
DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
TEMPERATURES = tuple(f"{t}C" for t in range(0, 41))
CONDITIONS = ("cloudy", "foggy", "rainy", "snowy", "sunny", "windy")
SLOTS = ("morning", "noon", "evening", "night")
CURRENCIES = ("USD", "EUR", "GBP", "JPY")
# Fixed world exchange rates against USD; with prices on a 20 USD grid every product is an integer.
RATES = {"USD": 1.0, "EUR": 0.9, "GBP": 0.8, "JPY": 150.0}
BASE_PRICES_USD = tuple(range(120, 420, 20))
FLIGHT_IDS = tuple(f"FL{i:02d}" for i in range(1, 100))
BOOKING_CODES = tuple(f"BK{i:02d}" for i in range(1, 100))
EVENTS = ("Carnival", "Concert", "Derby", "Expo", "Festival", "Gala", "Jamboree", "Marathon",
          "Opera", "Parade", "Premiere", "Rally", "Regatta", "Summit", "Symposium", "Tournament")


def money(base_index: int, currency: str) -> str:
    """The money entity for price ``BASE_PRICES_USD[base_index]`` expressed in ``currency``."""
    return f"{round(BASE_PRICES_USD[base_index] * RATES[currency])}{currency}"


MONEY = tuple(money(i, c) for c in CURRENCIES for i in range(len(BASE_PRICES_USD)))
_MONEY_PARTS = {money(i, c): (i, c) for c in CURRENCIES for i in range(len(BASE_PRICES_USD))}

ENTITY_KINDS: dict[str, tuple[str, ...]] = {
    "city": CITIES, "day": DAYS, "temperature": TEMPERATURES, "condition": CONDITIONS,
    "slot": SLOTS, "currency": CURRENCIES, "money": MONEY, "flight": FLIGHT_IDS,
    "code": BOOKING_CODES, "event": EVENTS,
}
KIND_OF: dict[str, str] = {e: kind for kind, values in ENTITY_KINDS.items() for e in values}
assert len(KIND_OF) == sum(len(v) for v in ENTITY_KINDS.values()), "an entity belongs to two kinds"


def entity_vocabulary() -> list[str]:
    """Every entity any tool-use task can show, sorted; independent of seeds and options."""
    return sorted(KIND_OF)


def convert_money(amount: str, currency: str) -> str:
    """Convert a money entity to ``currency`` at the fixed world rates (result is an entity)."""
    base_index, _ = _MONEY_PARTS[amount]
    return money(base_index, currency)


def money_value_usd(amount: str) -> int:
    """The amount's value in USD, for comparing prices."""
    return BASE_PRICES_USD[_MONEY_PARTS[amount][0]]


def money_currency(amount: str) -> str:
    return _MONEY_PARTS[amount][1]


@dataclass(frozen=True)
class Flight:
    id: str
    origin: str
    destination: str
    day: str
    slot: str
    price: str
    code: str  # the booking code book_flight returns for this flight


@dataclass
class World:
    """One task's world: full weather and event tables, flights only on the task's routes."""

    weather: dict[tuple[str, str], tuple[str, str]]  # (city, day) -> (condition, temperature)
    events: dict[str, tuple[str, str]]  # event -> (city, day)
    flights: list[Flight] = field(default_factory=list)
    flaky: set[str] = field(default_factory=set)  # tools whose next call fails once ("retry")
    _free_ids: list[str] = field(default_factory=list)
    _free_codes: list[str] = field(default_factory=list)

    def add_route(self, rng: np.random.Generator, origin: str, destination: str, day: str,
                  slots: tuple[str, ...], currency: str) -> list[Flight]:
        """Add one flight per slot on a route, with distinct prices (so 'cheapest' is unique)."""
        prices = rng.choice(len(BASE_PRICES_USD), size=len(slots), replace=False)
        added = []
        for slot, p in zip(slots, prices, strict=True):
            f = Flight(self._free_ids.pop(), origin, destination, day, slot, money(int(p), currency),
                       self._free_codes.pop())
            self.flights.append(f)
            added.append(f)
        return added

    def find_flights(self, origin: str, destination: str, day: str) -> list[Flight]:
        return [f for f in self.flights if (f.origin, f.destination, f.day) == (origin, destination, day)]

    def flight(self, flight_id: str) -> Flight | None:
        return next((f for f in self.flights if f.id == flight_id), None)


def make_world(rng: np.random.Generator) -> World:
    """A fresh random world: weather for every city and day, a place and day for every event."""
    weather = {}
    for city in CITIES:
        for day in DAYS:
            cond = CONDITIONS[int(rng.integers(len(CONDITIONS)))]
            lo, hi = (0, 6) if cond == "snowy" else (4, 41)  # snow only when it is cold: keeps text plausible
            weather[(city, day)] = (cond, f"{int(rng.integers(lo, hi))}C")
    events = {e: (CITIES[int(rng.integers(len(CITIES)))], DAYS[int(rng.integers(len(DAYS)))]) for e in EVENTS}
    # Ids and codes come from shuffled pools so that they carry no information about the answer.
    ids = [FLIGHT_IDS[i] for i in rng.permutation(len(FLIGHT_IDS))]
    codes = [BOOKING_CODES[i] for i in rng.permutation(len(BOOKING_CODES))]
    return World(weather=weather, events=events, _free_ids=ids, _free_codes=codes)
