"""The Hugging Face hub, asked once before vitx reads from it: reachable, or offline for this process.

Where the hub cannot be reached (no network, no DNS, a firewall), its clients (huggingface_hub, datasets)
retry each request five times with backoff and print each retry: about 30 s a file, a minute for timm's
weights, before they fail or fall back to their caches. vitx tries one TCP connection to the hub's endpoint
first; when that fails it puts the clients in offline mode for the rest of the process (what HF_HUB_OFFLINE=1
does), so that a cached copy loads at once and a missing one fails at once, its error line saying why.
"""
from __future__ import annotations

import os
import socket
from urllib.parse import urlparse

_TRUE = ("1", "true", "yes", "on")
PROBE_SECONDS = 3.0  # a hub that does not accept a connection in 3 s is not worth a minute of retries
OFFLINE = "offline: HF_HUB_OFFLINE=1"
_switched: dict[str, str] = {}  # endpoint → why this process put the hub clients offline (the probe's reason)
_reached: set[str] = set()  # endpoints this process connected to: not probed again (a suite reads the hub per task)


def _offline_env(datasets: bool) -> bool:
    keys = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE") if datasets else ("HF_HUB_OFFLINE",)
    return any(os.environ.get(k, "").strip().lower() in _TRUE for k in keys)


def offline(datasets: bool = False) -> bool:
    """HF_HUB_OFFLINE as the environment says now or huggingface_hub read it; `datasets`: HF_DATASETS_OFFLINE too
    (a dataset read goes through `datasets`, which honours either)."""
    if _offline_env(datasets):
        return True
    try:
        from huggingface_hub import constants
    except ImportError:
        return False
    return bool(getattr(constants, "HF_HUB_OFFLINE", False))


def endpoint() -> str:
    """The hub's URL as its client uses it (HF_ENDPOINT, else https://huggingface.co)."""
    try:
        from huggingface_hub import constants

        return str(constants.ENDPOINT)
    except ImportError:
        return os.environ.get("HF_ENDPOINT", "https://huggingface.co")


def _probe(url: str) -> str | None:
    """None when `url`'s host accepts a TCP connection within PROBE_SECONDS (or is reached through a proxy,
    which the clients use and this probe cannot judge), else why not."""
    import urllib.request

    parsed = urlparse(url)
    host, port = parsed.hostname or "", parsed.port or (80 if parsed.scheme == "http" else 443)
    proxies = urllib.request.getproxies()
    if (proxies.get(parsed.scheme) or proxies.get("all")) and not urllib.request.proxy_bypass(host):
        return None
    try:
        with socket.create_connection((host, port), timeout=PROBE_SECONDS):
            return None
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__  # ('Name or service not known', 'Connection refused', ...)
        return f"{host} cannot be reached from here: {reason}"


def unreachable(datasets: bool = False) -> str | None:
    """Why the hub cannot be asked now, or None when it can. Offline (HF_HUB_OFFLINE=1): 'offline'. Unreachable:
    the reason, and the hub clients are switched to offline mode for this process so that they read their
    caches at once instead of retrying. `datasets`: for a dataset (HF_DATASETS_OFFLINE=1 is offline too)."""
    if _offline_env(datasets):
        return OFFLINE
    url = endpoint()
    if url in _switched:  # (this process found it out: its clients are offline since, for that reason)
        return _switched[url]
    if offline(datasets):
        return OFFLINE
    if url in _reached:
        return None
    why = _probe(url)
    if why is None:
        _reached.add(url)
    else:
        _switched[url] = why
        _go_offline()
    return why


_restore: list[tuple[object, str, object]] = []  # (module, flag, value before _go_offline), for `reset`


def _go_offline() -> None:
    """huggingface_hub and datasets read their offline flag at each request (module constants): set both."""
    targets = []
    try:
        from huggingface_hub import constants

        targets.append((constants, "HF_HUB_OFFLINE"))
    except ImportError:
        pass
    try:
        import datasets.config

        targets += [(datasets.config, "HF_HUB_OFFLINE"), (datasets.config, "HF_DATASETS_OFFLINE")]
    except ImportError:
        pass
    for module, flag in targets:
        _restore.append((module, flag, getattr(module, flag, False)))
        setattr(module, flag, True)


def reset() -> None:
    """The clients' offline flags as they were, and the hub asked again next time: a command run in-process (a
    notebook, a test) leaves the caller's huggingface_hub and datasets as it found them."""
    while _restore:
        module, flag, value = _restore.pop()
        setattr(module, flag, value)
    _switched.clear()
    _reached.clear()


def not_cached(why: str, error: str) -> str:
    """The reason a hub read failed, said once: the hub's (`unreachable`) and the client's, whose offline errors
    (OfflineModeIsEnabled, LocalEntryNotFoundError, "Couldn't reach") only mean that no cached copy exists."""
    if any(s in error for s in ("OfflineModeIsEnabled", "LocalEntryNotFound", "Couldn't reach", "offline mode")):
        return f"{why}, and no copy is in the cache here"
    return f"{why}; {error}"


__all__ = ["OFFLINE", "endpoint", "not_cached", "offline", "reset", "unreachable"]
