"""Default weights come from the Hugging Face Hub, through huggingface_hub's cache.

HF_HOME / HF_HUB_CACHE pick the cache, HF_HUB_OFFLINE=1 forbids the network,
HF_ENDPOINT picks a mirror: all handled by huggingface_hub itself.

Nothing damaged is ever used: huggingface_hub downloads to ``<blob>.incomplete`` under a file
lock (two processes filling one cache wait for each other) and renames the file when it has
all its bytes; we then check the content against the name the cache stores it under (the
blob is named by its sha256 for LFS files, by its git blob sha1 for small ones), for fresh
downloads and cached files alike (once per file: a stamp beside the blob records the size and
time checked). A damaged cached file is removed and fetched again, or reported when offline.
"""
from __future__ import annotations

import hashlib
import os
import re
import socket
import sys
from pathlib import Path
from urllib.parse import urlparse

from zoo.errors import ZooError, option
from zoo.files import write_text


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

    fix = (f"pass {option('weights', 'PATH')} to a local checkpoint (or {option('weights', 'synthetic')} for random "
           "test weights; ZOO_WEIGHTS=synthetic for every model)")
    cached = cached_file(repo_id, filename)
    if cached is not None:
        problem = verify(cached)
        if problem is None:
            return cached
        remove_damaged(cached, f"the cached {repo_id}/{filename} is damaged ({problem})")
        print(f"warning: the cached {repo_id}/{filename} was damaged ({problem}): removed, downloading it again",
              file=sys.stderr)
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
    problem = verify(path)
    if problem is not None:
        remove_damaged(path, f"the download of {repo_id}/{filename} is damaged ({problem})")
        raise ZooError(f"the download of {repo_id}/{filename} is damaged ({problem}) and was removed: "
                       f"run again to download it, or {fix}")
    if licence:
        print(f"downloaded {repo_id}/{filename}; these weights are licensed {licence}", file=sys.stderr)
    return path



_SHA256 = re.compile(r"[0-9a-f]{64}")
_GIT_SHA1 = re.compile(r"[0-9a-f]{40}")


def verify(path: Path) -> str | None:
    """None when the cached file holds what the cache's name for it says, else the problem.

    Checked once: a stamp (``<blob>.zoo-verified``: size and modification time) skips the
    hashing of a file already found good that has not changed since."""
    blob = Path(os.path.realpath(path))
    if not blob.is_file():
        return "the file is missing"
    stat = blob.stat()
    stamp = blob.with_name(blob.name + ".zoo-verified")
    mark = f"{stat.st_size} {stat.st_mtime_ns}"
    if stamp.is_file() and stamp.read_text() == mark:
        return None
    if _SHA256.fullmatch(blob.name):
        digest = hashlib.sha256()
        kind = "sha256"
    elif _GIT_SHA1.fullmatch(blob.name):
        digest = hashlib.sha1(f"blob {stat.st_size}\0".encode())
        kind = "git sha1"
    else:
        return None  # a name that is no hash (an old cache layout): nothing to check against
    with open(blob, "rb") as file:
        for chunk in iter(lambda: file.read(1 << 20), b""):
            digest.update(chunk)
    if digest.hexdigest() != blob.name:
        return f"{stat.st_size} bytes whose {kind} is not {blob.name[:12]}..., the Hub's"
    try:
        write_text(stamp, mark)  # never through a link another process left at the stamp's name
    except ZooError:
        pass  # a read-only cache: checked again next time
    return None


def remove_damaged(path: Path, problem: str) -> None:
    """Remove a damaged blob, its stamp and the snapshot link to it, so the next call downloads it; ZooError
    (``problem``, then why) where the blob stays (a read-only cache: the Hub's client would hand the same file
    back, and 'removed, run again' would never be true)."""
    blob = Path(os.path.realpath(path))
    for damaged in (blob, blob.with_name(blob.name + ".zoo-verified"), Path(path)):
        try:
            damaged.unlink(missing_ok=True)
        except OSError as error:
            if damaged == blob:
                raise ZooError(f"{problem} and cannot be removed ({error.strerror or error}): delete {blob} as the "
                               "cache's owner, or set HF_HUB_CACHE to a folder you can write") from None
