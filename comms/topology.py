"""Communication topologies: who receives what each agent shares, as a networkx graph over agent ids.

A ``Topology`` is a small frozen spec (kind plus parameters) that ``build`` turns into a graph for
any list of agent ids, so a curriculum that grows the team rebuilds the same spec for the new count.

Semantics. An edge ``u -> v`` means ``v`` receives what ``u`` shares. An undirected graph
(``nx.Graph``, the default) means every edge works both ways; ``directed=True`` gives an
``nx.DiGraph``. There are never self loops (an agent always sees its own observation).
``neighbours(graph, agent)`` lists the agents whose shares ``agent`` receives, sorted by agent
index; ``receivers(graph, agent)`` lists the agents that receive what ``agent`` shares.

Kinds (n agents, index i means ``agent_ids[i]``):

- ``full``: every pair (n(n-1)/2 edges; directed: both arcs of every pair).
- ``empty``: no edges (every agent on its own).
- ``line``: i - i+1 (n-1 edges; directed: i -> i+1, a pipeline). n=1: no edge; n=2: one edge.
- ``ring``: the line plus n-1 - 0 (n edges for n >= 3; directed: i -> i+1 mod n, n arcs for n >= 2).
  n=1: no edge; n=2: one undirected edge (the two ring edges coincide), two arcs when directed.
- ``star``: agent index 0 is the hub, linked to every other agent (n-1 edges, hub degree n-1;
  directed: hub -> leaf, a broadcast). n=1: the hub alone; n=2: one edge.
- ``grid``: agents fill ``grid_shape(n)`` row by row, 4-neighbour links (right and down when directed).
  The layout is the most square one: c = ceil(sqrt(n)) columns, r = ceil(n / c) rows, the last row
  possibly partial, so there are 2n - r - c edges (n=1: 1x1, no edge; n=2: 1x2; n=3: 2x2 less a cell;
  n=5: 2x3 less one; n=8: 3x3 less one).
- ``random``: Erdos-Renyi G(n, p): each pair (each ordered pair when directed) is an edge with
  probability ``p``, deterministic given (seed, n).
- ``small_world``: Watts-Strogatz: a ring lattice where each agent links to its k nearest agents
  (k/2 per side), each edge rewired with probability ``p``; deterministic given (seed, n). It needs
  n > k; for n <= k every agent would want more neighbours than exist, so the result is the full graph
  (which is also what the lattice gives at n = k + 1). Directed: both arcs of every edge.
- ``user``: the given ``edges`` (pairs of agent ids or of indices, mixed freely), or a networkx graph
  through ``Topology.from_graph``. Every edge must name an agent that exists at build time; agents
  no edge names are isolated (so a user graph does not grow with the team).

``draw(graph, path)`` writes a PNG picture of a graph (to log to MLflow).

Left out: channels (drop / delay / noise, size limits: ``comms/channel.py``) and the PettingZoo
wrapper that applies a topology to a scenario (``comms/wrapper.py``).
"""

from __future__ import annotations

import difflib
import math
import numbers
import re
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import networkx as nx

KINDS: tuple[str, ...] = ("full", "empty", "ring", "line", "star", "grid", "random", "small_world", "user")
DEFAULT_P: dict[str, float] = {"random": 0.5, "small_world": 0.1}
DEFAULT_K: int = 4
_AGENT_INDEX = re.compile(r"^agent_(\d+)$")

Endpoint = str | int
Edge = tuple[Endpoint, Endpoint]


def _is_int(x: Any) -> bool:
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


