"""The Section 4.5 analyses against known answers, and `vitx inspect` end to end."""
import itertools
import json
import math
import re

import numpy as np
import pytest
import torch
from PIL import Image

import vitx
from .helpers import vitx_cli
from vitx.analysis import (attention_maps, filter_components, mean_attention_distance, position_similarity, recording,
                           rollout, row_column_structure)
from vitx.analysis.inspection import attention_statistics
from vitx.registry import BACKBONES


def test_rollout_of_identity_attention_is_the_identity():
    eye = torch.eye(17).expand(2, 3, 17, 17)  # (B, H, N, N)
    assert torch.equal(rollout([eye] * 4), torch.eye(17).expand(2, 17, 17))


def test_rollout_matches_the_definition_by_hand():
    torch.manual_seed(0)
    maps = [torch.rand(1, 2, 5, 5).softmax(-1) for _ in range(3)]
    expected = np.eye(5)
    for a in maps:  # average heads, add the residual, renormalise, multiply from the first layer up
        layer = a[0].mean(0).numpy() + np.eye(5)
        expected = (layer / layer.sum(1, keepdims=True)) @ expected
    assert np.allclose(rollout(maps)[0].numpy(), expected, atol=1e-6)


@pytest.mark.parametrize("k", [2, 3, 5, 8])
def test_uniform_attention_distance_is_the_mean_pairwise_distance(k):
    patch = 16
    cells = list(itertools.product(range(k), range(k)))
    exact = sum(math.dist(a, b) for a in cells for b in cells) / len(cells) ** 2 * patch
    uniform = torch.full((2, 3, k * k + 1, k * k + 1), 1 / (k * k + 1))  # [class] + k² patches, all equal
    assert torch.allclose(mean_attention_distance(uniform, (k, k), patch), torch.full((3,), exact), rtol=1e-5)


def test_attention_distance_limits():
    k, patch = 32, 1
    uniform = torch.full((1, 1, k * k, k * k), 1 / (k * k))
    # for a fine grid the mean distance of two points in a square tends to 0.5214 × its side
    assert float(mean_attention_distance(uniform, (k, k), patch, prefix=0)) == pytest.approx(0.5214 * k, rel=0.02)
    self_only = torch.eye(10).expand(1, 2, 10, 10)  # [class] + 3×3: each patch attends to itself
    assert torch.equal(mean_attention_distance(self_only, (3, 3), 8), torch.zeros(2))


