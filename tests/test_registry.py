import warnings

import pytest

from vitx.errors import UnknownNameError
from vitx.registry import BACKBONES, Registry
from vitx.spec import parse_spec
from vitx.errors import VitxError


def test_register_get_and_filter():
    reg = Registry("widget")

    @reg.register("alpha", description="first")
    def alpha():
        return 1

    reg.register("beta", lambda: 2)
    assert reg.get("alpha").obj() == 1 and reg.get("alpha").description == "first"
    assert reg.names() == ["alpha", "beta"]
    assert reg.names("b*") == ["beta"]
    assert "alpha" in reg and len(reg) == 2


def test_unknown_name_lists_close_matches():
    with pytest.raises(UnknownNameError) as info:
        BACKBONES.get("vit-b/17")
    message = str(info.value)
    assert message.startswith("unknown backbone 'vit-b/17'")
    assert "vit-b/16" in message


def test_overwrite_warns():
    reg = Registry("widget")
    reg.register("a", 1)
    with pytest.warns(UserWarning, match="already registered"):
        reg.register("a", 2)
    assert reg.get("a").obj == 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        reg.register("a", 3, overwrite=True)


def test_parse_spec_reads_literals_only():
    assert parse_spec("mpp") == ("mpp", {})
    assert parse_spec("mpp(corrupt_rate=0.4, mode='mean', sizes=(4, 4))") == (
        "mpp", {"corrupt_rate": 0.4, "mode": "mean", "sizes": (4, 4)})
    with pytest.raises(VitxError, match="literal"):
        parse_spec("mpp(x=__import__('os').system('true'))")
    with pytest.raises(VitxError):
        parse_spec("mpp(0.4)")
    with pytest.raises(VitxError, match=r"^option 'head' is given twice in 'supervised\(head='mlp', head='linear'\)'; "
                                        "keep one$"):  # (the last one won, unsaid)
        parse_spec("supervised(head='mlp', head='linear')")
    with pytest.raises(VitxError, match="key=value pairs"):
        parse_spec("mpp(**{'x': 1})")
