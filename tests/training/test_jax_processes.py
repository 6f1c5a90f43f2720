"""Several JAX processes: two processes on 127.0.0.1, two virtual CPU
devices each, train under `--strategy data-parallel` and end with the
weights of one process on the global batch; killed on one process, the run
resumes on both from their backups.

The processes join through `keras.distribution.initialize`, which
`start_distribution` calls from the environment Keras reads
(KERAS_DISTRIBUTION_JOB_ADDRESSES, _NUM_PROCESSES, _PROCESS_ID); JAX's CPU
collectives (gloo) stand in for the links between GPU hosts.
"""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest

from zoo.training import distribution as distribution_lib

ROOT = Path(__file__).resolve().parents[2]
DEADLINE_S = 300

pytest.importorskip("jax", reason="several JAX processes need JAX")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(strategy, output, env_extra, *arguments):
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERAS_DISTRIBUTION_")}
    env.update(env_extra, TF_CPP_MIN_LOG_LEVEL="3")
    command = [sys.executable, "-m", "tests.training.jax_processes_script", strategy, str(output), *map(str, arguments)]
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(processes):
    try:
        outputs = [p.communicate(timeout=DEADLINE_S) for p in processes]
    finally:
        for p in processes:
            p.kill()
    for p, (_, err) in zip(processes, outputs):
        assert p.returncode == 0, err[-3000:]


def cluster(index):
    return {"KERAS_DISTRIBUTION_NUM_PROCESSES": "2", "KERAS_DISTRIBUTION_PROCESS_ID": str(index)}


@pytest.mark.integration
def test_two_processes_end_with_one_process_weights_on_the_global_batch(tmp_path):
    address = f"127.0.0.1:{free_port()}"
    cluster = {"KERAS_DISTRIBUTION_JOB_ADDRESSES": address, "KERAS_DISTRIBUTION_NUM_PROCESSES": "2"}
    processes = [
        start("data-parallel", tmp_path / f"process{i}.npz", {**cluster, "KERAS_DISTRIBUTION_PROCESS_ID": str(i)})
        for i in range(2)
    ]
    processes.append(start("default", tmp_path / "single.npz", {}))
    finish(processes)
    first, second, single = (np.load(tmp_path / name) for name in ("process0.npz", "process1.npz", "single.npz"))
    assert int(first["devices"]) == int(second["devices"]) == 4  # two processes, two devices each
    assert bool(first["chief"]) and not bool(second["chief"])
    weights = [key for key in single.files if key not in ("losses", "chief", "devices", "update")]
    assert len(weights) > 10
    for key in weights:
        np.testing.assert_array_equal(first[key], second[key])  # one set of weights across the processes
        np.testing.assert_allclose(first[key], single[key], atol=1e-5, err_msg=key)
    np.testing.assert_allclose(first["losses"], single["losses"], rtol=1e-5)
    assert float(single["update"]) > 1e-2  # the steps moved the weights (SGD at learning rate 1)
    assert len(first["losses"]) == 3


@pytest.fixture
def jax_process(monkeypatch):
    def set_process(index, count=2):
        monkeypatch.setattr(keras.backend, "backend", lambda: "jax")
        monkeypatch.setenv("KERAS_DISTRIBUTION_NUM_PROCESSES", str(count))
        monkeypatch.setenv("KERAS_DISTRIBUTION_PROCESS_ID", str(index))
        monkeypatch.setenv("KERAS_DISTRIBUTION_JOB_ADDRESSES", "10.0.0.1:1234")

    return set_process


def test_process_zero_writes_the_folder_and_the_others_a_private_one_each(jax_process, tmp_path):
    jax_process(0)
    assert distribution_lib.is_chief()
    assert distribution_lib.worker_output(tmp_path / "run", "data-parallel") == tmp_path / "run"
    jax_process(1)
    assert not distribution_lib.is_chief()
    private = distribution_lib.worker_output(tmp_path / "run", "data-parallel")
    assert private != tmp_path / "run" and private.name.endswith("-process1")
    assert distribution_lib.worker_output(tmp_path / "run", "data-parallel") == private  # found again on restart
    assert distribution_lib.worker_output(tmp_path / "run", "default") == tmp_path / "run"


