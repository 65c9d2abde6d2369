"""The 19 VTAB-1k tasks (Zhai et al. 2019), with labels as google-research/task_adaptation defines them.

Data: clip-benchmark's hub copies (`clip-benchmark/wds_vtab-<suffix>`), which store VTAB's own labels except
for dSprites (the raw factor: x 0..31, orientation 0..39, binned here as task_adaptation does). The two
dSprites tasks are also embedded (regenerated procedurally): offline (or online without a network) they run
from the regeneration, which is synthetic and left out of VTAB means; online they come from the hub copy.
"""
from __future__ import annotations

from functools import partial

from ..registry import register_task
from .base import Task
from .dsprites import DSprites, bin_factor

NATURAL, SPECIALIZED, STRUCTURED = "natural", "specialized", "structured"


# name, group, classes, label definition, TFDS source, hub suffix
TABLE = [
    ("caltech101", NATURAL, 102, "TFDS label (101 categories + background)", "caltech101:3.*.*", "caltech101"),
    ("cifar100", NATURAL, 100, "fine label", "cifar100:3.*.*", "cifar100"),
    ("dtd", NATURAL, 47, "texture category", "dtd:3.*.*", "dtd"),
    ("flowers102", NATURAL, 102, "flower species", "oxford_flowers102:2.*.*", "flowers"),
    ("pets", NATURAL, 37, "cat/dog breed", "oxford_iiit_pet:3.*.*", "pets"),
    ("svhn", NATURAL, 10, "digit", "svhn_cropped:3.*.*", "svhn"),
    ("sun397", NATURAL, 397, "scene category", "sun397/tfds:4.*.*", None),
    ("camelyon", SPECIALIZED, 2, "metastatic tissue in the centre patch", "patch_camelyon:2.*.*", "pcam"),
    ("eurosat", SPECIALIZED, 10, "land-use class", "eurosat/rgb:2.*.*", "eurosat"),
    ("resisc45", SPECIALIZED, 45, "scene class", "resisc45:3.*.*", "resisc45"),
    ("retinopathy", SPECIALIZED, 5, "severity 0-4", "diabetic_retinopathy_detection/btgraham-300:3.*.*",
     "diabetic_retinopathy"),
    ("clevr_count", STRUCTURED, 8, "number of objects - 3 (3..10 → 0..7)", "clevr:3.*.*", "clevr_count_all"),
    ("clevr_dist", STRUCTURED, 6, "closest object's depth binned at [0, 8, 8.5, 9, 9.5, 10, 100]", "clevr:3.*.*",
     "clevr_closest_object_distance"),
    ("dmlab", STRUCTURED, 6, "{close, far, very far} × {positive, negative reward}", "dmlab:2.0.1", "dmlab"),
    ("kitti_dist", STRUCTURED, 4, "closest Car/Van/Truck depth z (1000 if none) binned at [-100, 8, 20, 999]",
     "kitti:3.1.0", "kitti_closest_vehicle_distance"),
    ("dsprites_loc", STRUCTURED, 16, "x position (32 values) // 2", "dsprites:2.*.*", "dsprites_label_x_position"),
    ("dsprites_ori", STRUCTURED, 16, "orientation (40 values) binned by 2.5", "dsprites:2.*.*",
     "dsprites_label_orientation"),
    ("smallnorb_azi", STRUCTURED, 18, "azimuth (18 values)", "smallnorb:2.*.*", "smallnorb_label_azimuth"),
    ("smallnorb_ele", STRUCTURED, 9, "elevation (9 values)", "smallnorb:2.*.*", "smallnorb_label_elevation"),
]

RELEASE = {  # vitx name → folder name in the VTAB-1k folder release (NOAH's get_vtab1k.py), where they differ
    "cifar100": "cifar", "flowers102": "oxford_flowers102", "pets": "oxford_iiit_pet", "camelyon": "patch_camelyon",
    "retinopathy": "diabetic_retinopathy", "kitti_dist": "kitti",
}

DSPRITES = {"dsprites_loc": "x_position", "dsprites_ori": "orientation"}  # the factor each task bins
EMBEDDED = {name: partial(DSprites, factor=factor) for name, factor in DSPRITES.items()}  # split → source
HUB_LABELS = {name: partial(bin_factor, factor=factor) for name, factor in DSPRITES.items()}  # raw → label

for _name, _group, _classes, _label, _tfds, _suffix in TABLE:
    register_task(f"vtab/{_name}", Task(
        name=f"vtab/{_name}", group=_group, num_classes=_classes, label=_label, tfds=_tfds,
        hub=f"clip-benchmark/wds_vtab-{_suffix}" if _suffix else None, hub_label=HUB_LABELS.get(_name),
        embedded=EMBEDDED.get(_name), release=RELEASE.get(_name, _name),
    ), description=_label, group=_group, suite="vtab")

GROUPS = (NATURAL, SPECIALIZED, STRUCTURED)
