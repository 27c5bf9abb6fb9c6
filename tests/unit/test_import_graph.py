"""The package's layers, read from the source with `ast` (nothing is imported): no two modules import each other,
`functional`/`theory` import no pipeline and never `transformers`, `report` imports no pipeline (docs/architecture.md).

Every import statement counts: module level, inside functions and under `if TYPE_CHECKING:` (a type-only import
still ties the two modules together, and it is what the cycles named in issue 10 were made of).
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
PIPELINES = ("pipelines", "reproduction", "explorer")


def _modules() -> dict[str, tuple[Path, bool]]:
    """Dotted module name -> (file, is package) for every module under src/sinkscope."""
    found = {}
    for path in sorted((SRC / "sinkscope").rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return found


@cache
def import_graph() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(module -> the sinkscope modules it imports, module -> the top-level external packages it imports).

    `from sinkscope.x import y` counts as importing `sinkscope.x.y` when that is a module, else `sinkscope.x`.
    """
    modules = _modules()

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    internal: dict[str, set[str]] = {}
    external: dict[str, set[str]] = {}
    for name, (path, is_package) in modules.items():
        package = name if is_package else name.rpartition(".")[0]
        internal[name], external[name] = set(), set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative import: climb level-1 packages up from this module's package
                    parent = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join(parent + ([node.module] if node.module else []))
                targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
            else:
                continue
            for target in targets:
                if target == "sinkscope" or target.startswith("sinkscope."):
                    resolved = resolve(target)
                    if resolved and resolved != name:
                        internal[name].add(resolved)
                else:
                    external[name].add(target.split(".")[0])
    return internal, external


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for child in sorted(graph[node]):
            if child not in index:
                visit(child)
                low[node] = min(low[node], low[child])
            elif child in on_stack:
                low[node] = min(low[node], index[child])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for child in graph[todo.pop()] - seen:
            seen.add(child)
            todo.append(child)
    return seen


def test_the_cycle_finder_and_the_parser_on_a_known_graph():
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert import_cycles({"a": {"b"}, "b": set()}) == []
    internal, external = import_graph()
    # Independent of the parser: run.py reads pandas and sinkscope.staging at module level.
    assert {"sinkscope.staging", "sinkscope.errors"} <= internal["sinkscope.pipelines.run"] and "pandas" in external["sinkscope.pipelines.run"]
    assert len(internal) == len(list((SRC / "sinkscope").rglob("*.py")))


def test_no_import_cycles():
    internal, _ = import_graph()
    cycles = import_cycles(internal)
    assert cycles == [], f"modules that import each other (directly or through others): {cycles}"


@pytest.mark.parametrize("layer", ["sinkscope.functional", "sinkscope.theory"])
def test_stats_and_theory_import_no_pipeline_and_no_transformers(layer):
    internal, external = import_graph()
    for module in (m for m in internal if _within(m, layer)):
        reached = _reachable(internal, module) | {module}
        pipelines = sorted(m for m in reached if any(_within(m, f"sinkscope.{p}") for p in PIPELINES + ("cli",)))
        assert pipelines == [], f"{module} imports pipeline modules {pipelines}"
        with_transformers = sorted(m for m in reached if "transformers" in external[m])
        assert with_transformers == [], f"{module} reaches transformers through {with_transformers}"


def test_report_imports_no_pipeline():
    internal, _ = import_graph()
    for module in (m for m in internal if _within(m, "sinkscope.report")):
        reached = sorted(
            m for m in _reachable(internal, module) if any(_within(m, f"sinkscope.{p}") for p in PIPELINES + ("cli",))
        )
        assert reached == [], f"{module} imports pipeline modules {reached}"


def test_statistics_import_no_pipeline_and_no_capture():
    """The streaming statistics sit below the feed that drives them: they never reach capture/, a pipeline or the CLI."""
    internal, _ = import_graph()
    assert any(_within(m, "sinkscope.statistics") for m in internal)
    for module in (m for m in internal if _within(m, "sinkscope.statistics")):
        above = sorted(
            m for m in _reachable(internal, module)
            if any(_within(m, f"sinkscope.{p}") for p in PIPELINES + ("cli", "capture"))
        )  # fmt: skip
        assert above == [], f"{module} imports {above}"


LAYERS: tuple[tuple[str, ...], ...] = (
    ("cli",),
    ("reproduction", "integrations"),
    ("explorer",),
    ("pipelines", "synthetic"),
    ("capture",),
    ("statistics",),
    ("report", "theory", "functional"),
    ("models", "corpus"),
    ("staging", "provenance", "threads"),
    ("identity", "locking"),
    ("ownership",),
    ("errors",),
)
"""The declared layer order, top to bottom (docs/architecture.md): a module imports only from its own package or from
packages of a lower layer — never from a package beside it or above it."""


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def layer_violations(graph: dict[str, set[str]], layers: tuple[tuple[str, ...], ...] = LAYERS) -> list[str]:
    """Each import `a -> b` whose package does not sit strictly lower than a's (same package excepted)."""
    rank = {package: depth for depth, packages in enumerate(layers) for package in packages}
    found = []
    for module, targets in graph.items():
        for target in targets:
            a, b = _package(module), _package(target)
            if a and b and a != b and rank[b] <= rank[a]:
                found.append(f"{module} -> {target}")
    return sorted(found)


def test_every_package_has_a_declared_layer():
    internal, _ = import_graph()
    declared = {package for packages in LAYERS for package in packages}
    assert {_package(m) for m in internal} - {""} == declared


def test_no_import_breaks_the_declared_layer_order():
    internal, _ = import_graph()
    assert layer_violations(internal) == []


def test_the_layer_check_catches_an_upward_and_a_sideways_import():
    internal, _ = import_graph()
    upward = {**internal, "sinkscope.functional.patterns": internal["sinkscope.functional.patterns"] | {"sinkscope.pipelines.analysis"}}
    sideways = {**internal, "sinkscope.theory.cost": internal["sinkscope.theory.cost"] | {"sinkscope.report.page"}}
    assert layer_violations(upward) == ["sinkscope.functional.patterns -> sinkscope.pipelines.analysis"]
    assert layer_violations(sideways) == ["sinkscope.theory.cost -> sinkscope.report.page"]