@pytest.mark.parametrize(
    "variables, message",
    [
        ({"KERAS_DISTRIBUTION_JOB_ADDRESSES": ""}, "KERAS_DISTRIBUTION_JOB_ADDRESSES is ''; expected, on each of the 2"),
        ({"KERAS_DISTRIBUTION_PROCESS_ID": "2"}, "KERAS_DISTRIBUTION_PROCESS_ID is '2'; expected"),
        ({"KERAS_DISTRIBUTION_NUM_PROCESSES": "two"}, "KERAS_DISTRIBUTION_NUM_PROCESSES must be a positive integer"),
    ],
)
def test_an_incomplete_cluster_is_one_line_before_anything_starts(jax_process, monkeypatch, variables, message):
    jax_process(0)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    jax = pytest.importorskip("jax")
    monkeypatch.setattr(jax.distributed, "is_initialized", lambda: False)
    monkeypatch.setattr(keras.distribution, "initialize", lambda *a, **k: pytest.fail("initialize was reached"))
    monkeypatch.setattr(distribution_lib, "check_strategy", lambda name: None)
    with pytest.raises(ValueError, match=message) as error:
        distribution_lib.start_distribution("data-parallel")
    assert "\n" not in str(error.value)


@pytest.mark.integration
def test_a_run_killed_on_one_process_resumes_on_both(tmp_path):
    """Process 1 dies after the second of three epochs (its backup committed); process 0, whose peer
    is gone, stops too, as a scheduler would stop it. Both restarted, each resumes from its own backup
    and they end with the weights of one uninterrupted process."""
    address = {"KERAS_DISTRIBUTION_JOB_ADDRESSES": f"127.0.0.1:{free_port()}"}
    backups = [tmp_path / f"backup{i}" for i in range(2)]
    first = [start("data-parallel", tmp_path / f"killed{i}.npz", {**address, **cluster(i)}, backups[i],
                   *([1] if i == 1 else [])) for i in range(2)]
    killed = first[1]
    try:
        killed.communicate(timeout=DEADLINE_S)
        first[0].communicate(timeout=60)  # the survivor notices its lost peer (or is stopped below)
    except subprocess.TimeoutExpired:
        pass
    finally:
        for p in first:
            p.kill()
    assert killed.returncode == 3, killed.stderr.read()[-3000:] if killed.stderr else killed.returncode
    assert not (tmp_path / "killed0.npz").exists()  # process 0 did not finish alone
    for backup in backups:
        assert json.loads((backup / "training_metadata.json").read_text())["epoch"] == 2

    address = {"KERAS_DISTRIBUTION_JOB_ADDRESSES": f"127.0.0.1:{free_port()}"}
    resumed = [start("data-parallel", tmp_path / f"resumed{i}.npz", {**address, **cluster(i)}, backups[i])
               for i in range(2)]
    resumed.append(start("default", tmp_path / "single.npz", {}, tmp_path / "backup_single"))
    finish(resumed)
    first_process, second_process, single = (
        np.load(tmp_path / name) for name in ("resumed0.npz", "resumed1.npz", "single.npz")
    )
    weights = [key for key in single.files if key not in ("losses", "chief", "devices", "update")]
    for key in weights:
        np.testing.assert_array_equal(first_process[key], second_process[key])
        np.testing.assert_allclose(first_process[key], single[key], atol=1e-5, err_msg=key)
    # The resumed processes ran the third epoch only: the uninterrupted run's last three steps.
    np.testing.assert_allclose(first_process["losses"], single["losses"][-3:], rtol=1e-5)
    assert len(single["losses"]) == 9
    for backup in backups:
        assert json.loads((backup / "training_metadata.json").read_text())["epoch"] == 3
