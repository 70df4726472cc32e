"""The package's layout, checked from the source: the import graph and the length of files.

Every ``.py`` file of ``cmc/``, ``physics/``, ``parallel/`` and ``bench/`` is parsed (``ast``,
nothing is imported) and every import it makes is collected, at module level and inside
functions alike (an import inside a function only delays the cycle to the first call); only
imports under ``if TYPE_CHECKING:`` are left out, since they never run.  Relative imports are
resolved, ``from pkg import module`` is an import of ``pkg.module``, ``from pkg.mod import
name`` one of ``pkg.mod``, and a bare ``import run_bench`` in ``bench/`` (its scripts put
``bench/`` on ``sys.path``) one of ``bench.run_bench``.  Imports by name at run time
(``importlib.import_module``) are not seen.

The rules (issue 47, docs/architecture.md):

* no import cycle among these modules;
* ``bench/`` imports the package, never the reverse;
* ``physics/`` (numerical kernels: no MPI, no files) imports neither ``mpi4py``, ``h5py`` nor
  ``cmc``, and from ``parallel`` only the modules of :data:`PHYSICS_USES_FROM_PARALLEL`, which
  neither communicate nor touch files;
* no file of ``cmc/``, ``physics/``, ``parallel/`` over :data:`MAX_LINES` lines.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Folders whose modules make the graph.
PACKAGES = ("cmc", "physics", "parallel", "bench")
#: Folders whose files must be at most :data:`MAX_LINES` lines long.
LIMITED = ("cmc", "physics", "parallel")
MAX_LINES = 800

#: Third-party packages that physics/ must not import (no MPI, no files).
PHYSICS_FORBIDDEN = ("mpi4py", "h5py")
#: The modules of parallel/ that physics/ may import, and why they fit its rule (none of them
#: communicates or touches files).
PHYSICS_USES_FROM_PARALLEL = {
    "parallel.rng": "the lfsr113 generator's kernels (taus_uniform), which the kernels of "
                    "physics/ draw from",
    "parallel.decomposition": "MIN_CHUNK, the 20-star block that owns a sub-stream "
                              "(numpy arithmetic only)",
    "parallel.jit_cache": "physics/__init__ sets numba's cache folder before any kernel "
                          "module is compiled",
}


@dataclass(frozen=True)
class Import:
    """One import of a project module: who, where, what."""

    importer: str  #: module name of the importing file
    line: int
    target: str  #: the project module imported
    text: str  #: the import as written (``from .x import y``)

    def where(self) -> str:
        """``path:line`` of the import."""
        return f"{_path_of(self.importer)}:{self.line}"


@cache
def _modules() -> dict[str, Path]:
    """Module name -> file of every ``.py`` file under :data:`PACKAGES`."""
    out = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _path_of(module: str) -> str:
    return str(_modules()[module].relative_to(ROOT))


def _is_package(module: str) -> bool:
    return _modules()[module].name == "__init__.py"


def _resolve(dotted: str, importer: str) -> str | None:
    """The project module that importing ``dotted`` from ``importer`` loads (the longest
    prefix of ``dotted`` that is one), or None for a module outside the project."""
    mods = _modules()
    candidates = [dotted]
    if importer.split(".")[0] == "bench" and dotted.split(".")[0] not in PACKAGES:
        candidates.append(f"bench.{dotted}")  # bench's scripts put bench/ on sys.path
    for name in candidates:
        parts = name.split(".")
        for k in range(len(parts), 0, -1):
            if ".".join(parts[:k]) in mods:
                return ".".join(parts[:k])
    return None


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _import_nodes(tree: ast.AST):
    """Every Import and ImportFrom of ``tree``, at any depth, except under TYPE_CHECKING."""
    todo = [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        if isinstance(node, ast.If) and _is_type_checking(node):
            todo.extend(node.orelse)
            continue
        todo.extend(ast.iter_child_nodes(node))


@cache
def _imports_of(module: str) -> tuple[tuple[Import, ...], tuple[tuple[str, int], ...]]:
    """The imports of ``module``: those of project modules, and the top-level names (with
    their lines) of all it imports, project or not, as written."""
    path = _modules()[module]
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[Import] = []
    names: list[tuple[str, int]] = []
    for node in _import_nodes(tree):
        text = ast.unparse(node)
        if isinstance(node, ast.Import):
            for alias in node.names:
                names.append((alias.name, node.lineno))
                target = _resolve(alias.name, module)
                if target is not None:
                    found.append(Import(module, node.lineno, target, text))
            continue
        if node.level:
            package = module if _is_package(module) else module.rpartition(".")[0]
            for _ in range(node.level - 1):
                package = package.rpartition(".")[0]
            base = ".".join(p for p in (package, node.module) if p)
        else:
            base = node.module or ""
        names.append((base, node.lineno))
        for alias in node.names:
            # ``from pkg import module`` imports pkg.module; ``from mod import name``, mod
            target = _resolve(f"{base}.{alias.name}", module)
            if target is not None:
                found.append(Import(module, node.lineno, target, text))
    return tuple(sorted(set(found), key=lambda i: (i.line, i.target))), tuple(names)


def _graph() -> dict[str, list[Import]]:
    """Importer -> its imports of other project modules (self-imports left out)."""
    return {m: [i for i in _imports_of(m)[0] if i.target != m] for m in _modules()}


def _strongly_connected(graph: dict[str, list[Import]]) -> list[list[str]]:
    """Tarjan's strongly connected components (iterative), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted({i.target for i in graph[root]})))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted({i.target for i in graph[w]}))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    out.append(sorted(comp))
    return out


