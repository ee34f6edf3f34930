"""Default weights come from the Hugging Face Hub, through huggingface_hub's cache.

HF_HOME / HF_HUB_CACHE pick the cache, HF_HUB_OFFLINE=1 forbids the network,
HF_ENDPOINT picks a mirror: all handled by huggingface_hub itself.
"""
from __future__ import annotations

import os
import socket
import sys
from pathlib import Path
from urllib.parse import urlparse

from zoo.errors import ZooError


def cached_file(repo_id: str, filename: str) -> Path | None:
    """The file's path if it is already in the local Hub cache, else None."""
    from huggingface_hub import try_to_load_from_cache

    path = try_to_load_from_cache(repo_id, filename)
    return Path(path) if isinstance(path, str) else None


def _endpoint_unresolvable() -> bool:
    """True when the Hub's host name does not resolve and no proxy is set.

    huggingface_hub retries a dead connection for ~25 s; a failed name lookup
    already says we are offline, so we fail at once with a clear message.
    """
    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return False
    from huggingface_hub import constants

    host = urlparse(constants.ENDPOINT).hostname or ""
    try:
        socket.getaddrinfo(host, 443)
    except OSError:
        return True
    return False


def download(repo_id: str, filename: str, licence: str | None = None) -> Path:
    """Download (or reuse from the cache) one file of a Hub repo.

    Prints the weights' licence the first time they are downloaded. Any failure
    becomes a one-line ZooError naming the repo/file and how to pass weights.
    """
    from huggingface_hub import constants, hf_hub_download
    from huggingface_hub.utils import logging as hf_logging

    cached = cached_file(repo_id, filename)
    if cached is not None:
        return cached
    fix = "pass --weights PATH to a local checkpoint (or --weights synthetic for random test weights)"
    # huggingface_hub reads HF_HUB_OFFLINE once at import; honour a later setting too
    if constants.HF_HUB_OFFLINE or os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        raise ZooError(f"{repo_id}/{filename} is not in the Hub cache and HF_HUB_OFFLINE is set: {fix}")
    if _endpoint_unresolvable():
        raise ZooError(f"cannot reach the Hugging Face Hub to download {repo_id}/{filename} (no network): {fix}")
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # its retry warnings would bury our one-line error
    try:
        path = Path(hf_hub_download(repo_id, filename))
    except Exception as e:  # huggingface_hub raises many types (HTTP, OS, offline, gated)
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ZooError(f"could not download {repo_id}/{filename} from the Hugging Face Hub ({reason[:160]}): {fix}") from None
    finally:
        hf_logging.set_verbosity(verbosity)
    if licence:
        print(f"downloaded {repo_id}/{filename}; these weights are licensed {licence}", file=sys.stderr)
    return path

