"""`--strategy multi-worker`: two worker processes on 127.0.0.1, each with
its own TF_CONFIG, train as one process does on the same global batch, and
only the chief writes a recipe's folder; TF_CONFIG mistakes are clear errors.

The workers run `tests/recipes/multi_worker_script.py` side by side (a
strategy with a gRPC server needs a fresh interpreter), under a deadline
after which all are killed.
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from zoo.training.distribution import is_chief, start_distribution, worker_output

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = "tests.recipes.multi_worker_script"
DEADLINE_S = 150  # for all the processes of one test together


def free_ports(n):
    """n ports the system had free a moment ago (bound together, so distinct)."""
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def tf_config(ports, index):
    return json.dumps({
        "cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]},
        "task": {"type": "worker", "index": index},
    })


def run_together(runs, folder):
    """Starts every (args, TF_CONFIG or None) at once and returns their
    RESULT dicts; kills them all past the deadline or when one fails."""
    processes = []
    for i, (args, config) in enumerate(runs):
        env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
        if config is not None:
            env["TF_CONFIG"] = config
        out, err = (open(folder / f"process{i}.{s}", "w+") for s in ("out", "err"))
        command = [sys.executable, "-m", SCRIPT, *args]
        processes.append((subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=err), out, err))
    deadline = time.monotonic() + DEADLINE_S
    try:
        while any(p.poll() is None for p, _, _ in processes):
            failed = [p for p, _, _ in processes if p.poll() not in (None, 0)]
            if failed or time.monotonic() > deadline:
                break
            time.sleep(0.5)
    finally:
        for p, _, _ in processes:
            if p.poll() is None:
                p.kill()
                p.wait()
    results = []
    for (p, out, err), (args, _) in zip(processes, runs):
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
        out.close()
        err.close()
        assert p.returncode == 0, f"{args} exited {p.returncode} (deadline {DEADLINE_S} s):\n{stderr[-3000:]}"
        line = [line for line in stdout.splitlines() if line.startswith("RESULT ")][-1]
        results.append(json.loads(line[len("RESULT "):]))
    return results


@pytest.mark.integration
def test_two_workers_end_with_one_process_weights_and_loss_on_the_global_batch(tmp_path):
    ports = free_ports(2)
    runs = [(["fit", "multi-worker"], tf_config(ports, i)) for i in range(2)] + [(["fit", "default"], None)]
    worker0, worker1, single = run_together(runs, tmp_path)

    assert (worker0["replicas"], worker1["replicas"], single["replicas"]) == (2, 2, 1)
    assert worker0["chief"] and not worker1["chief"]
    # tf.data auto-sharding: each worker gets its half of every global batch of 8.
    assert worker0["rows"] == [[0, 1, 2, 3], [8, 9, 10, 11], [16, 17, 18, 19]]
    assert worker1["rows"] == [[4, 5, 6, 7], [12, 13, 14, 15], [20, 21, 22, 23]]
    assert single["rows"] == [list(range(8 * s, 8 * s + 8)) for s in range(3)]
    # The workers end identical, bit for bit.
    assert worker0["digest"] == worker1["digest"]
    for a, b in zip(worker0["after"], worker1["after"]):
        np.testing.assert_array_equal(a, b)
    # Each step's loss is the single process's loss on the whole global batch.
    np.testing.assert_allclose(worker0["losses"], single["losses"], rtol=0, atol=1e-5)
    np.testing.assert_allclose(worker1["losses"], single["losses"], rtol=0, atol=1e-5)
    # From the same start, the same update: the gradient of the global mean
    # loss (per-worker means, averaged by the all-reduce).
    for before, after, single_before, single_after in zip(
        worker0["before"], worker0["after"], single["before"], single["after"]
    ):
        np.testing.assert_allclose(before, single_before, rtol=0, atol=1e-7)
        np.testing.assert_allclose(np.subtract(after, before), np.subtract(single_after, single_before), rtol=0, atol=1e-6)
    largest = max(np.abs(np.subtract(a, b)).max() for a, b in zip(single["after"], single["before"]))
    assert largest > 0.05  # the updates are large enough for the comparison to mean something


@pytest.mark.integration
def test_the_demo_recipe_trains_on_two_workers_and_only_the_chief_writes_its_folder(tmp_path):
    ports = free_ports(2)
    output = tmp_path / "demo"
    chief, worker = run_together([(["demo", str(output)], tf_config(ports, i)) for i in range(2)], tmp_path)
    private = Path(worker["folder"])
    try:
        assert chief["chief"] and not worker["chief"]
        assert Path(chief["folder"]) == output
        assert output not in private.parents and private != output
        assert chief["accuracy"] == worker["accuracy"]
        assert json.loads((output / "run.json").read_text())["finished"]
        assert (output / "model.keras").is_file()
        # One training, seen from both workers: the same logged losses.
        assert (output / "history.csv").read_text() == (private / "history.csv").read_text()
    finally:
        shutil.rmtree(private, ignore_errors=True)


@pytest.mark.parametrize(
    "value, message",
    [
        (None, "TF_CONFIG environment variable, which is not set.*expected a JSON object like"),
        ("{'cluster': 1}", "TF_CONFIG is not valid JSON.*expected"),
        ('{"task": {"type": "worker", "index": 0}}', "no 'cluster' with a 'worker'"),
        ('{"cluster": {"worker": ["h0:1", "h1:1"]}}', "no 'task' with 'type' and 'index'"),
        ('{"cluster": {"worker": ["h0:1", "h1:1"]}, "task": {"type": "worker", "index": 2}}', "'worker' #2 is not"),
        ('{"cluster": {"worker": ["h0:1"]}, "task": {"type": "chief", "index": 0}}', "'chief' #0 is not"),
    ],
)
def test_multi_worker_without_a_usable_tf_config_says_what_is_expected(monkeypatch, value, message):
    if value is None:
        monkeypatch.delenv("TF_CONFIG", raising=False)
    else:
        monkeypatch.setenv("TF_CONFIG", value)
    with pytest.raises(ValueError, match=message):
        start_distribution("multi-worker")  # raises before TensorFlow is touched


def test_the_chief_writes_the_folder_and_the_other_workers_a_private_one_each(monkeypatch, tmp_path):
    output = tmp_path / "run"
    monkeypatch.delenv("TF_CONFIG", raising=False)
    assert is_chief() and worker_output(output, "multi-worker") == output
    cluster = {"worker": ["h0:1", "h1:1", "h2:1"]}
    folders = []
    for index in range(3):
        monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}}))
        assert is_chief() == (index == 0)
        assert worker_output(output, "default") == output  # TF_CONFIG counts only under multi-worker
        folders.append(worker_output(output, "multi-worker"))
        assert worker_output(output, "multi-worker") == folders[-1]  # the same after a restart
    assert folders[0] == output and len(set(folders)) == 3
    assert all(output not in f.parents for f in folders[1:])
    # With a "chief" task, every worker is a plain worker.
    with_chief = {"chief": ["c:1"], **cluster}
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": with_chief, "task": {"type": "chief", "index": 0}}))
    assert is_chief()
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": with_chief, "task": {"type": "worker", "index": 0}}))
    assert not is_chief()


def test_multi_worker_after_the_first_tensorflow_op_is_a_clear_error():
    script = (
        "import tensorflow as tf; tf.constant(1)\n"
        "from zoo.training.distribution import distribution_scope\n"
        "distribution_scope('multi-worker')\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    env["TF_CONFIG"] = tf_config(free_ports(1), 0)
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=DEADLINE_S
    )
    assert result.returncode != 0
    assert "start_distribution('multi-worker') at the top of main()" in result.stderr