def _cycles() -> list[list[str]]:
    """The import cycles: strongly connected components of more than one module."""
    return [c for c in _strongly_connected(_graph()) if len(c) > 1]


def _describe(component: list[str]) -> str:
    """The files of a cycle and the imports that close it (``file:line: import``)."""
    graph = _graph()
    inside = set(component)
    files = ", ".join(_path_of(m) for m in component)
    edges = list(dict.fromkeys(f"    {i.where()}: {i.text}" for m in component
                               for i in graph[m] if i.target in inside))
    return f"  cycle of {files}:\n" + "\n".join(edges)


# ---------------------------------------------------------------------------- the tests
def test_the_graph_sees_imports_of_every_kind():
    """The collector itself: module level and function level, relative, ``from pkg import
    module``, bench's bare sibling imports, and nothing under TYPE_CHECKING (checked on
    imports that exist today, so a collector that misses a kind fails here)."""
    targets = {i.target for i in _imports_of("cmc.cli")[0]}
    assert {"cmc.config", "cmc.rundir", "cmc.cli_nbody"} <= targets, (
        f"cmc/cli.py: module-level and in-function imports not all seen: {sorted(targets)}")
    bench = {i.target for i in _imports_of("bench.scaling")[0]}
    assert "bench.run_bench" in bench, (
        f"bench/scaling.py: 'from run_bench import _run' not resolved: {sorted(bench)}")
    assert _resolve("cmc.sweep_summary._atomic_write", "bench.scaling") == "cmc.sweep_summary"
    assert _resolve("parallel.comm", "physics.tidal") == "parallel.comm"
    assert _resolve("numpy.linalg", "physics.tidal") is None
    assert _resolve("run_bench", "cmc.cli") is None, "bare names resolve in bench/ only"
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import a\n"
                     "else:\n    import b\ndef f():\n    from . import c\n")
    seen = sorted(ast.unparse(n) for n in _import_nodes(tree))
    assert seen == ["from . import c", "from typing import TYPE_CHECKING", "import b"], seen


def test_no_import_cycles():
    """No strongly connected component of more than one module (self-imports ignored)."""
    new = _cycles()
    assert not new, ("import cycles (move the shared piece to a lower module, or pass a "
                     "function in):\n" + "\n".join(_describe(c) for c in new))


def test_bench_is_on_top():
    """bench/ imports the package; nothing in cmc/, physics/, parallel/ imports bench/."""
    bad = [f"{i.where()}: {i.text}" for m, imps in _graph().items()
           if m.split(".")[0] != "bench" for i in imps if i.target.split(".")[0] == "bench"]
    assert not bad, "the package imports bench/ (bench imports the package, never the " \
                    "reverse):\n" + "\n".join(bad)


def test_physics_neither_communicates_nor_touches_files():
    """physics/ imports neither mpi4py, h5py nor cmc, and from parallel only the modules of
    :data:`PHYSICS_USES_FROM_PARALLEL`, which in turn import no mpi4py or h5py themselves
    (directly, or through the project modules they import)."""
    bad = []
    for m in _modules():
        if m.split(".")[0] != "physics":
            continue
        imports, names = _imports_of(m)
        bad += [f"{_path_of(m)}:{line}: imports {name}" for name, line in names
                if name.split(".")[0] in PHYSICS_FORBIDDEN]
        bad += [f"{i.where()}: {i.text}" for i in imports
                if i.target.split(".")[0] == "cmc"
                or (i.target.split(".")[0] == "parallel"
                    and i.target not in PHYSICS_USES_FROM_PARALLEL)]
    graph = _graph()
    todo, reached = list(PHYSICS_USES_FROM_PARALLEL), set()
    while todo:
        m = todo.pop()
        if m in reached:
            continue
        reached.add(m)
        bad += [f"{_path_of(m)}:{line}: imports {name} (physics/ uses {m.split('.')[0]} "
                f"through {', '.join(sorted(PHYSICS_USES_FROM_PARALLEL))})"
                for name, line in _imports_of(m)[1] if name.split(".")[0] in PHYSICS_FORBIDDEN]
        todo += [i.target for i in graph[m]]
    assert not bad, ("physics/ must hold numerical kernels only (no MPI, no files, nothing "
                     "of cmc/):\n" + "\n".join(bad))


def _line_counts() -> dict[str, int]:
    out = {}
    for pkg in LIMITED:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            out[str(path.relative_to(ROOT))] = len(path.read_text().splitlines())
    return out


def test_files_are_at_most_800_lines():
    """No file of cmc/, physics/, parallel/ over MAX_LINES lines."""
    new = sorted(f"{p} ({n} lines)" for p, n in _line_counts().items() if n > MAX_LINES)
    assert not new, f"files over {MAX_LINES} lines (split them along their seams): " \
                    + ", ".join(new)

