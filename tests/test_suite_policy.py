"""What the suite itself enforces: a deprecated API used by vitx fails the test that reaches it, while a
dependency's own notice is ignored only where pyproject.toml names it."""
from __future__ import annotations

import warnings

import pytest


def test_deprecation_warnings_from_vitx_fail_and_dependencies_are_named():
    with pytest.raises(DeprecationWarning):
        warnings.warn_explicit("old API", DeprecationWarning, "vitx/data/decoding.py", 1, module="vitx.data.decoding")
    with pytest.raises(PendingDeprecationWarning):
        warnings.warn_explicit("old API", PendingDeprecationWarning, "plugin.py", 1, module="vitx_mae.objective")
    with warnings.catch_warnings(record=True) as seen:  # named in pyproject.toml: ignored, nothing recorded
        warnings.warn_explicit("The image decoding and encoding capabilities of TorchVision are deprecated since "
                               "torchvision 0.29", DeprecationWarning, "torchvision/io/image.py", 33,
                               module="torchvision.io.image")
    assert seen == []
