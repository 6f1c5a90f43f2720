"""`zoo explore TARGET` as a command: it prints its URL, serves the page
and stops cleanly on Ctrl-C; a target it cannot open or a port it cannot
listen on is one line on stderr and exit status 2."""

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("starlette", reason="zoo explore needs the explore extra: pip install -e .[explore]")
pytest.importorskip("uvicorn", reason="zoo explore needs the explore extra: pip install -e .[explore]")

import zoo  # noqa: E402
from recipes import cli  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
WAIT = 60  # seconds: the command imports TensorFlow and loads the model first


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory, models):
    folder = tmp_path_factory.mktemp("runs") / "gpt_char"
    folder.mkdir()
    zoo.save(models["language_model"], folder / "model.keras")
    return folder


@pytest.mark.integration  # the command in a process of its own, stopped by Ctrl-C
def test_explore_prints_its_url_serves_the_page_and_stops_on_ctrl_c(run_folder):
    command = [sys.executable, "-m", "recipes.cli", "explore", str(run_folder), "--port", "0"]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        lines = []
        reader = threading.Thread(target=lambda: lines.extend(iter(process.stdout.readline, "")), daemon=True)
        reader.start()
        url = None
        for _ in range(WAIT * 10):
            url = next((line.split()[2] for line in lines if "http://127.0.0.1:" in line), None)
            if url or process.poll() is not None:
                break
            threading.Event().wait(0.1)
        assert url, f"no URL printed: {lines} {process.stderr.read() if process.poll() is not None else ''}"
        info = json.load(urllib.request.urlopen(url + "api/info", timeout=WAIT))
        assert info["kind"] == "language_model" and info["name"] == str(run_folder)
        assert "<title>zoo explore</title>" in urllib.request.urlopen(url, timeout=WAIT).read().decode()
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=WAIT) == 0
        reader.join(timeout=WAIT)
        assert lines[-1].strip() == "zoo explore: stopped"
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=WAIT)


def test_a_target_it_cannot_open_is_one_line_and_status_2(tmp_path, capsys):
    assert cli.main(["explore", str(tmp_path / "nowhere")]) == 2
    error = capsys.readouterr().err.strip()
    assert error == f"zoo explore: error: {tmp_path / 'nowhere'}: not found; expected a run folder " \
        "(holding model.keras), a .keras file, a checkpoint folder or a handle (hf://ORG/NAME)"


def test_a_port_in_use_is_one_line_and_status_2(run_folder, capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert cli.main(["explore", str(run_folder), "--port", str(port)]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith(f"zoo explore: error: --host 127.0.0.1 --port {port}: cannot listen there")
    assert error.endswith("expected a free port (--port 0 picks one)")


def test_explore_help_names_its_flags(capsys):
    with pytest.raises(SystemExit):
        cli.main(["explore", "-h"])
    text = capsys.readouterr().out
    for flag in ("TARGET", "--port", "--host", "--labels", "--quantize"):
        assert flag in text


def test_quantize_serves_the_model_quantized_and_leaves_the_run_as_it_was(run_folder, monkeypatch, capsys):
    import uvicorn

    from zoo.explore import explorer as engine
    from zoo.models import quantization_mode

    served, original = {}, engine.Explorer

    def explorer(model, **kwargs):
        served["model"] = model
        return original(model, **kwargs)

    def run(server, sockets=None):  # the server would start here: stop as Ctrl-C would
        raise KeyboardInterrupt

    saved = (run_folder / "model.keras").read_bytes()
    monkeypatch.setattr(engine, "Explorer", explorer)
    monkeypatch.setattr(uvicorn.Server, "run", run)
    assert cli.main(["explore", str(run_folder), "--port", "0", "--quantize", "int8"]) == 0
    assert quantization_mode(served["model"]) == "int8"
    assert (run_folder / "model.keras").read_bytes() == saved
    assert capsys.readouterr().out.strip().endswith("zoo explore: stopped")


def test_an_unknown_quantization_mode_is_refused_before_the_model_loads(run_folder, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["explore", str(run_folder), "--quantize", "int3"])
    assert exit_.value.code == 2
    assert "--quantize" in capsys.readouterr().err
