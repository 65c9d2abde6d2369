"""`vitx models`: the backbone registry as a table."""
from __future__ import annotations

import typer
from rich.console import Console
from rich.table import Table

from ..backbones import BackboneSpec
from ..registry import BACKBONES


def models(pattern: str = typer.Argument("*", help="fnmatch filter, e.g. 'vit-b*'.")) -> None:
    """List the registered backbones (and how to name any timm ViT)."""
    table = Table(title="vitx backbones")
    for col in ("name", "layers", "width", "MLP", "heads", "patch", "image", "params"):
        table.add_column(col, justify="left" if col == "name" else "right")
    for name in BACKBONES.names(pattern):
        spec = BACKBONES.get(name).obj
        if isinstance(spec, BackboneSpec):
            patch = f"{spec.patch}" if spec.stride is None else f"1 (s{spec.stride})"
            cells = [spec.depth, spec.width, spec.mlp, spec.heads, patch, spec.img_size]
            params = spec.num_parameters()  # from the table row: no network is built
        else:  # a user factory: built on the meta device
            from ..backbones import count_parameters

            cells, params = ["-"] * 6, count_parameters(name)
        table.add_row(name, *map(str, cells), f"{params / 1e6:.1f}M")
    table.caption = "also: timm:<any timm ViT name>, e.g. timm:vit_small_patch16_224 (params: backbone, no head)"
    Console().print(table)
