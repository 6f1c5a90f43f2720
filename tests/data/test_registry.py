"""Data sets by name: the registry against the offline copy, and the real
download path (Keras' `get_file` into a staging folder, sha256, cache)
against a mirror this test serves on 127.0.0.1: it downloads and caches
once, refuses a corrupted or cut-off file leaving nothing in the cache,
refuses in one line when nothing can be reached, and runs a recipe from a
fresh clone with no `../shared` beside it."""

import hashlib
import http.server
import os
import shutil
import socket
import subprocess
import sys
import threading
from functools import partial
from pathlib import Path

import pytest

from recipes import cli, gpt_char
from tests.shared_data import SHARED_DATA, has, needs
from zoo.data import DataError, dataset_info, fetch_dataset, is_cached, list_datasets, read_text
from zoo.data.registry import cache_folder, file_url

ROOT = Path(__file__).resolve().parents[2]
FAST = ["--preset", "nano", "--steps", "4", "--steps-per-epoch", "2", "--batch-size", "4",
        "--eval-batches", "2", "--sample-length", "10", "--jit-compile", "false"]


class MirrorHandler(http.server.SimpleHTTPRequestHandler):
    """Serves a folder laid out as NAME/FILE, records each request, and cuts
    the files named in `server.cut` off halfway (the connection closes after
    half of the promised bytes)."""

    def do_GET(self):
        self.server.requests.append(self.path)
        if self.path in self.server.cut:
            body = (Path(self.directory) / self.path.lstrip("/")).read_bytes()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        super().do_GET()

    def log_message(self, *args):
        pass


