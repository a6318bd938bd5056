"""Topologies: edge counts per kind and size, neighbours, seeding, user graphs, validation, drawing."""

import networkx as nx
import pytest

from comms import DEFAULT_K, KINDS, Topology, build, draw, grid_shape, neighbours, receivers

SIZES = (1, 2, 3, 5, 8)


def ids(n: int) -> list[str]:
    return [f"agent_{i}" for i in range(n)]


def expected_edges(kind: str, n: int) -> int:
    """Undirected edge count of each deterministic kind."""
    rows, cols = grid_shape(n)
    return {
        "full": n * (n - 1) // 2,
        "empty": 0,
        "line": max(n - 1, 0),
        "ring": n if n >= 3 else n - 1,
        "star": n - 1,
        "grid": 2 * n - rows - cols,
    }[kind]


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("kind", ["full", "empty", "line", "ring", "star", "grid"])
def test_deterministic_kinds_edge_counts(kind, n):
    g = build(Topology(kind), ids(n))
    assert isinstance(g, nx.Graph) and not g.is_directed()
    assert list(g.nodes) == ids(n)
    assert g.number_of_edges() == expected_edges(kind, n)
    assert nx.number_of_selfloops(g) == 0
    if kind == "full":
        assert all(d == n - 1 for _, d in g.degree)
    if kind == "ring" and n >= 3:
        assert all(d == 2 for _, d in g.degree) and nx.is_connected(g)
    if kind == "line" and n >= 2:
        assert nx.is_connected(g) and sorted(d for _, d in g.degree)[:2] == [1, 1] and nx.diameter(g) == n - 1
    if kind == "star":
        assert g.degree["agent_0"] == n - 1
        assert all(g.degree[a] == 1 for a in ids(n)[1:])


@pytest.mark.parametrize("n", SIZES)
def test_random_and_small_world_build_at_every_size(n):
    seeded = (Topology("random", p=0.5, seed=3), Topology("small_world", k=2, p=0.3, seed=3),
              Topology("small_world"))
    for spec in seeded:
        g = build(spec, ids(n))
        assert list(g.nodes) == ids(n) and nx.number_of_selfloops(g) == 0
    assert build(Topology("random", p=1.0), n).number_of_edges() == n * (n - 1) // 2
    assert build(Topology("random", p=0.0), n).number_of_edges() == 0


def test_grid_layout_is_most_square():
    assert [grid_shape(n) for n in (1, 2, 3, 4, 5, 6, 8, 9, 10)] == [
        (1, 1), (1, 2), (2, 2), (2, 2), (2, 3), (2, 3), (3, 3), (3, 3), (3, 4)]
    g = build("grid", 8)  # 3x3 less one: rows [0 1 2] [3 4 5] [6 7]
    assert g.graph["grid_shape"] == (3, 3)
    assert neighbours(g, "agent_4") == ["agent_1", "agent_3", "agent_5", "agent_7"]
    assert neighbours(g, "agent_2") == ["agent_1", "agent_5"]
    assert neighbours(g, "agent_7") == ["agent_4", "agent_6"]
    assert max(d for _, d in g.degree) == 4
    with pytest.raises(ValueError, match="n >= 1"):
        grid_shape(0)


def test_small_sizes_are_well_defined():
    for kind in ("line", "ring", "star", "grid", "full"):
        assert build(kind, 1).number_of_edges() == 0
        assert set(build(kind, 2).edges) == {("agent_0", "agent_1")}
    assert build(Topology("ring", directed=True), 2).number_of_edges() == 2  # 0 -> 1 and 1 -> 0


def test_directed_neighbours_are_in_neighbours():
    ring = build(Topology("ring", directed=True), 5)
    assert isinstance(ring, nx.DiGraph) and ring.number_of_edges() == 5
    assert neighbours(ring, "agent_0") == ["agent_4"]  # 4 -> 0: agent_0 receives agent_4's shares
    assert receivers(ring, "agent_0") == ["agent_1"]
    line = build(Topology("line", directed=True), 3)
    assert neighbours(line, "agent_0") == [] and neighbours(line, "agent_2") == ["agent_1"]
    star = build(Topology("star", directed=True), 5)  # broadcast from the hub
    assert neighbours(star, "agent_0") == [] and receivers(star, "agent_0") == ids(5)[1:]
    assert all(neighbours(star, a) == ["agent_0"] for a in ids(5)[1:])
    undirected = build("ring", 5)
    assert neighbours(undirected, "agent_0") == ["agent_1", "agent_4"] == receivers(undirected, "agent_0")
    full = build(Topology("full", directed=True), 4)
    assert full.number_of_edges() == 12 and neighbours(full, "agent_2") == ["agent_0", "agent_1", "agent_3"]
    grid = build(Topology("grid", directed=True), 4)  # right and down
    assert set(grid.edges) == {("agent_0", "agent_1"), ("agent_2", "agent_3"), ("agent_0", "agent_2"),
                               ("agent_1", "agent_3")}
    sw = build(Topology("small_world", directed=True, k=2, seed=1), 6)
    assert sw.number_of_edges() == 2 * build(Topology("small_world", k=2, seed=1), 6).number_of_edges()


