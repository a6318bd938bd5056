"""Checks over the repository's own code: import cycles, the rooms of DESIGN.md, file size, stray text.

The import graph is read with `ast`, never by importing anything, so these checks are cheap and see
imports that only run inside functions. How an import becomes an edge of the graph:

- Nodes are modules of `marl`, `scenarios`, `comms`, `policies` (a package's `__init__.py` is the
  node named after the package), plus the modules of `tests/` and `benchmarks/` as importers only.
- Every import statement counts wherever it is: module level, inside a function, under
  `if TYPE_CHECKING:` (a type-only import still ties two modules' definitions together), and a
  literal `importlib.import_module("...")`. Relative imports are resolved against the importer.
- `import a.b.c` is an edge to `a.b.c` only; `from a.b import c` is an edge to `a.b.c` when that is
  a module, else to `a.b` (then `c` is a name defined there). Names that are not ours are skipped.
- The parent packages that Python imports first (`a` and `a.b` for `import a.b.c`) are NOT edges.
  Counting them would turn every package `__init__` that re-exports its submodules into a cycle,
  while Python imports such a package fine: the submodule never asks for the half-run `__init__`.
  A submodule that imports its own package explicitly (`from a import X`, `from . import X` for a
  name X that is not a submodule) while that `__init__` imports the submodule IS a cycle, in Python
  terms too: the submodule runs while `__init__` is half done, so `X` may not exist yet.

A cycle is a strongly connected component of more than one module.
"""

from __future__ import annotations

import ast
import itertools
import re
import shutil
import subprocess
from collections.abc import Container, Iterator, Sequence
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("marl", "scenarios", "comms", "policies")
IMPORTERS = ("tests", "benchmarks")  # may import anything of ours; nothing of ours may import them
MAX_LINES = 400
# Where stray text is looked for (docs/results/ holds measured runs and may name their setting).
TEXT_ROOTS = ("README.md", "docs", "marl", "policies", "comms", "scenarios")
TEXT_EXEMPT = ("docs/results/",)
TEXT_SUFFIXES = {".py", ".md", ".rst", ".txt", ".yaml", ".yml", ".toml", ".cfg", ".ini", ".json"}
MACHINE_PATH = re.compile(r"(?<![\w.~-])/(?:work|root|home|Users)/|(?<![\w.~-])/tmp/\w")
ISSUE_NUMBER = re.compile(r"\bissues?\s*#?\s*\d+|\bPR\s*#\d+|\bpull request\s*#?\d+|\(#\d+\)", re.IGNORECASE)


