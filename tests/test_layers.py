"""The house's floor plan: every top-level module or package of vitx/ (a room) imports only rooms on lower
floors, and no imports run in a circle. A new arrow upward fails here, naming it."""
from __future__ import annotations

import ast
from pathlib import Path

from .helpers import ROOT

# lowest first; a room may import only rooms on floors below its own
FLOORS = [
    ("console", "errors", "hub", "invocation", "lazy"),  # hub: whether the Hugging Face hub can be asked (no vitx
    # imports); console: where a command's lines for people go, and one line said as written
    ("heads", "plots", "registry", "safe_io", "settings", "spec"),  # safe_io: atomic files, safetensors, no unpickling
    ("backbones", "discovery", "recipe"),
    ("data",),
    ("analysis", "evaluation", "objectives", "tasks"),
    ("adapters",),
    ("runs",),  # a saved transfer's backbone is rebuilt with its adapters' own weights (VPT's prompts)
    ("runner",),
    ("evaluators", "predict", "speed", "transfer"),  # evaluators: one file each, found by name (vitx eval, the monitor)
    ("export", "reproduce"),
    ("pages",),  # a run's page reads every command's settings; the commands hand its writers to the runner
    ("cli",),
    ("__main__",),
]


def import_arrows(package: Path) -> set[tuple[str, str]]:
    """(room, room it imports) for every import in the package, at module level or inside functions."""
    arrows = set()
    for path in package.rglob("*.py"):
        parts = path.relative_to(package.parent).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        where = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
        room = module.split(".")[1] if "." in module else None
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level:
                base = where.split(".")[: len(where.split(".")) - node.level + 1]
                targets = [".".join(base + [node.module])] if node.module else \
                    [".".join(base + [a.name]) for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                targets = [node.module or ""]
            else:
                continue
            for target in targets:
                bits = target.split(".")
                if bits[0] == "vitx" and len(bits) > 1 and not bits[1].startswith("__") and room and bits[1] != room:
                    arrows.add((room, bits[1]))
    return arrows


def test_every_import_goes_down_a_floor_and_none_runs_in_a_circle():
    floor = {room: n for n, rooms in enumerate(FLOORS) for room in rooms}
    rooms = {p.stem if p.is_file() else p.name for p in (ROOT / "vitx").iterdir()
             if (p.suffix == ".py" or (p / "__init__.py").exists()) and p.stem != "__init__"}
    assert rooms == set(floor), f"rooms without a floor: {sorted(rooms - set(floor))}; gone: {sorted(set(floor) - rooms)}"
    arrows = import_arrows(ROOT / "vitx")
    upward = sorted(f"{a} (floor {floor[a]}) imports {b} (floor {floor[b]})" for a, b in arrows if floor[b] >= floor[a])
    assert not upward, "imports that do not go down a floor:\n" + "\n".join(upward)
    assert len(arrows) > 60  # the parser sees the imports (a broken walk would pass vacuously)
