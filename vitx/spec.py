"""Parse component specs such as `mpp(corrupt_rate=0.4)` or `embedded:shapes(classes=10)`.

Values are Python literals read with `ast.literal_eval`; nothing is ever evaluated as code.
"""
from __future__ import annotations

import ast
import itertools
from typing import Any

from .errors import VitxError


def parse_spec(text: str) -> tuple[str, dict[str, Any]]:
    """Split `name(k=v, ...)` into the name and a dict of literal keyword options."""
    text = text.strip()
    if "(" not in text:
        return text, {}
    if not text.endswith(")"):
        raise VitxError(f"cannot parse '{text}': expected name(key=value, ...)")
    name, args = text[: text.index("(")].strip(), text[text.index("(") :]
    try:
        call = ast.parse(f"f{args}", mode="eval").body
    except SyntaxError:
        raise VitxError(f"cannot parse options in '{text}': expected name(key=value, ...)") from None
    if not isinstance(call, ast.Call) or call.args:
        raise VitxError(f"options in '{text}' must be key=value pairs")
    options: dict[str, Any] = {}
    for kw in call.keywords:
        if kw.arg is None:  # f(**x)
            raise VitxError(f"options in '{text}' must be key=value pairs")
        if kw.arg in options:  # (Python's parser lets a repeated keyword through; the last would win unsaid)
            raise VitxError(f"option '{kw.arg}' is given twice in '{text}'; keep one")
        try:
            options[kw.arg] = ast.literal_eval(kw.value)
        except ValueError:
            raise VitxError(f"option '{kw.arg}' in '{text}' must be a literal (number, string, bool, tuple)") from None
    return name, options


def split_specs(text: str, flag: str = "--task") -> list[str]:
    """`a,b,c` → the data specs or tasks, split at commas outside parentheses and braces
    (`embedded:digits(length=300)` keeps its options, `shards/train-{a,b}.tar` its pattern)."""
    # nesting depth after each character: options, and shard patterns {a,b}
    depths = itertools.accumulate({"(": 1, ")": -1, "{": 1, "}": -1}.get(char, 0) for char in text)
    cuts = [i for i, (char, depth) in enumerate(zip(text, depths)) if char == "," and depth == 0]
    items = [item for a, b in zip([-1, *cuts], [*cuts, len(text)]) if (item := text[a + 1:b].strip())]
    if not items:
        raise VitxError(f"{flag} is empty: give one or more, comma-separated")
    return items
