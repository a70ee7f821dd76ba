"""servelab's import graph, built from the source: one direction, no circles (issue 34).

Every ``import`` / ``from ... import`` in ``src/servelab`` counts, wherever it is: at the
top, inside a function (lazy imports that keep ``--help`` fast), or under
``TYPE_CHECKING``. A lazy import that only hides a circle is still a circle here.

The layers, lowest first. A module may import its own layer and any layer below it,
never one above. Each top-level package or module of ``servelab`` has exactly one layer;
a new one must be added here (the test says so).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

LAYERS: tuple[tuple[str, ...], ...] = (
    # foundations: no servelab imports above errors (testing/ imports none at all)
    ("servelab", "errors", "quiet", "units", "defaults", "points", "redact", "outfile", "testing",
     "check"),
    ("families",),  # model families: config reading, layer kinds, dims
    ("hardware",),  # profiles (data) and probes; hardware.lookup resolves names
    ("checkpoint",),  # header readers: local, GGUF, Hub
    ("published",),  # published measurements shipped as sourced data (runs, acceptance)
    ("synth",),  # tiny real checkpoints, GGUF conversion, header replicas
    ("ops",),  # operator cost tables (measured, AIConfigurator's) and step composition
    # sizing arithmetic: memory budget, the KV pool's vocabulary and the engine seam's types,
    # weights per GPU, start-up limits: values in, values out
    ("sizing",),
    ("engines",),  # the Engine seam, the shared log-facts record, one folder per engine
    # load generator and statistics (needs nothing above the foundations); below serve: a
    # recipe's [bench] table is the bench's own workload schema (bench.spec)
    ("bench",),
    # the speed model: form, solver, calibration levels, priors, costs, ledger (values only:
    # stored runs reach it as samples, through servelab.evidence)
    ("predict",),
    ("serve",),  # recipe, install, launch, process lifecycle, attach
    # a build's whole plan: sizing arithmetic + speed model put together, explained, under
    # load; its request is built from CLI flags, a recipe (serve's) or a build being chosen
    ("plan",),
    ("store",),  # results database (likewise)
    ("analysis",),  # comparisons, history, acceptance over stored runs
    # stored runs as the speed model's values: samples, measured acceptance, held-out sweeps
    ("evidence",),
    ("choose",),  # which build to download: ranking over plans (pure), the Hub model tree
    ("site",),  # pages from stored records (publishing never orchestrates)
    ("pipeline",),  # `servelab run` / `demo`: composes everything below
    ("cli",),
    ("__main__",),
)

# Known upward edges, each to be removed by the branch named; keep this list short.
ALLOWED_UPWARD: frozenset[tuple[str, str]] = frozenset()


def _modules(src: Path = SRC) -> dict[str, Path]:
    out = {}
    for path in sorted((src / "servelab").rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _imported(module: str, path: Path, known: Iterable[str]) -> set[str]:
    """The servelab modules ``module`` imports (a name imported from a package counts as
    its submodule when one of that name exists, else as the package)."""
    known = set(known)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*up, *([base] if base else [])])
            for a in node.names:
                sub = f"{base}.{a.name}"
                found.add(sub if sub in known else base)
    out = set()
    for name in found:
        if name != "servelab" and not name.startswith("servelab."):
            continue
        while name not in known:  # ``import servelab.x.y`` of a name, not a module
            name = name.rpartition(".")[0]
        if name != module:
            out.add(name)
    return out


def import_graph(src: Path = SRC) -> dict[str, set[str]]:
    """Module -> the servelab modules it imports."""
    mods = _modules(src)
    return {m: _imported(m, p, mods) for m, p in mods.items()}


def unit(module: str) -> str:
    """The top-level part of servelab a module belongs to (``servelab`` for the root)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def _rank() -> dict[str, int]:
    return {name: i for i, layer in enumerate(LAYERS) for name in layer}


def upward_edges(graph: dict[str, set[str]]) -> list[str]:
    rank = _rank()
    return sorted(
        f"{m} -> {t} ({unit(m)} is below {unit(t)})"
        for m, targets in graph.items()
        for t in targets
        if rank[unit(t)] > rank[unit(m)] and (m, t) not in ALLOWED_UPWARD
    )


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph()


def test_every_part_of_servelab_has_a_layer(graph: dict[str, set[str]]) -> None:
    rank = _rank()
    missing = sorted({unit(m) for m in graph} - set(rank))
    assert missing == [], f"add these to LAYERS in {Path(__file__).name}: {missing}"
    assert len(rank) == sum(len(layer) for layer in LAYERS)  # no name in two layers


def test_no_module_imports_itself_round_a_circle(graph: dict[str, set[str]]) -> None:
    assert cycles(graph) == []


