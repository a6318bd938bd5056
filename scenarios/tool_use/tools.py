"""Tools of the tool-use scenario: JSON-schema declarations and their mock backends.

Tools are declared the way agent platforms declare them (name, description, JSON-schema
parameters with types, enums and ``required``) so the same list can be handed to a real
chat template. Backends read the task's ``World`` and return one line of text.
``call_tool`` runs a backend under a crash guard and a real time limit (``deadline.py``): a backend
that raises is a harness ``error``; one that has not answered within the limit is a ``timeout`` at
the limit (the caller stops waiting; a hung backend does not hang the run); neither escapes. The
built-in backends are pure lookups in the world that cannot block, so they run on the caller's thread
(the hand-off to the deadline worker would cost more than the call); any backend put in their place
runs under the limit.

It leaves out argument validation against the agent's text (``actions.py``) and rewards
(``env.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from scenarios.tool_use.deadline import DeadlineExceeded, call_with_deadline
from scenarios.tool_use.world import ENTITY_KINDS, World, convert_money


@dataclass(frozen=True)
class Param:
    name: str
    kind: str  # entity kind of the value (a key of ENTITY_KINDS)
    description: str
    required: bool = True


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    params: tuple[Param, ...]

    def schema(self) -> dict:
        """The OpenAI-style function declaration of this tool."""
        props = {p.name: {"type": "string", "enum": list(ENTITY_KINDS[p.kind]), "description": p.description}
                 for p in self.params}
        return {"type": "function", "function": {
            "name": self.name, "description": self.description,
            "parameters": {"type": "object", "properties": props,
                           "required": [p.name for p in self.params if p.required],
                           "additionalProperties": False}}}

    def signature(self) -> str:
        """Compact form for the observation: ``find_flights(origin, destination, day, slot?)``."""
        return f"{self.name}({', '.join(p.name + ('' if p.required else '?') for p in self.params)})"

    def param(self, name: str) -> Param | None:
        return next((p for p in self.params if p.name == name), None)


_TOOL_LIST = (
    ToolSpec("get_weather", "Weather forecast (condition and temperature) for a city on a day.",
             (Param("city", "city", "City name."), Param("day", "day", "Day of the week."))),
    ToolSpec("find_flights", "Flights on a route and day; with slot, only the flight in that slot.",
             (Param("origin", "city", "Departure city."), Param("destination", "city", "Arrival city."),
              Param("day", "day", "Day of the week."),
              Param("slot", "slot", "Time of day of the flight.", required=False))),
    ToolSpec("book_flight", "Book a flight by id; returns the booking code.",
             (Param("flight", "flight", "Flight id."),)),
    ToolSpec("convert", "Convert an amount of money to another currency.",
             (Param("amount", "money", "Amount with its currency."), Param("to", "currency", "Target currency."))),
    ToolSpec("get_event", "Calendar lookup: the city and day of an event.",
             (Param("name", "event", "Event name."),)),
    # Distractors: listed in hard tasks, never useful.
    ToolSpec("get_news", "Local news headlines for a city.", (Param("city", "city", "City name."),)),
    ToolSpec("get_hotels", "Hotel availability in a city on a day.",
             (Param("city", "city", "City name."), Param("day", "day", "Day of the week."))),
    ToolSpec("get_time", "Office hours in a city.", (Param("city", "city", "City name."),)),
)
TOOLS: dict[str, ToolSpec] = {t.name: t for t in _TOOL_LIST}
CORE_TOOLS = ("get_weather", "find_flights", "book_flight", "convert")
HARD_TOOLS = (*CORE_TOOLS, "get_event", "get_news", "get_hotels", "get_time")


def _get_weather(w: World, a: dict[str, str]) -> str:
    cond, temp = w.weather[(a["city"], a["day"])]
    return f"weather {a['city']} {a['day']}: {cond} {temp}"


def _find_flights(w: World, a: dict[str, str]) -> str:
    flights = w.find_flights(a["origin"], a["destination"], a["day"])
    if "slot" in a:
        flights = [f for f in flights if f.slot == a["slot"]]
    route = f"{a['origin']} to {a['destination']} {a['day']}" + (f" {a['slot']}" if "slot" in a else "")
    if not flights:
        return f"flights {route}: none found"
    if "slot" in a:  # the slot is an argument, so the result names only the matching flight
        return f"flights {route}: " + "; ".join(f"{f.id} {f.price}" for f in flights)
    return f"flights {route}: " + "; ".join(f"{f.id} {f.slot} {f.price}" for f in flights)


def _book_flight(w: World, a: dict[str, str]) -> str:
    f = w.flight(a["flight"])
    if f is None:
        return f"booking {a['flight']}: no such flight"
    return f"booked {f.id}: code {f.code}"


def _convert(w: World, a: dict[str, str]) -> str:
    return f"{a['amount']} = {convert_money(a['amount'], a['to'])}"


def _get_event(w: World, a: dict[str, str]) -> str:
    city, day = w.events[a["name"]]
    return f"event {a['name']}: {city} {day}"


def _get_news(w: World, a: dict[str, str]) -> str:
    return f"news {a['city']}: nothing unusual"


def _get_hotels(w: World, a: dict[str, str]) -> str:
    return f"hotels {a['city']} {a['day']}: rooms available"


def _get_time(w: World, a: dict[str, str]) -> str:
    return f"office hours {a['city']}: nine to five"


# Looked up at call time (not bound at import) so tests can monkeypatch a backend.
BACKENDS: dict[str, Callable[[World, dict[str, str]], str]] = {
    "get_weather": _get_weather, "find_flights": _find_flights, "book_flight": _book_flight,
    "convert": _convert, "get_event": _get_event, "get_news": _get_news,
    "get_hotels": _get_hotels, "get_time": _get_time,
}


_BUILT_IN = frozenset(BACKENDS.values())


@dataclass(frozen=True)
class ToolResult:
    text: str
    fault: str | None = None  # "error" or "timeout": a harness fault that ends the episode
    transient: bool = False  # the service failed this once; the same call succeeds when repeated


def call_tool(world: World, name: str, args: dict[str, str], timeout_s: float) -> ToolResult:
    """Run a validated call against the world; never raises."""
    if name in world.flaky:
        world.flaky.discard(name)  # fails once, then recovers
        return ToolResult(f"tool failed: {name} is temporarily unavailable, retry the same call", transient=True)
    backend, call_args = BACKENDS[name], dict(args)
    try:
        if backend in _BUILT_IN:
            text = backend(world, call_args)
        else:
            text = call_with_deadline(lambda: backend(world, call_args), timeout_s)
    except DeadlineExceeded:
        return ToolResult(f"tool {name} timed out; episode ended", fault="timeout")
    except Exception as exc:  # noqa: BLE001 - a broken backend is a harness fault, not the agent's
        return ToolResult(f"tool {name} crashed ({type(exc).__name__}); episode ended", fault="error")
    return ToolResult(str(text))
