"""Weights downloads (weights/hub.py) against a local fake of the Hub: a download is used only when
complete and verified; a damaged cached file is found and fetched again; two processes filling one
cache at once end with one good file."""
import hashlib
import multiprocessing
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from zoo.errors import ZooError

REPO, FILE = "zoo-test/weights", "w.safetensors"
CONTENT = bytes(range(256)) * 2048  # 512 KiB
SHA256 = hashlib.sha256(CONTENT).hexdigest()


class FakeHub(BaseHTTPRequestHandler):
    """/{repo}/resolve/{revision}/{file} with the headers huggingface_hub reads; ``server.mode``:
    'ok', or 'truncated' (half the bytes, then the connection closes)."""

    def headers_for(self):
        if self.path != f"/{REPO}/resolve/main/{FILE}":
            self.send_error(404)
            return False
        self.send_response(200)
        for name, value in (("X-Repo-Commit", "c" * 40), ("X-Linked-Etag", f'"{SHA256}"'), ("ETag", f'"{SHA256}"'),
                            ("X-Linked-Size", str(len(CONTENT))), ("Content-Length", str(len(CONTENT)))):
            self.send_header(name, value)
        self.end_headers()
        return True

    def do_HEAD(self):
        self.headers_for()

    def do_GET(self):
        if not self.headers_for():
            return
        self.server.gets += 1
        body = CONTENT[: len(CONTENT) // 2] if self.server.mode == "truncated" else CONTENT
        for start in range(0, len(body), 64 * 1024):  # slowly: concurrent downloads overlap
            self.wfile.write(body[start:start + 64 * 1024])
            time.sleep(0.02)
        self.close_connection = True

    def log_message(self, *args):
        pass


@pytest.fixture
def hub(monkeypatch, tmp_path):
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeHub)
    server.mode, server.gets = "ok", 0
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    for proxy in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(proxy, raising=False)
    reload_hub_constants()
    yield server
    server.shutdown()
    monkeypatch.undo()
    reload_hub_constants()


def reload_hub_constants():
    """huggingface_hub reads its environment once, at import; before 0.25 its downloader also keeps copies of
    the endpoint and cache folder, taken at its own import."""
    import importlib

    import huggingface_hub.constants
    import huggingface_hub.file_download

    importlib.reload(huggingface_hub.constants)
    importlib.reload(huggingface_hub.file_download)


def blobs(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("blobs/*"))


def test_download_is_verified_and_cached(hub, tmp_path):
    from zoo.weights import hub as weights_hub

    path = weights_hub.download(REPO, FILE)
    assert Path(path).read_bytes() == CONTENT and hub.gets == 1
    assert weights_hub.download(REPO, FILE) == path and hub.gets == 1  # from the cache, checked once
    assert [p.name for p in blobs(tmp_path / "hf")] == [SHA256, f"{SHA256}.zoo-verified"]


def test_a_damaged_cached_file_is_fetched_again(hub, tmp_path, capsys):
    from zoo.weights import hub as weights_hub

    path = weights_hub.download(REPO, FILE)
    blob = Path(os.path.realpath(path))
    blob.write_bytes(CONTENT[:1000])  # cut short after it was checked (a full disk, a killed copy)
    again = weights_hub.download(REPO, FILE)
    assert Path(again).read_bytes() == CONTENT and hub.gets == 2
    assert "was damaged" in capsys.readouterr().err


def test_a_damaged_file_in_a_read_only_cache_is_named_not_said_removed(hub, tmp_path, monkeypatch, capsys):
    """A damaged blob that cannot be removed (a read-only cache; root writes anywhere, so the removal is made to
    fail) was reported 'removed, downloading it again', then 'was removed: run again', and the client handed the
    same file back on every run. It is one error naming the file and the fix, before any download."""
    from zoo.weights import hub as weights_hub

    blob = Path(os.path.realpath(weights_hub.download(REPO, FILE)))
    blob.write_bytes(CONTENT[:1000])
    unlink = Path.unlink

    def read_only(path, missing_ok=False):
        if path == blob:
            raise PermissionError(13, "Permission denied", str(path))
        unlink(path, missing_ok)

    monkeypatch.setattr(Path, "unlink", read_only)
    with pytest.raises(ZooError, match=rf"^the cached {REPO}/{FILE} is damaged \(1000 bytes whose sha256 is not "
                                       rf"{SHA256[:12]}\.\.\., the Hub's\) and cannot be removed \(Permission "
                                       rf"denied\): delete {blob} as the cache's owner, or set HF_HUB_CACHE to a "
                                       "folder you can write$"):
        weights_hub.download(REPO, FILE)
    assert hub.gets == 1 and "removed" not in capsys.readouterr().err


def test_a_truncated_download_is_never_used(hub, tmp_path):
    from zoo.weights import hub as weights_hub

    hub.mode = "truncated"
    with pytest.raises(ZooError) as error:
        weights_hub.download(REPO, FILE)
    assert REPO in str(error.value) and "\n" not in str(error.value)
    assert not [p for p in blobs(tmp_path / "hf") if not p.name.endswith(".incomplete")]  # nothing taken for good
    hub.mode = "ok"
    assert Path(weights_hub.download(REPO, FILE)).read_bytes() == CONTENT


def fill_cache(endpoint: str, home: str) -> str:
    os.environ.update(HF_ENDPOINT=endpoint, HF_HOME=home, HF_HUB_DISABLE_XET="1")
    os.environ.pop("HF_HUB_OFFLINE", None)
    from zoo.weights import hub as weights_hub

    return hashlib.sha256(Path(weights_hub.download(REPO, FILE)).read_bytes()).hexdigest()


def test_two_processes_filling_one_cache_end_with_one_good_file(hub, tmp_path):
    context = multiprocessing.get_context("spawn")
    with context.Pool(2) as pool:
        digests = pool.starmap(fill_cache, [(os.environ["HF_ENDPOINT"], str(tmp_path / "hf"))] * 2)
    assert digests == [SHA256, SHA256]
    assert [p.name for p in blobs(tmp_path / "hf") if not p.name.endswith(".zoo-verified")] == [SHA256]
    assert not list((tmp_path / "hf").rglob("*.incomplete"))
