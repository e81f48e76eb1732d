"""The layer contracts of DESIGN.md, checked by import-linter (also run by `make test`).

A contract that keeps nothing out is no contract: each forbidden import is planted in a copy of
the tree, and lint-imports must then fail on the contract that names it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT = Path(sys.executable).with_name("lint-imports")

FLOORS = "Floors point one way"
MACHINERY = "Orchestration runs the machinery"
INDEPENDENT = "collect, store and analyze never import each other"
PURE_LAYERS = "analyze and findings read no source, store, pipeline or configuration"
BELOW_APP = "pipeline, collect and store are below app and present"
PURE_IO = "analyze and findings are pure"

# (module that gets the line, the planted line, the contracts it must break)
PLANTS: list[tuple[str, str, set[str]]] = [
    # a rule reading the simulator's answer key, or the store
    (
        "findings/rules/idle_allocated.py",
        "from gpulens.collect.simulated.truth import ground_truth",
        {PURE_LAYERS},
    ),
    ("findings/rules/hollow_busy.py", "from gpulens.store import Store", {PURE_LAYERS}),
    ("analyze/waste.py", "import gpulens.pipeline.rates", {PURE_LAYERS}),
    ("analyze/waste.py", "import gpulens.store.query", {PURE_LAYERS, INDEPENDENT}),
    ("analyze/fleet.py", "from gpulens.config import Config", {PURE_LAYERS}),
    # indirectly: analyze imports errors, and errors (planted) imports the store
    ("errors.py", "import gpulens.store.frames", {PURE_LAYERS}),
    # I/O libraries, directly and through another module
    ("analyze/waste.py", "import duckdb", {PURE_IO}),
    ("findings/engine.py", "import httpx", {PURE_IO}),
    ("analyze/mfu.py", "import os", {PURE_IO}),
    ("findings/model.py", "from pathlib import Path", {PURE_IO}),
    ("errors.py", "import psutil", {PURE_IO}),
    # floors that point back up
    ("findings/engine.py", "import gpulens.app.analysis", {FLOORS, PURE_LAYERS}),
    ("app/ingest.py", "import gpulens.present.views", {FLOORS}),
    ("pipeline/rates.py", "import gpulens.present.cli", {BELOW_APP}),
    ("pipeline/rates.py", "import gpulens.app.session", {MACHINERY, BELOW_APP}),
    ("store/query.py", "import gpulens.pipeline.scheduler", {MACHINERY}),
    ("collect/base.py", "import gpulens.store.layout", {MACHINERY, INDEPENDENT}),
]


def _lint(root: Path, src: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    return subprocess.run(
        [str(LINT), "--no-cache"], cwd=root, env=env, capture_output=True, text=True, check=False
    )


def _broken(output: str) -> set[str]:
    """The names of the contracts lint-imports reports BROKEN."""
    return {
        line.removesuffix(" BROKEN") for line in output.splitlines() if line.endswith(" BROKEN")
    }


def test_layers_point_one_way() -> None:
    result = subprocess.run(
        [str(LINT), "--no-cache"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the package and its contracts that the plants may change."""
    root = tmp_path_factory.mktemp("house")
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    shutil.copytree(
        ROOT / "src" / "gpulens",
        root / "src" / "gpulens",
        ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.c"),
    )
    return root


def test_the_copy_keeps_every_contract(tree: Path) -> None:
    """The copy is read instead of the installed package, and is clean before any plant."""
    result = _lint(tree, tree / "src")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Analyzed" in result.stdout


@pytest.mark.parametrize(
    ("module", "line", "contracts"), PLANTS, ids=[f"{m}:{line}" for m, line, _ in PLANTS]
)
def test_a_planted_import_breaks_its_contract(
    tree: Path, module: str, line: str, contracts: set[str]
) -> None:
    path = tree / "src" / "gpulens" / module
    original = path.read_text(encoding="utf-8")
    path.write_text(f"{original}\n{line}  # planted\n", encoding="utf-8")
    try:
        result = _lint(tree, tree / "src")
    finally:
        path.write_text(original, encoding="utf-8")
    assert result.returncode != 0, result.stdout
    broken = _broken(result.stdout)
    for name in contracts:
        assert any(b.startswith(name) for b in broken), (name, broken, result.stdout[-2000:])


def _circles(graph: grimp.ImportGraph, prefixes: tuple[str, ...]) -> list[list[str]]:
    """The import circles (strongly connected groups of two or more modules) among the modules
    under `prefixes`."""
    modules = sorted(m for m in graph.modules if m.startswith(prefixes))
    inside = set(modules)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m) & inside) for m in modules}
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(module: str) -> None:  # Tarjan's strongly connected components
        order[module] = low[module] = len(order)
        stack.append(module)
        on_stack.add(module)
        for other in edges[module]:
            if other not in order:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in on_stack:
                low[module] = min(low[module], order[other])
        if low[module] == order[module]:
            group = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                group.append(top)
                if top == module:
                    break
            if len(group) > 1:
                circles.append(sorted(group))

    for module in modules:
        if module not in order:
            visit(module)
    return circles


def test_no_import_circle() -> None:
    """Not even through imports made only for type checking."""
    graph = grimp.build_graph("gpulens", cache_dir=None)
    assert _circles(graph, ("gpulens",)) == []


def test_the_circle_finder_finds_circles() -> None:
    graph = grimp.ImportGraph()
    for importer, imported in [("p.a", "p.b"), ("p.b", "p.c"), ("p.c", "p.a"), ("p.c", "p.d")]:
        graph.add_import(importer=importer, imported=imported)
    assert _circles(graph, ("p",)) == [["p.a", "p.b", "p.c"]]