def test_no_circles_between_packages(graph: dict[str, set[str]]) -> None:
    packages: dict[str, set[str]] = defaultdict(set)
    for m, targets in graph.items():
        packages[unit(m)].update(unit(t) for t in targets if unit(t) != unit(m))
    assert cycles(packages) == []


def test_no_upward_import(graph: dict[str, set[str]]) -> None:
    assert upward_edges(graph) == []


def test_the_allowed_upward_edges_still_exist(graph: dict[str, set[str]]) -> None:
    """An allow-list entry whose import is gone must go too (it would hide a new one)."""
    assert [e for e in sorted(ALLOWED_UPWARD) if e[1] not in graph.get(e[0], set())] == []


def test_the_planner_and_families_stay_low(graph: dict[str, set[str]]) -> None:
    sizing = {t for m, ts in graph.items() if unit(m) == "sizing" for t in ts}
    assert sorted(t for t in sizing if unit(t) in ("engines", "serve")) == []
    families = {t for m, ts in graph.items() if unit(m) == "families" for t in ts}
    assert sorted(t for t in families if unit(t) != "families") == [
        "servelab.errors", "servelab.quiet"]
    engines = {t for m, ts in graph.items() if unit(m) == "engines" for t in ts}
    assert sorted(t for t in engines if unit(t) == "serve") == []


#: The engine packages: one folder per engine under ``servelab.engines``.
def engine_package(module: str) -> str | None:
    """The engine package ``module`` belongs to (``servelab.engines.vllm``), else None."""
    parts = module.split(".")
    if len(parts) >= 3 and parts[:2] == ["servelab", "engines"] and parts[2] not in (
        "base", "builds", "facts"
    ):
        return ".".join(parts[:3])
    return None


#: The only modules outside an engine that may import one: the registry, and the CLI's
#: engine commands (issue 42: the planner and everything else ask the registry).
ENGINE_IMPORTERS = frozenset({"servelab.engines", "servelab.cli.engine_cmd"})


def engine_imports(graph: dict[str, set[str]]) -> list[str]:
    """Imports of an engine package from outside it, by a module not allowed to."""
    return sorted(
        f"{m} -> {t}"
        for m, targets in graph.items()
        for t in targets
        if (pkg := engine_package(t)) is not None and engine_package(m) != pkg
        and m not in ENGINE_IMPORTERS
    )


def test_no_module_imports_an_engine_but_the_registry(graph: dict[str, set[str]]) -> None:
    assert {engine_package(m) for m in graph} >= {
        "servelab.engines.vllm", "servelab.engines.llamacpp", "servelab.engines.synthetic"}
    assert engine_imports(graph) == []


def test_the_engine_import_check_finds_one() -> None:
    graph = {
        "servelab.engines": {"servelab.engines.vllm"},
        "servelab.engines.vllm": {"servelab.engines.vllm.kv", "servelab.engines.base"},
        "servelab.engines.vllm.kv": set(),
        "servelab.engines.llamacpp": {"servelab.engines.vllm.kv"},
        "servelab.plan.build": {"servelab.engines", "servelab.engines.base"},
        "servelab.cli.plan_cmd": {"servelab.engines.llamacpp"},
    }
    assert engine_imports(graph) == [
        "servelab.cli.plan_cmd -> servelab.engines.llamacpp",
        "servelab.engines.llamacpp -> servelab.engines.vllm.kv",
    ]


def test_the_checker_finds_what_it_forbids(tmp_path: Path) -> None:
    """On a small tree: a lazy import closing a circle, a relative upward import, a
    TYPE_CHECKING import, and an edge into a submodule named in ``from pkg import sub``."""
    pkg = tmp_path / "servelab"
    for rel, text in {
        "__init__.py": "",
        "errors.py": "",
        "sizing/__init__.py": "",
        "sizing/a.py": "def f():\n    from servelab.sizing import b\n",
        "sizing/b.py": "from servelab.sizing.a import f\n",
        "sizing/c.py": "from ..engines import base\n",
        "engines/__init__.py": "",
        "engines/base.py": (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
            "    from servelab.serve.recipe import Recipe\n"
        ),
        "serve/__init__.py": "",
        "serve/recipe.py": "import servelab.errors\nfrom servelab.engines import base\n",
    }.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    g = import_graph(tmp_path)
    assert g["servelab.sizing.c"] == {"servelab.engines.base"}
    assert g["servelab.serve.recipe"] == {"servelab.errors", "servelab.engines.base"}
    assert sorted(cycles(g)) == [
        ["servelab.engines.base", "servelab.serve.recipe"],  # the TYPE_CHECKING import
        ["servelab.sizing.a", "servelab.sizing.b"],  # the lazy one
    ]
    assert upward_edges(g) == [
        "servelab.engines.base -> servelab.serve.recipe (engines is below serve)",
        "servelab.sizing.c -> servelab.engines.base (sizing is below engines)",
    ]