@pytest.fixture
def mirror(tmp_path, monkeypatch):
    """A mirror of the offline copy on 127.0.0.1, `ZOO_DATA_MIRROR` pointed
    at it, no `ZOO_DATA`, and an empty cache (`ZOO_HOME`)."""
    if not all(has(name) for name in list_datasets()):
        pytest.skip(f"the registered data sets are not all in ZOO_DATA={SHARED_DATA}")
    root = tmp_path / "mirror"
    shutil.copytree(SHARED_DATA, root, ignore=shutil.ignore_patterns("README*"))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), partial(MirrorHandler, directory=str(root)))
    server.requests, server.cut, server.root = [], set(), root
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.delenv("ZOO_DATA", raising=False)
    monkeypatch.setenv("ZOO_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("ZOO_DATA_MIRROR", f"http://127.0.0.1:{server.server_address[1]}")
    yield server
    server.shutdown()
    server.server_close()


def _cache_is_empty(name):
    folder = cache_folder(name)
    return not folder.exists() or not any(folder.iterdir())


@needs("tinyshakespeare", "multi30k", "sst2")
def test_the_registry_matches_the_offline_copy_byte_for_byte():
    for name in list_datasets():
        for file in dataset_info(name).files:
            data = (SHARED_DATA / name / file.name).read_bytes()
            assert len(data) == file.size, (name, file.name)
            assert hashlib.sha256(data).hexdigest() == file.sha256, (name, file.name)
            assert file.url.startswith("https://") and file.url.endswith(f"/{file.name}")
        assert dataset_info(name).licence and dataset_info(name).provenance


def test_an_unknown_name_is_refused_with_the_known_ones():
    with pytest.raises(DataError, match="'shakespeare': not a registered data set; expected one of tinyshakespeare"):
        fetch_dataset("shakespeare")


def test_the_public_url_unless_a_mirror_is_set(monkeypatch):
    dataset = dataset_info("sst2")
    monkeypatch.delenv("ZOO_DATA_MIRROR", raising=False)
    assert file_url(dataset, dataset.files[0]) == dataset.files[0].url
    monkeypatch.setenv("ZOO_DATA_MIRROR", "http://mirror.example/zoo/")
    assert file_url(dataset, dataset.files[0]) == "http://mirror.example/zoo/sst2/train.tsv"


@needs("tinyshakespeare")
def test_a_corrupted_local_copy_is_refused_with_both_hashes(tmp_path, monkeypatch):
    copy = tmp_path / "data" / "tinyshakespeare"
    copy.mkdir(parents=True)
    (copy / "input.txt").write_bytes((SHARED_DATA / "tinyshakespeare" / "input.txt").read_bytes()[:-1] + b"?")
    monkeypatch.setenv("ZOO_DATA", str(tmp_path / "data"))
    expected = dataset_info("tinyshakespeare").files[0].sha256
    with pytest.raises(DataError, match=rf"\(ZOO_DATA\): sha256 [0-9a-f]{{64}}, expected {expected}"):
        read_text("tinyshakespeare")


def test_zoo_data_download_fetches_ahead_and_list_says_cached(mirror, capsys):
    assert cli.main(["data", "list"]) == 0
    assert "sst2: SST-2" in capsys.readouterr().out
    assert cli.main(["data", "download", "sst2", "multi30k"]) == 0
    assert sorted(mirror.requests) == sorted(
        ["/sst2/train.tsv", "/sst2/dev.tsv", "/multi30k/train.de", "/multi30k/train.en", "/multi30k/val.de",
         "/multi30k/val.en"]
    )
    capsys.readouterr()
    cli.main(["data", "list"])
    out = capsys.readouterr().out
    assert f"cached in {cache_folder('sst2')}" in out and f"cached in {cache_folder('multi30k')}" in out
    assert "tinyshakespeare: Tiny Shakespeare" in out and "MB, not cached" in out


def test_an_unknown_name_to_download_is_refused_before_any_download(mirror, capsys):
    assert cli.main(["data", "download", "sst2", "imdb"]) == 2
    assert capsys.readouterr().err.strip() == (
        "zoo data: error: 'imdb': not a registered data set; expected one of tinyshakespeare, multi30k, sst2"
    )
    assert mirror.requests == []


def test_a_corrupted_download_is_refused_and_nothing_is_cached(mirror):
    served = mirror.root / "sst2" / "dev.tsv"
    served.write_bytes(served.read_bytes().replace(b"good", b"bad", 1))
    expected = dataset_info("sst2").files[1].sha256
    with pytest.raises(DataError) as refused:
        fetch_dataset("sst2")
    message = str(refused.value)
    assert "\n" not in message and message.endswith("the download was refused and nothing was cached")
    assert f"/sst2/dev.tsv: sha256 {hashlib.sha256(served.read_bytes()).hexdigest()}, expected {expected}" in message
    assert not (cache_folder("sst2") / "dev.tsv").exists()
    assert [p.name for p in cache_folder("sst2").iterdir()] == ["train.tsv"]  # the good file, no staging folder


def test_a_server_that_dies_mid_file_leaves_no_cached_file(mirror):
    mirror.cut.add("/tinyshakespeare/input.txt")
    with pytest.raises(DataError, match=r"could not download http://127\.0\.0\.1:\d+/tinyshakespeare/input\.txt"):
        fetch_dataset("tinyshakespeare")
    assert _cache_is_empty("tinyshakespeare")
    mirror.cut.clear()
    assert read_text("tinyshakespeare") == (SHARED_DATA / "tinyshakespeare" / "input.txt").read_text()


def test_a_corrupted_cache_file_is_fetched_again(mirror):
    fetch_dataset("sst2")
    (cache_folder("sst2") / "train.tsv").write_text("label\tsentence\n1\tcut short\n")
    fetch_dataset("sst2")
    assert mirror.requests.count("/sst2/train.tsv") == 2 and is_cached("sst2")


def test_offline_with_nothing_cached_the_recipe_refuses_in_one_line(tmp_path, monkeypatch, capsys):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.delenv("ZOO_DATA", raising=False)
    monkeypatch.setenv("ZOO_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("ZOO_DATA_MIRROR", f"http://127.0.0.1:{port}")
    assert cli.main(["train", "gpt_char", "--steps", "5", "--output", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(
        f"zoo train gpt_char: error: tinyshakespeare: could not download http://127.0.0.1:{port}/tinyshakespeare/input.txt"
    )
    assert "\n" not in err and "--data PATH" in err and "ZOO_DATA=DIR holding tinyshakespeare/input.txt" in err
    assert not (tmp_path / "run").exists() and _cache_is_empty("tinyshakespeare")


@pytest.mark.integration
def test_a_fresh_clone_downloads_caches_and_trains_and_the_next_run_does_not_download(mirror, tmp_path):
    """The newcomer's path: the repository's files alone (no `../shared`
    beside them, no network), data from the mirror, `zoo train gpt_char`;
    then another run finds the data in the cache."""
    assert not is_cached("tinyshakespeare")
    clone = tmp_path / "clone" / "zoo"
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "zoo", "recipes"],
                            cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    for name in listed:
        if (ROOT / name).is_file():
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, clone / name)
    assert not (clone.parent / "shared").exists()
    env = {**os.environ, "PYTHONPATH": str(clone)}
    result = subprocess.run(
        [sys.executable, "-m", "recipes.cli", "train", "gpt_char", "--steps", "30", "--eval-batches", "4",
         "--sample-length", "20", "--jit-compile", "false"],
        cwd=clone, env=env, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1].startswith("val_loss=")
    assert (clone / "runs" / "gpt_char" / "model.keras").is_file()
    assert "Downloading data from http://127.0.0.1" in result.stdout
    assert mirror.requests == ["/tinyshakespeare/input.txt"]
    assert sorted(p.name for p in cache_folder("tinyshakespeare").iterdir()) == ["input.txt"]  # no staging left
    gpt_char.main([*FAST, "--output", str(tmp_path / "again")])
    assert mirror.requests == ["/tinyshakespeare/input.txt"]