@dataclass(frozen=True)
class Topology:
    """Spec of a communication graph; ``build(spec, agent_ids)`` makes the graph for any agent count."""

    kind: str
    """One of ``KINDS``: full, empty, ring, line, star, grid, random, small_world, user."""
    directed: bool = False
    """True: one-way arcs (u -> v: v receives what u shares) in an nx.DiGraph; False: both ways."""
    p: float | None = None
    """random: edge probability (None: 0.5); small_world: rewiring probability (None: 0.1)."""
    k: int | None = None
    """small_world only: even number of nearest agents each agent links to (None: ``DEFAULT_K`` = 4)."""
    seed: int = 0
    """Seed of random and small_world (same seed and agent count, same graph); other kinds ignore it."""
    edges: tuple[Edge, ...] = ()
    """user only: pairs (u, v) of agent ids or agent indices; u -> v when directed."""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            close = difflib.get_close_matches(str(self.kind), KINDS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(f"unknown topology kind {self.kind!r}{hint}; choose one of {', '.join(KINDS)}")
        if not isinstance(self.directed, bool):
            raise ValueError(f"directed must be True or False, got {self.directed!r}")
        if self.p is not None:
            if self.kind not in DEFAULT_P:
                raise ValueError(f"p only applies to random and small_world, not {self.kind!r}; drop it")
            if isinstance(self.p, bool) or not isinstance(self.p, int | float) or not 0.0 <= self.p <= 1.0:
                raise ValueError(f"p must be a probability in [0, 1], got {self.p!r}")
            object.__setattr__(self, "p", float(self.p))
        if self.k is not None:
            if self.kind != "small_world":
                raise ValueError(f"k only applies to small_world, not {self.kind!r}; drop it")
            if not _is_int(self.k) or self.k < 2 or self.k % 2:
                raise ValueError(f"k must be an even int >= 2 (k/2 neighbours on each side), got {self.k!r}")
            object.__setattr__(self, "k", int(self.k))
        if not _is_int(self.seed) or self.seed < 0:
            raise ValueError(f"seed must be a non-negative int, got {self.seed!r}")
        object.__setattr__(self, "seed", int(self.seed))
        if self.edges and self.kind != "user":
            raise ValueError(f"edges only apply to kind 'user', not {self.kind!r}; "
                             "use kind='user' or drop them")
        object.__setattr__(self, "edges", _check_edges(self.edges))

    @property
    def edge_probability(self) -> float:
        """The p in effect (the kind's default when ``p`` is None)."""
        return self.p if self.p is not None else DEFAULT_P.get(self.kind, 0.0)

    @property
    def neighbours_k(self) -> int:
        """The k in effect for small_world (``DEFAULT_K`` when ``k`` is None)."""
        return self.k if self.k is not None else DEFAULT_K

    @classmethod
    def from_graph(cls, graph: nx.Graph, directed: bool | None = None) -> Topology:
        """A user topology from a networkx graph whose nodes are agent ids or indices."""
        if not isinstance(graph, nx.Graph):
            raise ValueError(f"from_graph takes a networkx graph, got {type(graph).__name__}")
        return cls("user", directed=graph.is_directed() if directed is None else directed,
                   edges=tuple((u, v) for u, v in graph.edges()))

    @classmethod
    def parse(cls, text: str) -> Topology:
        """Parse ``"ring"``, ``"star:directed"``, ``"random:p=0.3,seed=1"``, ``"small_world:k=4,p=0.1"``,
        ``"user:edges=0-1;1-2,directed=true"`` (edges: ``u-v`` pairs split by ``;``, digits are indices)."""
        if not isinstance(text, str) or not text.strip():
            raise ValueError("topology spec must be a non-empty string like 'ring' or 'random:p=0.3', "
                             f"got {text!r}")
        kind, _, rest = text.strip().partition(":")
        kwargs: dict[str, Any] = {}
        for item in filter(None, (s.strip() for s in rest.split(","))):
            key, eq, value = (s.strip() for s in item.partition("="))
            if key == "directed":
                kwargs[key] = _parse_bool(value) if eq else True
            elif key in ("p", "k", "seed", "edges") and eq:
                kwargs[key] = _parse_value(key, value)
            else:
                raise ValueError(f"bad topology option {item!r} in {text!r}; use key=value with keys "
                                 "directed, p, k, seed, edges")
        return cls(kind.strip().lower().replace("-", "_"), **kwargs)

    def __str__(self) -> str:
        """The spec as a string that ``Topology.parse`` reads back (for CLI flags and MLflow params)."""
        parts = ["directed=true"] if self.directed else []
        if self.p is not None:
            parts.append(f"p={self.p!r}")
        if self.k is not None:
            parts.append(f"k={self.k}")
        if self.seed:
            parts.append(f"seed={self.seed}")
        if self.edges:
            parts.append("edges=" + ";".join(f"{u}-{v}" for u, v in self.edges))
        return self.kind + (":" + ",".join(parts) if parts else "")


def _check_edges(edges: Iterable[Any]) -> tuple[Edge, ...]:
    if isinstance(edges, str | bytes) or not isinstance(edges, Iterable):
        raise ValueError(f"edges must be a sequence of (u, v) pairs, got {edges!r}")
    out: list[Edge] = []
    for edge in edges:
        if isinstance(edge, str | bytes) or not isinstance(edge, Iterable) or len(pair := tuple(edge)) != 2:
            raise ValueError(f"each edge must be a pair (u, v) of agent ids or indices, got {edge!r}")
        for end in pair:
            if not (isinstance(end, str) and end) and not (_is_int(end) and end >= 0):
                raise ValueError(f"edge {pair!r}: endpoints must be agent ids (str) or indices (int >= 0), "
                                 f"got {end!r}")
        pair = tuple(int(end) if _is_int(end) else end for end in pair)
        if pair[0] == pair[1]:
            raise ValueError(f"edge {pair!r} is a self loop; remove it "
                             "(an agent always sees its own observation)")
        out.append(pair)
    return tuple(out)


def _parse_bool(value: str) -> bool:
    v = value.lower()
    if v in ("true", "1", "yes"):
        return True
    if v in ("false", "0", "no"):
        return False
    raise ValueError(f"directed must be true or false, got {value!r}")


def _parse_value(key: str, value: str) -> Any:
    try:
        if key == "p":
            return float(value)
        if key in ("k", "seed"):
            return int(value)
    except ValueError:
        what = "number" if key == "p" else "whole number"
        raise ValueError(f"{key} must be a {what}, got {value!r}") from None
    pairs = []
    for item in filter(None, (s.strip() for s in value.split(";"))):
        ends = [s.strip() for s in item.split("-")]
        if len(ends) != 2 or not all(ends):
            raise ValueError(f"edge {item!r} must look like u-v (agent ids or indices), "
                             "e.g. 0-1 or agent_0-agent_1")
        pairs.append(tuple(int(e) if e.isdigit() else e for e in ends))
    return tuple(pairs)


def grid_shape(n: int) -> tuple[int, int]:
    """The most square (rows, cols) holding n agents: cols = ceil(sqrt(n)), rows = ceil(n / cols)."""
    if not _is_int(n) or n < 1:
        raise ValueError(f"grid needs n >= 1 agents, got {n!r}")
    cols = math.isqrt(n - 1) + 1  # ceil(sqrt(n)) without floating point
    return -(-n // cols), cols


def _agent_list(agent_ids: int | Sequence[str]) -> list[str]:
    if _is_int(agent_ids):
        if agent_ids < 1:
            raise ValueError(f"a topology needs at least 1 agent, got n={agent_ids}")
        return [f"agent_{i}" for i in range(int(agent_ids))]
    if isinstance(agent_ids, str) or not isinstance(agent_ids, Sequence):
        raise ValueError(f"agent_ids must be a list of agent id strings or an agent count, got {agent_ids!r}")
    ids = list(agent_ids)
    if not ids:
        raise ValueError("agent_ids is empty; a topology needs at least 1 agent")
    if not all(isinstance(a, str) and a for a in ids):
        raise ValueError(f"agent ids must be non-empty strings, got {ids!r}")
    if len(set(ids)) != len(ids):
        raise ValueError(f"agent ids must be unique, got {ids!r}")
    return ids


def _index_edges(spec: Topology, n: int) -> list[tuple[int, int]]:
    """Edges of the kind as (i, j) index pairs; for directed kinds, arcs i -> j."""
    kind, d = spec.kind, spec.directed
    if kind == "empty":
        return []
    if kind == "full":
        return [(i, j) for i in range(n) for j in range(n) if i != j and (d or i < j)]
    if kind == "line":
        return [(i, i + 1) for i in range(n - 1)]
    if kind == "ring":
        return [(i, (i + 1) % n) for i in range(n)] if n > 1 else []
    if kind == "star":
        return [(0, i) for i in range(1, n)]
    if kind == "grid":
        _, cols = grid_shape(n)
        return [(i, i + 1) for i in range(n - 1) if (i + 1) % cols] + [(i, i + cols) for i in range(n - cols)]
    if kind == "random":
        g = nx.gnp_random_graph(n, spec.edge_probability, seed=spec.seed, directed=d)
        return sorted(g.edges())
    if kind == "small_world":
        k = spec.neighbours_k
        if n <= k:  # not enough agents for k neighbours each: the lattice clipped to n is the full graph
            g = nx.complete_graph(n)
        else:
            g = nx.watts_strogatz_graph(n, k, spec.edge_probability, seed=spec.seed)
        pairs = sorted((min(u, v), max(u, v)) for u, v in g.edges())
        return pairs + [(v, u) for u, v in pairs] if d else pairs
    raise AssertionError(f"unhandled kind {kind!r}")  # pragma: no cover - KINDS is checked in __post_init__


def _resolve(end: Endpoint, ids: list[str], edge: Edge) -> str:
    if isinstance(end, int):
        if end >= len(ids):
            raise ValueError(f"edge {edge!r} names index {end}, but there are only {len(ids)} agents "
                             f"(indices 0..{len(ids) - 1}); drop the edge or add agents")
        return ids[end]
    if end not in ids:
        shown = ids if len(ids) <= 10 else [*ids[:10], "..."]
        raise ValueError(f"edge {edge!r} names unknown agent {end!r}; known agents: {shown}")
    return end


def as_topology(spec: Topology | str | nx.Graph) -> Topology:
    """A `Topology` from itself, a spec string (`Topology.parse`) or a networkx graph (`Topology.from_graph`)."""
    if isinstance(spec, str):
        return Topology.parse(spec)
    if isinstance(spec, nx.Graph):
        return Topology.from_graph(spec)
    if not isinstance(spec, Topology):
        raise ValueError("topology must be a Topology, a networkx graph or a string (the spec must be like "
                         f"'ring' or 'random:p=0.3'), got {type(spec).__name__}")
    return spec


def build(spec: Topology | str | nx.Graph, agent_ids: int | Sequence[str]) -> nx.Graph | nx.DiGraph:
    """The graph of ``spec`` over ``agent_ids`` (or ``agent_0..agent_{n-1}`` for an int n).

    ``spec`` may also be a string for ``Topology.parse`` or a networkx graph (``Topology.from_graph``).
    Nodes carry ``index`` (their position in ``agent_ids``); ``graph.graph`` holds ``topology``
    (the spec string), ``kind`` and, for grids, ``grid_shape``.
    """
    spec = as_topology(spec)
    ids = _agent_list(agent_ids)
    graph: nx.Graph = nx.DiGraph() if spec.directed else nx.Graph()
    graph.graph.update(topology=str(spec), kind=spec.kind)
    if spec.kind == "grid":
        graph.graph["grid_shape"] = grid_shape(len(ids))
    graph.add_nodes_from((a, {"index": i}) for i, a in enumerate(ids))
    if spec.kind == "user":
        for edge in spec.edges:
            u, v = (_resolve(end, ids, edge) for end in edge)
            if u == v:
                raise ValueError(f"edge {edge!r} is a self loop on {u!r}; remove it")
            graph.add_edge(u, v)
    else:
        graph.add_edges_from((ids[i], ids[j]) for i, j in _index_edges(spec, len(ids)))
    return graph


def _order(graph: nx.Graph, node: Hashable) -> tuple[int, int, str]:
    index = graph.nodes[node].get("index")
    if _is_int(index):
        return (0, index, str(node))
    m = _AGENT_INDEX.match(str(node))
    return (0, int(m.group(1)), str(node)) if m else (1, 0, str(node))


def _check_agent(graph: nx.Graph, agent: str) -> None:
    if agent not in graph:
        known = sorted(graph, key=lambda v: _order(graph, v))
        raise ValueError(f"agent {agent!r} is not in the topology; its agents are {known}")


def neighbours(graph: nx.Graph, agent: str) -> list[str]:
    """The agents whose shares ``agent`` receives (its in-neighbours), sorted by agent index."""
    _check_agent(graph, agent)
    found = graph.predecessors(agent) if graph.is_directed() else graph.neighbors(agent)
    return sorted(found, key=lambda v: _order(graph, v))


def receivers(graph: nx.Graph, agent: str) -> list[str]:
    """The agents that receive what ``agent`` shares (its out-neighbours), sorted by agent index."""
    _check_agent(graph, agent)
    found = graph.successors(agent) if graph.is_directed() else graph.neighbors(agent)
    return sorted(found, key=lambda v: _order(graph, v))


def _layout(graph: nx.Graph) -> dict[Hashable, tuple[float, float]]:
    nodes = sorted(graph, key=lambda v: _order(graph, v))
    kind = graph.graph.get("kind")
    if kind == "grid" and "grid_shape" in graph.graph:
        cols = graph.graph["grid_shape"][1]
        return {v: (float(i % cols), -float(i // cols)) for i, v in enumerate(nodes)}
    if kind == "line":
        return {v: (float(i), 0.0) for i, v in enumerate(nodes)}
    if kind == "star" and len(nodes) > 2:
        return nx.shell_layout(graph, nlist=[nodes[:1], nodes[1:]])
    return nx.circular_layout(nodes) if len(nodes) > 1 else {v: (0.0, 0.0) for v in nodes}


def draw(graph: nx.Graph, path: str | Path, title: str | None = None) -> Path:
    """Write a PNG picture of ``graph`` to ``path`` (parents created) and return the path."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # lazy: Agg, no display, no pyplot state
    from matplotlib.figure import Figure

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig = Figure(figsize=(4, 4), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    nx.draw_networkx(graph, pos=_layout(graph), ax=ax, node_color="#9ecae1", node_size=700, font_size=7)
    ax.set_title(title if title is not None else str(graph.graph.get("topology", "")), fontsize=9)
    ax.margins(0.15)
    ax.set_axis_off()
    fig.savefig(path, format="png")
    return path


__all__ = ["DEFAULT_K", "DEFAULT_P", "KINDS", "Topology", "build", "draw", "grid_shape", "neighbours",
           "receivers"]
