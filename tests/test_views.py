"""Views an objective declares (vitx/data/views.py): each crop its own size and augmentation, made in the loader,
seeded by (seed, position, view) so any process split and any resume see the same crops."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from vitx import VitxError
from vitx.data import Batches, Preprocess, Shapes, StreamSampler, decode
from vitx.data.views import View, expand, make_view, view_rng

MULTI = (View(count=2, scale=(0.4, 1.0), jitter=(0.4, 0.4, 0.2, 0.1), gray=0.2, blur=0.5),
         View(count=3, size=8, scale=(0.05, 0.4), blur=0.5, solarize=0.2))


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