# -- the import graph ---------------------------------------------------------------------------
def find_modules(root: Path, tops: Sequence[str]) -> dict[str, tuple[Path, bool]]:
    """Dotted module name -> (file, is a package `__init__`) for every `.py` under each top folder."""
    modules: dict[str, tuple[Path, bool]] = {}
    for top in tops:
        for path in sorted((root / top).rglob("*.py")):
            rel = path.relative_to(root)
            if any(part.startswith(".") or part == "__pycache__" for part in rel.parts):
                continue
            parts = list(rel.with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            if is_package:
                parts.pop()
            modules[".".join(parts)] = (path, is_package)
    return modules


def _resolve_from(node: ast.ImportFrom, module: str, is_package: bool) -> str | None:
    """The absolute module an `ImportFrom` reads from (None when it climbs above the top package)."""
    if node.level == 0:
        return node.module
    package = module.split(".") if is_package else module.split(".")[:-1]
    if node.level - 1 > len(package) - 1:
        return None
    base = package[: len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _targets(node: ast.AST, module: str, is_package: bool, known: Container[str]) -> Iterator[str]:
    """The modules of ours that one AST node imports (see the module docstring for the rule)."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names if alias.name in known)
    elif isinstance(node, ast.ImportFrom):
        base = _resolve_from(node, module, is_package)
        if base is None:
            return
        for alias in node.names:
            sub = f"{base}.{alias.name}"
            if alias.name != "*" and sub in known:
                yield sub
            elif base in known:
                yield base
    elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
          and isinstance(node.args[0].value, str) and node.args[0].value in known
          and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"):
        yield node.args[0].value


def import_graph(root: Path, packages: Sequence[str] = PACKAGES, importers: Sequence[str] = ()) -> nx.DiGraph:
    """Directed graph importer -> imported over the modules of `packages` (and `importers`).

    Each node has `path` and `package` (bool); each edge the `line` of its first import.
    """
    modules = find_modules(root, tuple(packages) + tuple(importers))
    graph = nx.DiGraph()
    for name, (path, is_package) in modules.items():
        graph.add_node(name, path=path.relative_to(root).as_posix(), package=is_package)
    for name, (path, is_package) in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            for target in _targets(node, name, is_package, modules):
                if target != name and not graph.has_edge(name, target):
                    graph.add_edge(name, target, line=node.lineno)
    return graph


def import_cycles(graph: nx.DiGraph, per_component: int = 5) -> list[str]:
    """One line per strongly connected component of more than one module, with a few of its cycles."""
    lines = []
    for component in sorted(sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1):
        sub = graph.subgraph(component)
        shown = []
        for cycle in itertools.islice(nx.simple_cycles(sub), per_component):
            hops = [f"{a} ({graph.nodes[a]['path']}:{graph.edges[a, b]['line']})"
                    for a, b in zip(cycle, cycle[1:] + cycle[:1], strict=True)]
            shown.append(" -> ".join(hops + [cycle[0]]))
        lines.append(f"{len(component)} modules import each other: {', '.join(component)}\n    "
                     + "\n    ".join(shown))
    return lines


# -- the rooms of DESIGN.md ---------------------------------------------------------------------
def _scenarios_shared(graph: nx.DiGraph, module: str) -> bool:
    """A module of `scenarios` every scenario builds on: the package itself or a top-level module of it
    (base types, grammar), not one scenario's folder and not the registry of them."""
    if module == "scenarios":
        return True
    parts = module.split(".")
    return (len(parts) == 2 and parts[0] == "scenarios" and parts[1] != "registry"
            and not graph.nodes[module]["package"])


def room_violations(graph: nx.DiGraph) -> list[str]:
    """Edges that break the table of DESIGN.md, one line each naming the file and line."""
    bad = []
    for src, dst, data in graph.edges(data=True):
        a, b = src.split(".")[0], dst.split(".")[0]
        if a in IMPORTERS:
            continue
        where = f"{graph.nodes[src]['path']}:{data['line']} imports {dst}"
        if a == "scenarios" and b != "scenarios":
            bad.append(f"{where}: scenarios imports nothing of ours outside scenarios")
        elif a == "comms" and b != "comms" and not _scenarios_shared(graph, dst):
            bad.append(f"{where}: comms imports only comms and the shared base types of scenarios")
        elif a == "policies" and b in ("marl", "comms"):
            bad.append(f"{where}: policies never imports marl or comms")
        elif b == "marl" and a != "marl":
            bad.append(f"{where}: nothing outside marl imports marl (only tests and benchmarks may)")
        elif a == b == "marl" and 0 <= _marl_room(dst) < _marl_room(src):
            bad.append(f"{where}: inside marl, arrows point down only ({' -> '.join(MARL_ROOMS)})")
    return sorted(bad)


MARL_ROOMS = ("cli", "run", "engine", "config")
"""The sub-rooms of marl, top to bottom: each may import those after it, never one before it."""


def _marl_room(module: str) -> int:
    parts = module.split(".")
    return MARL_ROOMS.index(parts[1]) if len(parts) > 1 and parts[1] in MARL_ROOMS else -1


# -- files git tracks ---------------------------------------------------------------------------
def repo_files(pattern: str = "*") -> list[str]:
    """Files git tracks or would track (untracked but not ignored), that exist in the work tree."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: nothing to list")
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z", "--", pattern],
                         cwd=ROOT, capture_output=True, check=True).stdout.decode()
    return sorted({f for f in out.split("\0") if f and (ROOT / f).is_file()})


def stray_text(rel: str, text: str) -> list[str]:
    """`file:line: what` for each machine path or issue number in `text`."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for pattern, what in ((MACHINE_PATH, "absolute machine path"), (ISSUE_NUMBER, "issue number")):
            for match in pattern.finditer(line):
                found.append(f"{rel}:{number}: {what} {match.group(0)!r}")
    return found


# -- the checks ---------------------------------------------------------------------------------
def test_cycle_finder_sees_a_fabricated_cycle(tmp_path: Path) -> None:
    """The checker itself: a tiny tree with a hidden cycle, a re-exporting `__init__` and a real one."""
    files = {
        "pkg/__init__.py": "from pkg.a import f\n",  # re-exports a submodule: not a cycle by itself
        "pkg/a.py": "def f():\n    from .b import g\n    return g\n",  # hidden in a function
        "pkg/b.py": "from __future__ import annotations\nimport pkg.c\n",
        "pkg/c.py": "from pkg import a\n",  # a submodule by name: an edge to pkg.a -> cycle a, b, c
        "other/__init__.py": "from other.x import X\n",
        "other/x.py": "from other import Z\nX = 1\n",  # asks the half-run __init__ for a name: a cycle
        "other/y.py": "import importlib\nm = importlib.import_module('pkg.b')\n",
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    graph = import_graph(tmp_path, packages=("pkg", "other"))
    assert set(graph.edges) == {("pkg", "pkg.a"), ("pkg.a", "pkg.b"), ("pkg.b", "pkg.c"), ("pkg.c", "pkg.a"),
                                ("other", "other.x"), ("other.x", "other"), ("other.y", "pkg.b")}
    found = import_cycles(graph)
    assert len(found) == 2, found
    assert "other, other.x" in found[0] and "pkg.a, pkg.b, pkg.c" in found[1], found
    assert "pkg/a.py:2" in found[1], found  # the hop names the importing file and line


def test_no_import_cycles() -> None:
    cycles = import_cycles(import_graph(ROOT, PACKAGES, IMPORTERS))
    assert not cycles, "import cycles (move what both sides need into a module both import):\n" + "\n".join(cycles)


def test_rooms_of_design_md() -> None:
    bad = room_violations(import_graph(ROOT, PACKAGES, IMPORTERS))
    assert not bad, "imports against the rooms of DESIGN.md:\n" + "\n".join(bad)


def test_python_files_are_short() -> None:
    long = []
    for rel in repo_files("*.py"):
        n = len((ROOT / rel).read_text(encoding="utf-8", errors="replace").splitlines())
        if n > MAX_LINES:
            long.append(f"{rel}: {n} lines")
    assert not long, f"files over {MAX_LINES} lines (split them by what they hold):\n" + "\n".join(long)


@pytest.mark.parametrize(("text", "flagged"), [
    ("see /work/main/marl", True), ("cache in /root/.cache", True), ("wrote /tmp/run3", True),
    ("fixed in issue 12", True), ("see Issue #4", True), ("(#31)", True),
    ("https://example.org/root/x", False), ("runs/work/out", False), ("a /tmp folder", False),
    ("issues with padding", False), ("colour #333333", False),
])
def test_stray_text_patterns(text: str, flagged: bool) -> None:
    assert bool(stray_text("f", text)) is flagged


def test_no_machine_paths_or_issue_numbers() -> None:
    found = []
    for rel in repo_files():
        in_scope = any(rel == top or rel.startswith(top + "/") for top in TEXT_ROOTS)
        if not in_scope or rel.startswith(TEXT_EXEMPT) or Path(rel).suffix not in TEXT_SUFFIXES:
            continue
        found += stray_text(rel, (ROOT / rel).read_text(encoding="utf-8", errors="replace"))
    assert not found, "machine paths or issue numbers (say what and why instead):\n" + "\n".join(found)
