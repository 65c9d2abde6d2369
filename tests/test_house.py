"""One name for each thing (issue 47): four house counts, each held at 0. A setting declared again by another
command with the same meaning, modules that import each other in a circle, a function over 100 lines, a file
name that vitx/evaluation/ and vitx/evaluators/ both use. Read from the source (ast) and the config dataclasses'
fields, nothing trained: `python -m tests.test_house [--list] [ROOT]` prints the four counts of a checkout, one line
each (--list: and what each counts; ROOT: another tree, whose vitx it imports; default this one)."""
from __future__ import annotations

import ast
import dataclasses
import difflib
import functools
import importlib
import itertools
import sys
from pathlib import Path

from .helpers import ROOT

SAME_MEANING = 0.75  # difflib ratio of two help texts at or above which they say the same thing
LONGEST = 100  # lines a function may span, its def line included
MAKERS = {"setting", "with_default"}  # what makes a command's setting (vitx/settings/__init__.py)


@functools.lru_cache(maxsize=None)
def parsed(path: Path) -> ast.Module:
    """A file's syntax tree, read once however many counts walk it."""
    return ast.parse(path.read_text())


def modules(root: Path) -> dict[str, Path]:
    """Every module of vitx under `root`: dotted name → file (a package by its __init__.py)."""
    found = {}
    for path in sorted((root / "vitx").rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


# -- 1. settings copied across commands -------------------------------------------------------------------------

def _callee(node: ast.AST) -> str | None:
    return getattr(node.func, "id", getattr(node.func, "attr", None)) if isinstance(node, ast.Call) else None


@functools.lru_cache(maxsize=None)
def written_settings(root: Path) -> dict[str, set[tuple[str, str]]]:
    """Module → (class, field) of every `field: T = setting(...)` written in a class body, for the modules whose
    classes make settings (the commands' config declarations, the groups they compose) directly or through a
    helper of their own (`with_default`, speed/config.py's `_run`). Found by ast so that only these modules are
    imported, not every module of vitx (torch and the rest would take far longer than the count). An objective's
    `option`s are not commands' settings: they are given inside --objective, with no flag of their own."""
    found = {}
    for name, path in modules(root).items():
        tree = parsed(path)
        if not any(_callee(node) in MAKERS for node in ast.walk(tree)):
            continue
        made = [(c.name, s.target.id, _callee(s.value)) for c in ast.walk(tree) if isinstance(c, ast.ClassDef)
                for s in c.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name) and _callee(s.value)]
        if made:
            found[name] = {(cls, field) for cls, field, callee in made if callee == "setting"}
    return found


def config_classes(root: Path) -> list[type]:
    """The dataclasses of vitx (imported from `root`, which must be the vitx on sys.path) with settings fields."""
    import vitx

    assert Path(vitx.__file__).resolve().parent == (root / "vitx").resolve(), \
        f"vitx is imported from {vitx.__file__}, not from {root}: put {root} first on sys.path"
    classes: dict[int, type] = {}
    for name in written_settings(root):
        module = importlib.import_module(name)
        for value in vars(module).values():
            if dataclasses.is_dataclass(value) and isinstance(value, type) and value.__module__ == name and \
                    any("group" in f.metadata for f in dataclasses.fields(value)):
                classes[id(value)] = value
    return sorted(classes.values(), key=lambda c: (c.__module__, c.__qualname__))


def declarations(root: Path) -> list[tuple[str, dataclasses.Field]]:
    """(class that declares it, field) for each setting declaration. A field counts in the class whose body made
    it, never again in the classes that inherit it or compose its group (the same Field object), nor where a
    config gives a setting declared elsewhere its own default (`with_default`: a new Field with the
    declaration's help, panel and bounds, all alike): of the fields alike, those written `setting(...)` each
    count (the same declaration written out twice), or one where none is."""
    written = written_settings(root)
    alike: dict[tuple[str, str], list[tuple[str, dataclasses.Field, bool]]] = {}
    for cls in config_classes(root):
        bases = [getattr(b, "__dataclass_fields__", {}) for b in cls.__mro__[1:]]
        for f in dataclasses.fields(cls):
            if "group" in f.metadata and not any(b.get(f.name) is f for b in bases):
                own = (cls.__qualname__, f.name) in written.get(cls.__module__, ())
                key = (f.name, repr(sorted(f.metadata.items())))
                alike.setdefault(key, []).append((f"{cls.__module__}.{cls.__qualname__}", f, own))
    found = []
    for fields in alike.values():
        found += [(where, f) for where, f, own in fields if own] or [fields[0][:2]]
    return found


def setting_copies(root: Path = ROOT) -> dict[str, list[str]]:
    """Setting name → the places (class.field) that declare it, or a setting of the same meaning, again: two
    declarations whose help texts match at SAME_MEANING or more."""
    copies: dict[str, set[str]] = {}
    for (a, fa), (b, fb) in itertools.combinations(declarations(root), 2):
        ha, hb = fa.metadata["help"], fb.metadata["help"]
        matcher = difflib.SequenceMatcher(None, ha, hb)
        if matcher.real_quick_ratio() >= SAME_MEANING and matcher.quick_ratio() >= SAME_MEANING and \
                matcher.ratio() >= SAME_MEANING:
            for name in {fa.name, fb.name}:
                copies.setdefault(name, set()).update({f"{a}.{fa.name}", f"{b}.{fb.name}"})
    return {name: sorted(places) for name, places in sorted(copies.items())}


