"""JAX on several devices: data parallel and model parallel on 4 virtual
CPU devices give the single-device step of every family.

`tests/training/jax_devices_script.py` runs in a fresh interpreter (JAX
fixes its device count when it starts) and trains one SGD step of GPT,
BERT (masked LM) and the encoder-decoder on a batch whose padding differs
from shard to shard, once on one device and once under the strategy.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import keras
import pytest

import zoo
from zoo.models.sharding import get_layout_map
from zoo.training import distribution as distribution_lib

ROOT = Path(__file__).resolve().parents[2]
FAMILIES = ("gpt", "llama", "gemma", "bert", "transformer")

pytest.importorskip("jax", reason="the multi-device tests run on JAX")


def run_script(*strategies):
    env = {k: v for k, v in os.environ.items() if k not in ("KERAS_BACKEND",)}
    result = subprocess.run(
        [sys.executable, "-m", "tests.training.jax_devices_script", *strategies],
        cwd=ROOT, env=dict(env, TF_CPP_MIN_LOG_LEVEL="3"), capture_output=True, text=True, timeout=600,
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    assert result.returncode == 0 and lines, result.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT "):])


@pytest.fixture(scope="module")
def both_strategies():
    """One process: the one-device references once, then data parallel, then model parallel."""
    return run_script("data-parallel", "model-parallel")


@pytest.fixture(scope="module")
def data_parallel(both_strategies):
    return dict(both_strategies["data-parallel"], devices=both_strategies["devices"])


@pytest.fixture(scope="module")
def model_parallel(both_strategies):
    return dict(both_strategies["model-parallel"], devices=both_strategies["devices"])


def _check_same_step(family_result):
    assert family_result["loss"] == pytest.approx(family_result["reference_loss"], rel=1e-5)
    # The step moved the weights (SGD at learning rate 1: the update is the
    # gradient), and moved them as on one device.
    assert family_result["largest_update"] > 1e-2
    assert family_result["largest_weight_difference"] < 1e-5


@pytest.mark.integration
@pytest.mark.parametrize("family", FAMILIES)
def test_data_parallel_step_equals_one_device(data_parallel, family):
    assert data_parallel["devices"] == 4
    _check_same_step(data_parallel[family])
    for layout in data_parallel[family]["sharding"].values():  # a full copy on each device
        assert layout["devices"] == 4 and layout["shard_shape"] == layout["shape"]


@pytest.mark.integration
@pytest.mark.parametrize("family", FAMILIES)
def test_model_parallel_step_equals_one_device_with_the_kernels_split(model_parallel, family):
    _check_same_step(model_parallel[family])
    layouts = model_parallel[family]["sharding"]
    split = {path: layout for path, layout in layouts.items() if layout["shard_shape"] != layout["shape"]}
    for path, layout in layouts.items():
        name = path.split("/")
        if name[-2] in ("query_key_value", "query", "key_value", "intermediate", "gate") or name[-2] == "token_embedding":
            assert layout["spec"] == [None, "model"], path
            assert layout["shard_shape"] == [layout["shape"][0], layout["shape"][1] // 2], path
        elif name[-2] == "output" and name[-1] == "kernel" and name[-3] in ("self_attention", "cross_attention", "feed_forward"):
            assert layout["spec"] == ["model", None], path
            assert layout["shard_shape"] == [layout["shape"][0] // 2, layout["shape"][1]], path
    # q/k/v (and cross q, k/v), attention outputs, two FFN projections (three with SwiGLU's gate)
    per_block = {"transformer": 6, "llama": 5}.get(family, 4)
    assert len(split) >= 1 + 2 * per_block


@pytest.mark.integration
@pytest.mark.parametrize("family", ["gpt", "llama", "transformer"])
def test_model_parallel_generation_equals_one_device(model_parallel, family):
    result = model_parallel[family]
    assert result["generated"] == result["reference_generated"]


@pytest.fixture
def four_devices(monkeypatch):
    monkeypatch.setattr(keras.distribution, "list_devices", lambda *a, **k: ["cpu:0", "cpu:1", "cpu:2", "cpu:3"])


@pytest.mark.parametrize(
    "mesh, message",
    [
        (None, "needs --mesh BATCHxMODEL (this machine has 4 devices)"),
        ("2x3", "--mesh 2x3 needs 6 devices; this machine has 4"),
        ("4", "--mesh must be BATCHxMODEL"),
        ("axb", "--mesh must be BATCHxMODEL"),
        ("0x4", "--mesh 0x4 needs 0 devices"),
    ],
)
def test_an_impossible_mesh_is_one_line(four_devices, mesh, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")) as error:
        distribution_lib.parse_mesh(mesh)
    assert "\n" not in str(error.value)


def test_a_mesh_that_fits_is_parsed(four_devices):
    assert distribution_lib.parse_mesh("2x2") == (2, 2)
    assert distribution_lib.parse_mesh("1X4") == (1, 4)
    assert distribution_lib.parse_mesh((4, 1)) == (4, 1)


def test_a_batch_that_does_not_split_is_one_line(four_devices, monkeypatch):
    monkeypatch.setattr(keras.backend, "backend", lambda: "jax")
    with pytest.raises(ValueError, match="--batch-size 6 does not split across 4 replicas of --strategy data-parallel"):
        distribution_lib.check_batch_size("data-parallel", 6)
    with pytest.raises(ValueError, match="--batch-size 3 does not split across 2 replicas of --strategy model-parallel"):
        distribution_lib.check_batch_size("model-parallel", 3, "2x2")
    distribution_lib.check_batch_size("model-parallel", 6, "2x2")


def test_model_parallel_needs_jax():
    if keras.backend.backend() == "jax":
        pytest.skip("the refusal is for the other backends")
    with pytest.raises(ValueError, match="--strategy model-parallel needs the JAX backend"):
        distribution_lib.check_strategy("model-parallel")


def test_mesh_without_model_parallel_is_refused():
    with pytest.raises(ValueError, match="--mesh is for --strategy model-parallel; got --strategy default"):
        distribution_lib.start_distribution("default", mesh="2x2")


def test_layout_map_names_an_axis_of_the_mesh(four_devices):
    mesh = keras.distribution.DeviceMesh((2, 2), ("batch", "tensor"), ["cpu:0", "cpu:1", "cpu:2", "cpu:3"])
    with pytest.raises(ValueError, match=r"the mesh has the axes \['batch', 'tensor'\]; got 'model'"):
        get_layout_map(mesh)
    layout_map = zoo.models.GPTBackbone.get_layout_map(mesh, model_parallel_dim_name="tensor")
    assert tuple(layout_map["block_3/self_attention/query_key_value/kernel"].axes) == (None, "tensor")
    assert layout_map["block_3/self_attention_add_norm/layer_norm/gamma"] is None  # replicated
