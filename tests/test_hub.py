"""The Hugging Face hub offline or out of reach: every read of it (timm's weights, a hub dataset, a VTAB task's
copy) is one line that says why, asked with one TCP connection, never the hub clients' minute of retries."""
import socket

import pytest

import vitx
from vitx import hub
from vitx.errors import VitxError


def test_offline_reads_say_so_in_one_line():
    """conftest sets HF_HUB_OFFLINE=1, as a cluster without internet would."""
    from vitx.data import open_source

    with pytest.raises(VitxError, match=r"timm:vit_tiny_patch16_224 \(offline: HF_HUB_OFFLINE=1, and no copy is in "
                                        r"the cache here\)"):
        vitx.create_backbone("timm:vit_tiny_patch16_224", pretrained=True)
    with pytest.raises(VitxError, match=r"cannot load 'someone/nothing' from the Hugging Face hub \(offline: "
                                        r"HF_HUB_OFFLINE=1, and no copy is in the cache here\)"):
        open_source("someone/nothing")


def test_an_unreachable_hub_is_asked_once_and_its_clients_read_their_caches_only(monkeypatch):
    """Online by its settings, but the hub's port is closed (a firewall, no route): one connection is tried, the
    clients are put offline for the process (a cached copy would load at once), and each read says why."""
    import datasets.config
    from huggingface_hub import constants

    from vitx.data import open_source
    from vitx.tasks import get_task
    from vitx.tasks.splits import open_task

    for key in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.setenv(key, "0")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")  # (the discard port: nothing listens)
    monkeypatch.setattr(hub, "_switched", {})
    tried = []
    connect = socket.create_connection
    monkeypatch.setattr(socket, "create_connection", lambda address, *a, **k: tried.append(address) or
                        connect(address, *a, **k))
    why = "127.0.0.1 cannot be reached from here: Connection refused"
    with pytest.raises(VitxError, match=rf"timm:vit_tiny_patch16_224 \({why}, and no copy is in the cache here\)"):
        vitx.create_backbone("timm:vit_tiny_patch16_224", pretrained=True)
    assert constants.HF_HUB_OFFLINE and datasets.config.HF_HUB_OFFLINE
    with pytest.raises(VitxError, match=rf"'someone/nothing' from the Hugging Face hub \({why}, and no copy is in "
                                        r"the cache here\)"):
        open_source("someone/nothing")
    with pytest.raises(VitxError, match=rf"vtab/dtd has no data offline \({why}\): download it"):
        open_task(get_task("vtab/dtd"), 20)
    assert open_task(get_task("vtab/dsprites_loc"), 20).origin == "embedded"  # its regeneration, at once
    assert tried == [("127.0.0.1", 9)]
    hub.reset()  # (what `vitx.cli.main` does when its command ends: the caller's clients as they were)
    assert not constants.HF_HUB_OFFLINE and not datasets.config.HF_HUB_OFFLINE and not hub._switched


def test_a_hub_reached_through_a_proxy_is_not_probed(monkeypatch):
    """The clients go through HTTPS_PROXY where one is set; a direct connection failing says nothing then."""
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    monkeypatch.setattr(socket, "create_connection", lambda *a, **k: pytest.fail("probed past the proxy"))
    assert hub._probe("https://huggingface.co") is None
    monkeypatch.setenv("NO_PROXY", "huggingface.co")  # bypassed: probed as any direct connection
    monkeypatch.setattr(socket, "create_connection", lambda *a, **k: (_ for _ in ()).throw(OSError(111, "refused")))
    assert hub._probe("https://huggingface.co") == "huggingface.co cannot be reached from here: refused"


def test_a_reachable_hub_is_probed_once_per_process(monkeypatch):
    """A suite asks the hub before each task's read: one connection tells, the later asks use its answer."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
    monkeypatch.setattr("huggingface_hub.constants.ENDPOINT", f"http://127.0.0.1:{server.getsockname()[1]}")
    tried = []
    connect = socket.create_connection
    monkeypatch.setattr(socket, "create_connection", lambda address, *a, **k: tried.append(address) or
                        connect(address, *a, **k))
    try:
        assert [hub.unreachable() for _ in range(3)] == [None, None, None] and len(tried) == 1
        hub.reset()  # a new command (in-process) asks again
        assert hub.unreachable() is None and len(tried) == 2
    finally:
        hub.reset()
        server.close()
