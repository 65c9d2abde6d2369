"""Views an objective declares (vitx/data/views.py): each crop its own size and augmentation, made in the loader,
seeded by (seed, position, view) so any process split and any resume see the same crops."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from vitx import VitxError
from vitx.data import Batches, Preprocess, Shapes, StreamSampler, decode
from vitx.data.photometry import apply, draw
from vitx.data.views import View, expand, make_crop, view_rng

MULTI = (View(count=2, scale=(0.4, 1.0), jitter=(0.4, 0.4, 0.2, 0.1), gray=0.2, blur=0.5),
         View(count=3, size=8, scale=(0.05, 0.4), blur=0.5, solarize=0.2))


def make_view(image: torch.Tensor, view: View, interpolation: str, rng: np.random.Generator) -> torch.Tensor:
    """One whole crop of a (3, H, W) uint8 image, as the loader makes it: the geometry, then the photometry drawn
    from the same generator → (3, S, S) uint8."""
    crop = make_crop(image, view, interpolation, rng)
    return apply(crop[None], draw(view, rng))[0]


def test_expand_lists_one_entry_per_crop_with_its_size():
    crops = expand(MULTI, 16)
    assert [v.size for v in crops] == [16, 16, 8, 8, 8]
    assert all(v.count == 1 for v in crops)


@pytest.mark.parametrize("view, needle", [
    (View(flip=1.5), "flip is a probability"), (View(count=0), "count"), (View(scale=(0.5, 0.2)), "scale"),
    (View(sigma=(0.0, 1.0)), "sigma"), (View(jitter=(0.1, 0.1, 0.1, 0.9)), "hue")])
def test_a_view_that_cannot_be_made_is_one_line(view, needle):
    with pytest.raises(VitxError, match=needle):
        view.check()


def test_a_full_view_without_colour_is_the_resized_image_or_its_mirror():
    image = decode(Shapes(size=16).load(3)[0])  # (3, 16, 16) uint8
    plain = View(size=16, scale=(1.0, 1.0), ratio=(1.0, 1.0))
    outs = [make_view(image, plain, "bicubic", view_rng(0, p, 0, 0)) for p in range(40)]
    same = sum(torch.equal(o, image) for o in outs)
    mirrored = sum(torch.equal(o, image.flip(-1)) for o in outs)
    assert same + mirrored == 40 and 8 < mirrored < 32


def test_colour_operations_stay_uint8_and_do_what_they_say():
    image = torch.randint(0, 256, (3, 16, 16), dtype=torch.uint8)
    gray = make_view(image, View(size=16, gray=1.0, flip=0.0), "bicubic", view_rng(0, 1, 0, 0))
    assert gray.dtype == torch.uint8 and torch.equal(gray[0], gray[1]) and torch.equal(gray[1], gray[2])
    full = View(size=16, scale=(1.0, 1.0), ratio=(1.0, 1.0), flip=0.0, solarize=1.0)
    solar = make_view(image, full, "bicubic", view_rng(0, 1, 0, 0))
    assert torch.equal(solar, torch.where(image >= 128, 255 - image, image))
    blurred = make_view(image, View(size=16, scale=(1.0, 1.0), ratio=(1.0, 1.0), flip=0.0, blur=1.0,
                                    sigma=(1.5, 1.5)), "bicubic", view_rng(0, 1, 0, 0))
    assert blurred.float().std() < image.float().std() * 0.6  # a 1.5 px blur smooths uniform noise


def _batch(keys, views=MULTI, seed=0):
    return Batches(Shapes(size=24), Preprocess(16), seed=seed, views=expand(views, 16)).__getitems__(keys)


def test_crops_depend_on_seed_position_and_view_only():
    """The same sample at the same stream position gets the same crops in any batch (any process's share, any
    worker, a resumed run); another position, view or seed gets other crops."""
    whole = _batch([(5, 100), (7, 101), (9, 102), (11, 103)])
    assert [tuple(v.shape) for v in whole["views"]] == [(4, 3, 16, 16)] * 2 + [(4, 3, 8, 8)] * 3
    assert all(v.dtype == torch.uint8 for v in whole["views"]) and "image" not in whole
    rank0, rank1 = _batch([(5, 100), (7, 101)]), _batch([(9, 102), (11, 103)])  # two processes' halves
    for v in range(5):
        assert torch.equal(torch.cat([rank0["views"][v], rank1["views"][v]]), whole["views"][v])
    assert not torch.equal(_batch([(5, 200)])["views"][0][0], whole["views"][0][0])  # next epoch: new crops
    assert not torch.equal(whole["views"][0][0], whole["views"][1][0])  # two global crops differ
    assert not torch.equal(_batch([(5, 100)], seed=1)["views"][0][0], whole["views"][0][0])


def test_evaluation_crops_are_the_same_at_every_evaluation():
    a, b = _batch([(3, None), (4, None)]), _batch([(3, None), (4, None)])
    assert all(torch.equal(x, y) for x, y in zip(a["views"], b["views"]))


def test_two_processes_read_their_own_crops_of_one_global_batch():
    """With 2 processes each rank takes its half of each global micro-batch, and its crops are exactly those
    one process makes for those positions: together the same crops as one process, none shared."""
    one = StreamSampler(50, 8, 0, 1, seed=3)
    two = [StreamSampler(50, 8, r, 2, seed=3) for r in (0, 1)]
    for keys, (k0, k1) in zip(one, zip(*two)):
        assert keys == k0 + k1
        whole, halves = _batch(keys), (_batch(k0), _batch(k1))
        assert all(torch.equal(torch.cat([halves[0]["views"][v], halves[1]["views"][v]]), whole["views"][v])
                   for v in range(5))
        assert not torch.equal(halves[0]["views"][0], halves[1]["views"][0])
        break


def test_one_crop_per_image_is_unchanged_without_views():
    keys = [(5, 100), (7, 101)]
    plain = Batches(Shapes(size=24), Preprocess(16), seed=0).__getitems__(keys)
    assert set(plain) == {"image", "label", "skipped"} and plain["image"].shape == (2, 3, 16, 16)
    expected = Preprocess(16).train(decode(Shapes(size=24).load(5)[0]), np.random.default_rng([0, 100]))
    assert torch.equal(plain["image"][0], expected)  # the single crop's draws are as before


def _photos(n: int, size: int) -> torch.Tensor:
    """(n, 3, size, size) uint8 of the embedded shapes: flat regions, edges and every hue."""
    return torch.stack([decode(Shapes(size=size).load(i)[0]) for i in range(n)])


@pytest.mark.parametrize("op", ["brightness", "contrast", "saturation", "hue", "gray", "blur", "solarize"])
def test_batched_photometry_is_torchvision_sample_by_sample(op, monkeypatch):
    """Each photometric op, on a micro-batch with per-sample parameters (on a GPU run all samples at once, on a
    CPU in chunks of the batch, or one by one for large crops), against torchvision's `transforms.v2` kernel
    applied to each sample with its parameter: the same bytes, except the blur (separable here, 2D there):
    within one level of 8 bits."""
    from torchvision.transforms.v2 import functional as TF

    from vitx.data import photometry
    from vitx.data.photometry import Params, apply, blur_kernel_size

    images = _photos(12, 40)  # (12, 3, 40, 40)
    rng = np.random.default_rng(0)
    n = len(images)
    factors = torch.ones((n, 4), dtype=torch.float64)
    factors[:, 3] = 0.0
    params = Params(jitter=torch.zeros(n, dtype=torch.bool), order=torch.arange(4).repeat(n, 1), factors=factors,
                    gray=torch.zeros(n, dtype=torch.bool), sigma=torch.zeros(n, dtype=torch.float64),
                    solarize=torch.zeros(n, dtype=torch.bool))
    jitter = {"brightness": (0, TF.adjust_brightness), "contrast": (1, TF.adjust_contrast),
              "saturation": (2, TF.adjust_saturation), "hue": (3, TF.adjust_hue)}
    if op in jitter:
        k, kernel = jitter[op]
        params.jitter[:] = True
        params.factors[:, k] = torch.from_numpy(rng.uniform(-0.4, 0.4, n) if k == 3 else rng.uniform(0.2, 1.8, n))
        expected = [kernel(x, float(f)) for x, f in zip(images, params.factors[:, k])]
    elif op == "gray":
        params.gray[::2] = True
        expected = [TF.rgb_to_grayscale(x, num_output_channels=3) if g else x for x, g in zip(images, params.gray)]
    elif op == "blur":
        params.sigma[:] = torch.from_numpy(rng.uniform(0.1, 3.0, n))
        expected = [TF.gaussian_blur(x, [blur_kernel_size(float(s), 40)] * 2, [float(s)] * 2)
                    for x, s in zip(images, params.sigma)]
    else:
        params.solarize[1::2] = True
        expected = [TF.solarize(x, 128) if s else x for x, s in zip(images, params.solarize)]
    expected = torch.stack(expected)
    # the CPU's way (batched None) with chunks of 1 sample (sample by sample), of 5, 5 and 2, and of all 12
    ways = [(True, None), (False, None)] + [(None, chunk) for chunk in (4800, 5 * 4800, 10 ** 9)]
    for batched, chunk in ways:
        if chunk:
            monkeypatch.setattr(photometry, "CPU_CHUNK", chunk)
        out = apply(images, params, batched=batched)
        worst = int((out.int() - expected.int()).abs().max())
        assert out.dtype == torch.uint8 and worst <= (1 if op == "blur" else 0), (op, batched, chunk, worst)
        assert not torch.equal(out, images)  # the op did something
        assert torch.equal(out, apply(images, params, batched=False))  # every way the same bytes
    assert apply(images[:0], params.rows(slice(0, 0))).shape == (0, 3, 40, 40)


def test_dino_views_are_the_per_sample_transforms_within_one_level():
    """DINO's whole view stack (2 global crops, 8 local: jitter in a random order, grayscale, blur, solarise),
    made as the loader makes it (geometry, then the photometry of the micro-batch), against the same crops made
    sample by sample with torchvision's kernels from the same draws: within one level everywhere; the crops the
    device would colour (a GPU run) are the same pixels."""
    import importlib

    from torchvision.transforms.v2 import functional as TF

    from vitx.data.photometry import Params, apply, blur_kernel_size, draw
    from vitx.registry import OBJECTIVES

    # the plugin as vitx finds it (its entry point): importing it directly would register it as vitx's own
    dino_views = importlib.import_module(OBJECTIVES.get("dino").obj.__module__).dino_views
    from vitx.data.views import make_crop

    views = expand(dino_views(32, 16, global_crops=2, local_crops=8), 32)
    data = Batches(Shapes(size=48), Preprocess(32), seed=4, views=views)
    keys = [(i, 1000 + i) for i in range(16)]
    made = data.__getitems__(keys)["views"]
    deferred = Batches(Shapes(size=48), Preprocess(32), seed=4, views=views, photometry_on_device=True)
    later = deferred.__getitems__(keys)

    for v, view in enumerate(views):
        for batched in (True, False):  # the device's way, and sample by sample, as the CPU's (chunked) made it
            assert torch.equal(apply(later["views"][v], Params(**later["photometry"][v]), batched=batched), made[v])
        for j, (index, position) in enumerate(keys):
            rng = view_rng(4, position, index, v)
            x = make_crop(decode(Shapes(size=48).load(index)[0]), view, "bicubic", rng)
            p = draw(view, rng)
            if bool(p.jitter):
                ops = (TF.adjust_brightness, TF.adjust_contrast, TF.adjust_saturation, TF.adjust_hue)
                for k in p.order[0].tolist():
                    x = ops[k](x, float(p.factors[0, k]))
            x = TF.rgb_to_grayscale(x, num_output_channels=3) if bool(p.gray) else x
            size = blur_kernel_size(float(p.sigma), view.size)
            x = TF.gaussian_blur(x, [size] * 2, [float(p.sigma)] * 2) if float(p.sigma) > 0 and size >= 3 else x
            x = TF.solarize(x, 128) if bool(p.solarize) else x
            assert int((made[v][j].int() - x.int()).abs().max()) <= 1, (v, j)
