"""`vitx inspect`: what a ViT learned, as the paper's Section 4.5 figures and the numbers behind them."""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console
from rich.progress import Progress

from ..console import say


def inspect(
    start: str = typer.Argument(..., metavar="CHECKPOINT", help="A vitx run or checkpoint directory, timm:<name>, or scratch (with --model)."),
    model: Optional[str] = typer.Option(None, help="Backbone for scratch (its initialisation)."),
    image: List[str] = typer.Option([], help="An image to show attention rollout on; repeatable. \\[default: 6 embedded images]"),
    data: Optional[str] = typer.Option(None, help="Images for the mean attention distance. \\[default: the checkpoint's embedded data, else embedded:shapes]"),
    samples: int = typer.Option(128, help="How many images the mean attention distance averages over (the paper: 128)."),
    components: int = typer.Option(28, help="Principal components of the embedding filters to show (the paper: 28)."),
    output_dir: Optional[str] = typer.Option(None, help="Where the figures and analysis.json go; files of those names there are replaced only when inspect wrote them. \\[default: CHECKPOINT/inspect, or runs/inspect/<name>]"),
    force: bool = typer.Option(False, "--force", help="Replace files of the figures' and analysis.json's names in --output-dir that inspect did not write (never a run's own)."),
) -> None:
    """Embedding filters, position-embedding similarity, mean attention distance, attention rollout."""
    from ..analysis import FIGURES, inspect_backbone
    from ..analysis.inspection import is_analysis
    from ..plots.canvas import is_vitx_figure
    from ..runner.launch import is_main_process, process_device
    from ..runs.start import load_start, start_data, start_input
    from ..settings.paths import writable_file, writable_folder

    if not is_main_process():  # under a launcher: one process inspects, on its own device
        return
    name = start if start != "scratch" else f"scratch-{model}"
    out = Path(output_dir) if output_dir else (
        Path(start) / "inspect" if Path(start).is_dir() else Path("runs/inspect") / name.replace("/", "-").replace(":", "-"))
    writable_folder(out)  # (a refusal before the progress bar, whose end would print first)
    for written in (*FIGURES, "analysis.json"):  # a user's files of these names are not replaced unasked
        ours = is_analysis if written == "analysis.json" else is_vitx_figure
        writable_file(out / written, "--output-dir", force, ours=ours,
                      what="what vitx inspect wrote" if written == "analysis.json" else "a figure vitx drew")
    backbone = load_start(start, model).to(process_device())
    given = start_input(start, backbone)  # the start's own normalisation
    normal = {"mean": tuple(given["mean"]), "std": tuple(given["std"]), "interpolation": given["interpolation"]}
    data = data or start_data(start)
    console = Console(stderr=True)
    with Progress(console=console, transient=True) as progress:
        result = inspect_backbone(backbone, out, data=data, samples=samples, image_paths=list(image) or None,
                                  components=components, progress=progress, normal=normal)
    pos = result["position_similarity"]
    means = ", ".join(f"{d:.1f}" for d in result["attention_distance"]["layer_mean"])
    say(console, f"{name}: {result['image_size']}px, {result['grid'][0]}×{result['grid'][1]} patches")
    say(console, f"  position embeddings: same row/column {pos['same_row_or_column']:.3f} vs neither "
                 f"{pos['neither']:.3f} (gap {pos['row_column_gap']:.3f})")
    filters = result["embedding_filters"]
    if "components_asked" in filters:  # (the filters span no more: D filters of 3·P² pixels)
        say(console, f"  embedding filters: {len(filters['explained_variance'])} principal components, all the "
                     f"filters have (--components {components} asked)")
    fewer = f" (the data holds {result['samples']} of the {samples} asked)" if "samples_asked" in result else ""
    say(console, f"  mean attention distance by layer (px, {result['samples']} images of {data}{fewer}): {means}")
    written = [f for f in FIGURES if (out / f).exists()]
    say(console, f"wrote {', '.join(written)} and analysis.json → {out}")