# -- 2. import circles -------------------------------------------------------------------------------------------

def module_level_imports(tree: ast.Module, deferred: bool = False) -> list[ast.Import | ast.ImportFrom]:
    """The imports a module runs when it is imported (those under `if TYPE_CHECKING:` included, a type
    checker follows them), not those inside functions, which run when called (`deferred`: those too)."""
    found, todo = [], list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        elif deferred or not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            todo += list(ast.iter_child_nodes(node))
    return found


def import_graph(root: Path, deferred: bool = False) -> dict[str, set[str]]:
    """vitx module → the vitx modules it imports at module level (`deferred`: inside functions too): `from .a
    import b` imports module a.b where there is one, else a."""
    known = modules(root)
    graph: dict[str, set[str]] = {name: set() for name in known}
    for name, path in known.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in module_level_imports(parsed(path), deferred):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                base = node.module or ""
                if node.level:
                    stem = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                    base = f"{stem}.{base}" if base else stem
                subs = [f"{base}.{a.name}" for a in node.names]
                targets = [t for t in subs if t in known] + ([base] if any(t not in known for t in subs) else [])
            for target in targets:
                while target and target not in known:  # `import vitx.a.b.name`: the deepest module named
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def import_circles(root: Path = ROOT, deferred: bool = False) -> list[list[str]]:
    """The modules that import each other, directly or round a longer circle: the strongly connected components
    of the import graph with more than one module (Tarjan's)."""
    graph = import_graph(root, deferred)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(circles)


# -- 3. long functions -------------------------------------------------------------------------------------------

def long_functions(root: Path = ROOT) -> list[str]:
    """path:line name (N lines) for every function of vitx/ and the plugins spanning more than LONGEST lines."""
    found = []
    paths = sorted((root / "vitx").rglob("*.py")) + sorted((root / "plugins").glob("*/**/*.py"))
    for path in paths:
        for node in ast.walk(parsed(path)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                span = node.end_lineno - node.lineno + 1
                if span > LONGEST:
                    found.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({span} lines)")
    return found


# -- 4. one file name for two things -----------------------------------------------------------------------------

def shared_file_names(root: Path = ROOT) -> list[str]:
    """Module file names both vitx/evaluation/ and vitx/evaluators/ use (a reader cannot tell which is meant)."""
    names = [{p.name for p in (root / "vitx" / room).glob("*.py")} - {"__init__.py"}
             for room in ("evaluation", "evaluators")]
    return sorted(names[0] & names[1])


# -- the guards --------------------------------------------------------------------------------------------------

def test_each_setting_is_declared_once():
    copies = setting_copies()
    assert not copies, f"{len(copies)} settings declared more than once with the same help:\n" + \
        "\n".join(f"{name}: {', '.join(places)}" for name, places in copies.items())
    assert len(declarations(ROOT)) > 100  # the walk finds the configs (a broken one would pass vacuously)


def test_no_modules_import_each_other_in_a_circle():
    """Counting the imports inside functions too: a deferred import that closes a circle (data/photometry ↔
    data/views was one, its other half under TYPE_CHECKING) still ties the two modules together."""
    circles = import_circles(deferred=True)
    assert not circles, f"{len(circles)} import circles:\n" + "\n".join(" <-> ".join(c) for c in circles)
    assert sum(map(len, import_graph(ROOT).values())) > 200  # the parser sees the imports


def test_no_function_is_over_100_lines():
    long = long_functions()
    assert not long, f"{len(long)} functions over {LONGEST} lines:\n" + "\n".join(long)


def test_evaluation_and_evaluators_share_no_file_name():
    shared = shared_file_names()
    assert not shared, f"vitx/evaluation/ and vitx/evaluators/ both have {', '.join(shared)}"


def main(root: Path, listed: bool = False) -> None:
    """The four counts of the checkout at `root`, one line each (`listed`: each followed by what it counts)."""
    if not (root / "vitx" / "__init__.py").is_file():
        sys.exit(f"{root} has no vitx/ package: give the root of a vitx checkout")
    sys.path.insert(0, str(root))
    counts = {"settings copied across commands": [f"{n}: {', '.join(p)}" for n, p in setting_copies(root).items()],
              "import circles": [" <-> ".join(c) for c in import_circles(root)],
              f"functions over {LONGEST} lines": long_functions(root),
              "file names shared by vitx/evaluation/ and vitx/evaluators/": shared_file_names(root)}
    for what, items in counts.items():
        print(f"{what}: {len(items)}" + "".join(f"\n    {item}" for item in items if listed))


if __name__ == "__main__":  # python -m tests.test_house [--list] [ROOT]
    args = [a for a in sys.argv[1:] if a != "--list"]
    main(Path(args[0]).resolve() if args else ROOT, "--list" in sys.argv[1:])
