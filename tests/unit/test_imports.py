"""The import rules of the design (ARCHITECTURE.md, "Imports run one way"), read from the source with ``ast``.

Every ``.py`` under the package folders (not tests/) is a module named as it installs (``api/cli/bench.py`` ->
``spark_governor.api.cli.bench``); relative imports are resolved and imports inside functions count. Fails on an
import cycle, on Spark/web imports in the pure layers, on upward imports into the API or the CLI, and on a bare
top-level ``api``/``bench``/... import (those names do not exist once installed).
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "spark_governor"
# folder -> import package (pyproject.toml [tool.setuptools.package-dir])
FOLDERS = {"spark_governor": PACKAGE, **{d: f"{PACKAGE}.{d}" for d in
                                          ("collectors", "aggregators", "policies", "api", "dashboards", "migrations",
                                           "bench")}}
BARE = frozenset(d for d in FOLDERS if d != PACKAGE)
PURE = ("policies", "aggregators")
NO_SPARK_OR_WEB = frozenset({"pyspark", "py4j", "flask", "werkzeug", "requests"})
BELOW_API = ("collectors", "policies", "aggregators")


@dataclass
class Graph:
    files: dict[str, Path] = field(default_factory=dict)  # module -> file
    edges: dict[str, dict[str, str]] = field(default_factory=dict)  # module -> {imported module: "file:line"}
    external: dict[str, dict[str, str]] = field(default_factory=dict)  # module -> {top-level name: "file:line"}
    bare: list[str] = field(default_factory=list)  # "file:line imports NAME"


def module_files(root: Path) -> dict[str, Path]:
    out = {}
    for folder, package in FOLDERS.items():
        for path in sorted((root / folder).rglob("*.py")):
            parts = path.relative_to(root / folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join((package, *parts))] = path
    return out


def read_graph(root: Path = ROOT) -> Graph:
    g = Graph(files=module_files(root))
    for m in g.files:
        g.edges[m], g.external[m] = {}, {}

    def resolve(name: str) -> str | None:
        """The longest project module that ``name`` (a module, or a module's attribute) names."""
        parts = name.split(".")
        for i in range(len(parts), 0, -1):
            candidate = ".".join(parts[:i])
            if candidate in g.files:
                return candidate
        return None

    for m, path in g.files.items():
        is_package = path.name == "__init__.py"
        package = m if is_package else m.rpartition(".")[0]
        where = path.relative_to(root).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
                absolute = names
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    module = ".".join(base + ([node.module] if node.module else []))
                    absolute = []
                else:
                    module = node.module
                    absolute = [module]
                names = [f"{module}.{a.name}" for a in node.names] + [module]
            else:
                continue
            at = f"{where}:{node.lineno}"
            for name in absolute:
                if name.split(".")[0] in BARE:
                    g.bare.append(f"{at} imports bare {name!r} (use {PACKAGE}.{name})")
            for name in names:
                target = resolve(name)
                if target is not None:
                    if target != m:
                        g.edges[m].setdefault(target, at)
                elif name.split(".")[0] != PACKAGE:
                    g.external[m].setdefault(name.split(".")[0], at)
    return g


def strongly_connected(edges: dict[str, dict[str, str]]) -> list[list[str]]:
    """Tarjan's components with more than one module (iterative: no recursion limit)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for start in edges:
        if start in index:
            continue
        work = [(start, iter(edges[start]))]
        index[start] = low[start] = counter[0]; counter[0] += 1
        stack.append(start); on.add(start)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]; counter[0] += 1
                    stack.append(w); on.add(w)
                    work.append((w, iter(edges[w])))
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
                        w = stack.pop(); on.discard(w); comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def cycle_through(edges: dict[str, dict[str, str]], component: list[str]) -> list[str]:
    """A shortest cycle from the component's first module back to it, as printable edges."""
    start, inside = component[0], set(component)
    parent, frontier = {start: None}, [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in edges[v]:
                if w == start:
                    path = [v]
                    while parent[path[-1]] is not None:
                        path.append(parent[path[-1]])
                    path.reverse()
                    hops = path + [start]
                    return [f"{a} -> {b} ({edges[a][b]})" for a, b in zip(hops, hops[1:])]
                if w in inside and w not in parent:
                    parent[w] = v
                    nxt.append(w)
        frontier = nxt
    return []  # pragma: no cover - a component always has a cycle


def problems(g: Graph) -> list[str]:
    out = []
    for comp in strongly_connected(g.edges):
        out.append(f"import cycle among {', '.join(comp)}:\n    " + "\n    ".join(cycle_through(g.edges, comp)))
    for m in g.files:
        layer = m.split(".")[1] if "." in m else ""
        if layer in PURE:
            out += [f"{m} imports {x} ({at})" for x, at in g.external[m].items() if x in NO_SPARK_OR_WEB]
        for target, at in g.edges[m].items():
            if layer in BELOW_API and target.startswith(f"{PACKAGE}.api"):
                out.append(f"{m} imports {target} ({at}): only the CLI and benchmarks may import the API")
            if layer == "bench" and (target == f"{PACKAGE}.api.cli" or target.startswith(f"{PACKAGE}.api.cli.")):
                out.append(f"{m} imports {target} ({at}): nothing imports the CLI")
    return out + g.bare


def test_project_imports_follow_the_rules():
    g = read_graph()
    found = problems(g)
    assert not found, "import rules broken:\n" + "\n".join(found)


def test_the_scan_sees_the_project():
    g = read_graph()
    assert f"{PACKAGE}.api.cli" in g.files and f"{PACKAGE}.policies.base" in g.files and PACKAGE in g.files
    assert f"{PACKAGE}.api.processes" in g.edges[f"{PACKAGE}.bench.overhead"]
    assert not any(p.is_relative_to(ROOT / "tests") for p in g.files.values())


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_the_checker_fails_on_each_rule(tmp_path):
    root = _tree(tmp_path, {
        "spark_governor/__init__.py": "",
        "api/__init__.py": "",
        "api/cli/__init__.py": "from .bench import bench\n",
        "api/cli/bench.py": "def f():\n    from spark_governor.api.cli import main\n",  # cycle, inside a function
        "policies/__init__.py": "",
        "policies/a.py": "from .sub import b\nimport requests\n",
        "policies/sub/__init__.py": "",
        "policies/sub/b.py": "from ..a import x\n",  # relative cycle a <-> sub.b
        "collectors/__init__.py": "",
        "collectors/c.py": "from spark_governor.api import app\n",
        "bench/__init__.py": "",
        "bench/o.py": "from spark_governor.api.cli.bench import f\n",
        "aggregators/__init__.py": "",
        "aggregators/x.py": "import api.app\nfrom bench.output import write_json\nfrom pyspark.sql import Row\n",
    })
    found = "\n".join(problems(read_graph(root)))
    for expected in (
        "spark_governor.api.cli -> spark_governor.api.cli.bench (api/cli/__init__.py:1)",
        "spark_governor.api.cli.bench -> spark_governor.api.cli (api/cli/bench.py:2)",
        "spark_governor.policies.a -> spark_governor.policies.sub.b (policies/a.py:1)",
        "spark_governor.policies.a imports requests (policies/a.py:2)",
        "spark_governor.aggregators.x imports pyspark",
        "spark_governor.collectors.c imports spark_governor.api",
        "spark_governor.bench.o imports spark_governor.api.cli.bench",
        "aggregators/x.py:1 imports bare 'api.app'",
        "aggregators/x.py:2 imports bare 'bench.output'",
    ):
        assert expected in found, f"{expected!r} missing from:\n{found}"

def test_a_clean_tree_passes(tmp_path):
    root = _tree(tmp_path, {
        "spark_governor/__init__.py": "",
        "api/__init__.py": "",
        "api/processes.py": "import requests\n",
        "api/cli/__init__.py": "from spark_governor.api.cli.bench import bench\n",
        "api/cli/bench.py": "from spark_governor.api.processes import free_port\n",
        "bench/__init__.py": "",
        "bench/o.py": "from spark_governor.api.processes import free_port\nfrom . import p\n",
        "bench/p.py": "",
    })
    assert problems(read_graph(root)) == []
