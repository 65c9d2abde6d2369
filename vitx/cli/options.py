"""Options shared by the commands that train: a recipe file, and --set overrides of any setting."""
from __future__ import annotations

import typer

RECIPE = typer.Option(None, "--recipe", help="A recipe file (TOML, see recipes/); options and --set override it.")
SET = typer.Option([], "--set", help="key=value, repeatable: any setting by its name, type-checked.")