def test_neighbours_sorted_by_index_not_by_string():
    g = build("full", 12)
    assert neighbours(g, "agent_0") == ids(12)[1:]  # agent_2 before agent_10
    raw = nx.Graph([("agent_10", "agent_0"), ("agent_2", "agent_0")])  # not built by build: ids parsed
    assert neighbours(raw, "agent_0") == ["agent_2", "agent_10"]
    with pytest.raises(ValueError, match="not in the topology"):
        neighbours(g, "agent_99")


@pytest.mark.parametrize("kind,kw", [("random", {"p": 0.4}), ("small_world", {"k": 2, "p": 0.5})])
def test_seeded_kinds_deterministic_and_seed_sensitive(kind, kw):
    def edges(seed):
        return sorted(build(Topology(kind, seed=seed, **kw), 8).edges)

    assert edges(7) == edges(7)
    assert len({tuple(edges(s)) for s in range(6)}) > 1


def test_random_directed_uses_ordered_pairs():
    g = build(Topology("random", directed=True, p=0.5, seed=0), 8)
    assert isinstance(g, nx.DiGraph)
    assert any(not g.has_edge(v, u) for u, v in g.edges)  # some arcs are one-way
    assert build(Topology("random", directed=True, p=1.0), 4).number_of_edges() == 12


def test_small_world_falls_back_to_full_for_n_le_k():
    for n in range(1, DEFAULT_K + 2):  # up to n = k + 1 the lattice is already complete
        g = build(Topology("small_world", seed=5), n)
        assert g.number_of_edges() == n * (n - 1) // 2
    g = build(Topology("small_world", k=4, p=0.0), 8)  # no rewiring: the plain ring lattice
    assert all(d == 4 for _, d in g.degree) and g.number_of_edges() == 16


def test_user_edges_by_ids_and_by_indices():
    by_ids = build(Topology("user", edges=(("agent_0", "agent_2"), ("agent_2", "agent_1"))), 3)
    by_idx = build(Topology("user", edges=((0, 2), (2, 1))), 3)
    mixed = build(Topology("user", edges=[[0, "agent_2"], ("agent_2", 1)]), 3)
    assert {frozenset(e) for e in by_ids.edges} == {frozenset(e) for e in by_idx.edges}
    assert {frozenset(e) for e in mixed.edges} == {frozenset(e) for e in by_idx.edges}
    d = build(Topology("user", directed=True, edges=((0, 2), (2, 1))), 3)
    assert neighbours(d, "agent_1") == ["agent_2"] and neighbours(d, "agent_2") == ["agent_0"]
    assert neighbours(d, "agent_0") == []
    custom = build(Topology("user", edges=(("a", "b"),)), ["a", "b", "c"])
    assert neighbours(custom, "b") == ["a"] and neighbours(custom, "c") == []


def test_user_graph_from_networkx():
    g_in = nx.DiGraph([(0, 1), (1, 2)])
    spec = Topology.from_graph(g_in)
    assert spec.kind == "user" and spec.directed
    g = build(g_in, 4)
    assert set(g.edges) == {("agent_0", "agent_1"), ("agent_1", "agent_2")} and "agent_3" in g
    assert not build(nx.Graph([("agent_0", "agent_1")]), 2).is_directed()