def sincos_2d(rows: int, cols: int, dim: int) -> torch.Tensor:
    """MAE-style fixed 2D sine-cosine embeddings: half the channels encode the row, half the column."""
    def axis(pos, d):
        angles = np.outer(pos, 1.0 / 10000 ** (np.arange(d // 2) / (d / 2)))
        return np.concatenate([np.sin(angles), np.cos(angles)], axis=1)
    r, c = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    return torch.tensor(np.concatenate([axis(r.ravel(), dim // 2), axis(c.ravel(), dim // 2)], axis=1)).float()


@pytest.mark.parametrize("grid", [(4, 4), (8, 8), (6, 10)])
def test_sine_cosine_embeddings_show_the_row_column_pattern(grid):
    sincos = row_column_structure(position_similarity(sincos_2d(*grid, 64)), grid)
    assert sincos["nearest_in_row_or_column"] == 1.0  # every patch's most similar patch shares its row or column
    assert sincos["row_column_gap"] > 0.04 and sincos["distance_correlation"] < -0.7
    torch.manual_seed(0)
    random = row_column_structure(position_similarity(torch.randn(grid[0] * grid[1], 64)), grid)
    assert abs(random["row_column_gap"]) < 0.02 and abs(random["distance_correlation"]) < 0.15


def test_filter_components_recover_the_directions_of_the_filters():
    torch.manual_seed(0)
    backbone = vitx.create_backbone("vit-micro/4")  # filters: 128 of 3×4×4 = 48 values
    u, v = torch.linalg.qr(torch.randn(48, 2))[0].T  # two orthonormal directions
    a, b = torch.randn(128, 1) * 3, torch.randn(128, 1)
    backbone.patch_embed.proj.weight.data = (a * u + b * v).reshape(128, 3, 4, 4)
    comps, explained = filter_components(backbone, k=28)
    assert comps.shape == (28, 3, 4, 4)
    assert abs(float(comps[0].flatten() @ u)) > 0.999 and abs(float(comps[1].flatten() @ v)) > 0.999
    assert explained[0] > 0.8 and float(explained[2:].sum()) < 1e-6


def test_recorded_attention_is_the_fused_kernel_attention():
    torch.manual_seed(0)
    backbone = vitx.create_backbone("vit-micro/4").eval()
    attn = backbone.blocks[2].attn
    assert attn.fused_attn  # the model keeps scaled_dot_product_attention
    images = torch.randn(2, 3, 32, 32)
    inputs, outputs = [], []
    hooks = [attn.register_forward_pre_hook(lambda m, a: inputs.append(a[0])),
             attn.register_forward_hook(lambda m, a, out: outputs.append(out))]
    with torch.no_grad(), recording(backbone) as maps:
        features = backbone(images)
    for h in hooks:
        h.remove()
    assert torch.equal(features, backbone(images))  # recording changes nothing
    assert len(maps) == 6 and maps[2].shape == (2, 4, 65, 65)
    x = inputs[0]
    v = attn.qkv(x).reshape(2, 65, 3, 4, 32).permute(2, 0, 3, 1, 4)[2]  # (B, H, N, hd)
    rebuilt = attn.proj((maps[2] @ v).transpose(1, 2).reshape(2, 65, 128))
    assert torch.allclose(rebuilt, outputs[0], atol=1e-5)
    assert torch.allclose(maps[2].sum(-1), torch.ones(2, 4, 65), atol=1e-5)


@pytest.mark.parametrize("name", BACKBONES.names() + ["timm:deit_tiny_distilled_patch16_224"])
def test_attention_analyses_run_on_every_registered_backbone(name):
    """Also a timm ViT by name, with two prefix tokens ([class] and [dist])."""
    patch = int((re.search(r"(?:/|patch)(\d+)", name) or [0, 16])[1])
    # a 4 × 4 grid (the R50 hybrid: 2 × 2 of its 16 px stride) keeps B/8 and H/14 to a second: the code is the same
    overrides = {"depth": 2, "img_size": 32 if name.startswith("r50") else 4 * patch}
    backbone = vitx.create_backbone(name, **overrides).eval()
    size = int(backbone.patch_embed.img_size[0])
    images = torch.randn(2, 3, size, size)
    maps = attention_maps(backbone, images)
    assert len(maps) == 2 and rollout(maps).shape[-1] == maps[0].shape[-1]
    distances = attention_statistics(backbone, images)
    assert len(distances) == 2 and all(0 < d < size * 1.5 for layer in distances for d in layer)
    grid, prefix = tuple(backbone.patch_embed.grid_size), backbone.num_prefix_tokens  # 2 for the distilled DeiT
    assert distances[0] == pytest.approx(mean_attention_distance(maps[0], grid, size // grid[0], prefix).tolist(),
                                         rel=1e-4)


def test_vitx_inspect_writes_four_figures_and_the_numbers(pretrained_run, tmp_path):
    picture = tmp_path / "picture.png"
    Image.fromarray((np.random.default_rng(0).random((40, 30, 3)) * 255).astype(np.uint8)).save(picture)
    out = tmp_path / "inspect"
    proc = vitx_cli("inspect", str(pretrained_run), "--image", str(picture), "--samples", "16",
                    "--output-dir", str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    for name in vitx.analysis.FIGURES:
        with Image.open(out / name) as img:
            assert img.size[0] > 100 and img.size[1] > 100
    numbers = json.loads((out / "analysis.json").read_text())
    assert numbers["grid"] == [4, 4] and numbers["data"] == "embedded:digits"  # the run's own data
    assert len(numbers["attention_distance"]["pixels"]) == 4 and len(numbers["attention_distance"]["pixels"][0]) == 2
    assert len(numbers["embedding_filters"]["explained_variance"]) == 28
    assert np.array(numbers["position_similarity"]["matrix"]).shape == (16, 16)
    assert np.array(numbers["attention_rollout"]["maps"]).shape == (1, 4, 4)
    assert numbers["samples"] == numbers["attention_distance"]["images"] == 16 and "samples_asked" not in numbers
    # again into its own folder (replaced unasked), asking for more images than the data holds: the count used
    proc = vitx_cli("inspect", str(pretrained_run), "--image", str(picture), "--samples", "100000",
                    "--components", "100000", "--output-dir", str(out))
    numbers = json.loads((out / "analysis.json").read_text())
    assert proc.returncode == 0 and numbers["samples_asked"] == 100000, proc.stderr[-2000:]
    assert numbers["samples"] == numbers["attention_distance"]["images"] == 360
    assert f"(px, 360 images of embedded:digits (the data holds 360 of the 100000 asked))" in proc.stderr
    filters = numbers["embedding_filters"]  # (as many components as the filters have: said, and recorded)
    assert filters["components_asked"] == 100000 and len(filters["explained_variance"]) < 100000
    assert f"{len(filters['explained_variance'])} principal components, all the filters have" in proc.stderr


def test_vitx_inspect_user_errors_are_one_line(tmp_path, pretrained_run):
    for args, needle in [(["/no/such/run"], "no such checkpoint directory"),
                         ([str(pretrained_run), "--image", str(tmp_path / "missing.png")], "no such file"),
                         ([str(pretrained_run), "--samples", "0"], "--samples and --components must be at least 1")]:
        proc = vitx_cli("inspect", *args, "--output-dir", str(tmp_path / "o"))
        assert proc.returncode == 2 and needle in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    (tmp_path / "file").write_text("")  # an --output-dir through a file
    proc = vitx_cli("inspect", str(pretrained_run), "--output-dir", str(tmp_path / "file" / "o"))
    assert proc.returncode == 2 and proc.stderr == \
        f"error: cannot write {tmp_path / 'file' / 'o'}: {tmp_path / 'file'} is a file, not a folder\n", proc.stderr


@pytest.mark.parametrize("limit", [50_000, 100_000])
def test_inspect_refuses_an_image_claiming_too_many_pixels_in_one_line(tmp_path, monkeypatch, limit):
    """--image is read as `vitx predict` and training read files: a 20000x20000 PNG (here 400x300 against a limit
    lowered to keep the test small) is one line naming it. Above twice PIL's limit inspect raised PIL's
    DecompressionBombError as a traceback; between once and twice it decoded the whole image, warning only."""
    Image.new("1", (400, 300)).save(tmp_path / "bomb.png")  # 120,000 pixels in a few hundred bytes
    (tmp_path / "notes.png").write_text("not a picture")
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", limit)
    shown = "120,000 pixels" if limit == 50_000 else "400x300 pixels"  # above twice the limit, PIL's own count
    for name, line in (("bomb.png", f"image {tmp_path / 'bomb.png'} is {shown}, more than the {limit:,} pixels vitx "
                                    "decodes (PIL.Image.MAX_IMAGE_PIXELS, a guard against decompression bombs); "
                                    "resize it first"),
                       ("notes.png", f"cannot decode image {tmp_path / 'notes.png'}: cannot identify image file")):
        proc = vitx_cli("inspect", "scratch", "--model", "vit-nano/4", "--image", str(tmp_path / name), "--samples",
                        "4", "--output-dir", str(tmp_path / "out"))
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert proc.stderr.strip() == f"error: {line}"
    assert not (tmp_path / "out" / "analysis.json").exists()


def test_a_backbone_without_class_token_skips_only_the_rollout(tmp_path):
    from vitx.analysis import inspect_backbone

    backbone = vitx.create_backbone("vit-nano/4", class_token=False, global_pool="avg")
    numbers = inspect_backbone(backbone, tmp_path / "o", data="embedded:shapes", samples=4)
    assert "skipped" in numbers["attention_rollout"] and len(numbers["attention_distance"]["pixels"]) == 4
    assert sorted(p.name for p in (tmp_path / "o").glob("*.png")) == sorted(vitx.analysis.FIGURES[:3])