@pytest.mark.parametrize("make,match", [
    (lambda: Topology("rng"), "did you mean 'ring'"),
    (lambda: Topology("hypercube"), "choose one of"),
    (lambda: Topology("random", p=1.5), r"p must be a probability in \[0, 1\]"),
    (lambda: Topology("random", p=-0.1), r"p must be a probability in \[0, 1\]"),
    (lambda: Topology("small_world", p=True), "p must be a probability"),
    (lambda: Topology("ring", p=0.3), "p only applies to random and small_world"),
    (lambda: Topology("random", k=4), "k only applies to small_world"),
    (lambda: Topology("small_world", k=3), "k must be an even int >= 2"),
    (lambda: Topology("random", seed=-1), "seed must be a non-negative int"),
    (lambda: Topology("ring", directed="yes"), "directed must be True or False"),
    (lambda: Topology("ring", edges=((0, 1),)), "edges only apply to kind 'user'"),
    (lambda: Topology("user", edges=((1, 1),)), "self loop"),
    (lambda: Topology("user", edges=(("agent_0", "agent_0"),)), "self loop"),
    (lambda: Topology("user", edges=((0, 1, 2),)), "pair"),
    (lambda: Topology("user", edges=((0, -1),)), "indices"),
    (lambda: Topology("user", edges="0-1"), "sequence of"),
    (lambda: build(Topology("user", edges=(("agent_0", "agent_9"),)), 3), "unknown agent 'agent_9'"),
    (lambda: build(Topology("user", edges=((0, 5),)), 3), "only 3 agents"),
    (lambda: build(Topology("user", edges=(("agent_1", 1),)), 3), "self loop"),
    (lambda: build(nx.Graph([(0, 0)]), 2), "self loop"),
    (lambda: build("ring", 0), "at least 1 agent"),
    (lambda: build("ring", []), "at least 1 agent"),
    (lambda: build("ring", ["a", "a"]), "unique"),
    (lambda: build(3, 3), "spec must be"),
])
def test_bad_specs_rejected_with_clear_messages(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_rebuild_same_spec_for_larger_team():
    for spec in (Topology("ring"), Topology("grid"), Topology("star"), Topology("random", p=0.5, seed=2),
                 Topology("small_world", seed=2)):
        small, big = build(spec, 3), build(spec, 8)
        assert small.number_of_nodes() == 3 and big.number_of_nodes() == 8
        assert big.graph["topology"] == small.graph["topology"] == str(spec)
    assert build("ring", 8).number_of_edges() == 8
    spec = Topology("user", edges=((0, 1),))
    assert build(spec, 5).number_of_edges() == 1  # a user graph stays as given; extra agents are isolated


def test_parse_and_round_trip():
    assert Topology.parse("ring") == Topology("ring")
    assert Topology.parse("Star") == Topology("star")
    assert Topology.parse("random:p=0.3,seed=1") == Topology("random", p=0.3, seed=1)
    assert Topology.parse("small-world:k=6,p=0.1") == Topology("small_world", k=6, p=0.1)
    assert Topology.parse("line:directed") == Topology("line", directed=True)
    user = Topology("user", edges=((0, 1), ("agent_1", 2)))
    assert Topology.parse("user:edges=0-1;agent_1-2,directed=false") == user
    specs = [Topology(k) for k in KINDS] + [Topology("random", directed=True, p=0.25, seed=9),
                                            Topology("small_world", k=2, p=0.0, seed=3),
                                            Topology("user", directed=True, edges=(("agent_0", 2), (1, 0))),
                                            Topology("ring", seed=4)]
    for spec in specs:
        assert Topology.parse(str(spec)) == spec
    bad_specs = [("", "non-empty"), ("random:p=abc", "p must be a number"),
                 ("ring:size=3", "bad topology option"), ("ring:directed=maybe", "true or false"),
                 ("user:edges=0-1-2", "u-v"), ("random:seed=x", "whole")]
    for bad, match in bad_specs:
        with pytest.raises(ValueError, match=match):
            Topology.parse(bad)


def test_spec_is_frozen_and_hashable():
    np = pytest.importorskip("numpy")
    assert Topology("random", seed=np.int64(3)) == Topology("random", seed=3)
    assert build(Topology("user", edges=((np.int64(0), np.int64(1)),)), 2).has_edge("agent_0", "agent_1")
    spec = Topology("user", edges=[[0, 1]])
    assert spec.edges == ((0, 1),) and hash(spec) == hash(Topology("user", edges=((0, 1),)))
    with pytest.raises(AttributeError):
        spec.kind = "ring"  # type: ignore[misc]


@pytest.mark.parametrize("spec,n", [("grid", 8), ("star:directed", 5), ("line", 3), ("empty", 1),
                                    ("random", 6), ("small_world:seed=1", 8)])
def test_draw_writes_png(tmp_path, spec, n):
    out = draw(build(spec, n), tmp_path / "sub" / "topology.png")
    data = out.read_bytes()
    assert out.exists() and data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000
