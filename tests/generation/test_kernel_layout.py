"""The decoding loop's GPU layout of the Dense kernels (`loop.KernelLayout`).

On a GPU the loop carries each Dense kernel transposed and transposes it
back where the model reads it. These tests choose the layout
(`transposes_kernels`), so that they hold on a CPU as on a GPU, and check
that it picks exactly the Dense kernels, that the model reads the kernels
it has, that a generation gives the same tokens and probabilities as with
the kernels as stored, and that the compiled loop does carry the
transposes, made once before it.
"""

import keras
import numpy as np
import pytest

import zoo
from zoo import generate
from zoo.generation import compiled, loop
from zoo.generation.engine import Decoding

pytestmark = pytest.mark.skipif(
    keras.config.backend() != "jax", reason="the loop carries the model's variables (and their layout) on JAX only"
)

PROMPTS = [[5, 17, 42, 8], [9, 3], [60, 61, 62, 63, 64, 65]]
NEW = 8


def _model(preset, seed, **kwargs):
    keras.utils.set_random_seed(seed)
    model = zoo.build(preset, **kwargs)
    rng = np.random.default_rng(seed)
    for w in model.weights:
        if "norm" not in w.path:
            w.assign(rng.normal(0.0, 0.3, w.shape).astype(w.dtype))
    return model


@pytest.fixture
def gpu_layout(monkeypatch):
    monkeypatch.setattr(loop, "transposes_kernels", lambda: True)


def _dense_kernels(model):
    return {id(layer._kernel) for layer in model._flatten_layers() if isinstance(layer, keras.layers.Dense)}


def test_the_layout_picks_exactly_the_dense_kernels(gpu_layout):
    model = _model("gpt-nano", 0, task="causal_lm")
    layout = loop.KernelLayout(model)
    kernels = _dense_kernels(model)
    # Per block: the fused Q, K, V projection, the output projection, the two feed-forward products.
    assert layout.transposed == kernels and len(kernels) == 2 * 4
    variables = model.trainable_variables
    moved, = layout.into_loop(variables)
    for variable, value in zip(variables, moved):
        stored = keras.ops.convert_to_numpy(variable)
        if id(variable) in kernels:
            assert np.asarray(value).shape == stored.shape[::-1]
            np.testing.assert_array_equal(value, stored.T)
        else:
            assert "embeddings" in variable.path or stored.ndim == 1, variable.path
            np.testing.assert_array_equal(value, stored)
    for variable, value in zip(variables, layout.in_loop(variables, moved)):
        np.testing.assert_array_equal(value, keras.ops.convert_to_numpy(variable))


def test_the_layout_follows_the_device():
    import jax

    model = _model("gpt-nano", 0, task="causal_lm")
    on_gpu = jax.default_backend() == "gpu"
    assert loop.transposes_kernels() == on_gpu
    assert loop.KernelLayout(model).transposed == (_dense_kernels(model) if on_gpu else set())


def test_quantized_kernels_are_carried_as_stored(gpu_layout):
    model = _model("gpt-nano", 0, task="causal_lm")
    model.quantize("int8")
    assert loop.KernelLayout(model).transposed == set()


@pytest.mark.parametrize(
    "preset, kwargs",
    [("gpt-nano", {"task": "causal_lm"}), ("llama-nano", {}), ("gemma3-nano", {})],
)
def test_generation_in_the_gpu_layout_equals_the_stored_layout(preset, kwargs, monkeypatch):
    # Two equal models (a compiled function is kept per model); the whole
    # generation's loop and a stream's, token by token.
    def decode(model, every_token):
        decoding = Decoding(model, PROMPTS, NEW)
        for _ in decoding.steps(every_token=every_token):
            pass
        return decoding

    monkeypatch.setattr(loop, "transposes_kernels", lambda: False)
    stored = [decode(_model(preset, 1, **kwargs), every_token) for every_token in (False, True)]
    monkeypatch.setattr(loop, "transposes_kernels", lambda: True)
    transposed = [decode(_model(preset, 1, **kwargs), every_token) for every_token in (False, True)]
    for a, b in zip(transposed, stored):
        assert a.new_tokens == b.new_tokens
        assert len({t for row in b.new_tokens for t in row}) > 3  # not a constant output
        np.testing.assert_allclose(np.array(a.probabilities), np.array(b.probabilities), rtol=1e-4, atol=1e-6)


def test_translation_in_the_gpu_layout_equals_the_stored_layout(monkeypatch):
    sources, starts = [[11, 12, 13, 14, 15], [21, 22], [31, 32, 33]], [[1], [1, 7], [1]]

    def translate():
        return generate(_model("transformer-tiny", 1, vocabulary_size=100), starts, NEW, source=sources).sequences

    monkeypatch.setattr(loop, "transposes_kernels", lambda: False)
    stored = translate()
    monkeypatch.setattr(loop, "transposes_kernels", lambda: True)
    assert translate() == stored
    assert len({t for row in stored for t in row}) > 3  # not a constant output


def test_a_lora_model_generates_alike_in_both_layouts(monkeypatch):
    def lora_model():
        model = _model("gpt-nano", 2, task="causal_lm")
        model.backbone.enable_lora(4)
        rng = np.random.default_rng(3)
        for w in model.weights:
            if "lora" in w.path:
                w.assign(rng.normal(0.0, 0.3, w.shape).astype(w.dtype))
        return model

    monkeypatch.setattr(loop, "transposes_kernels", lambda: False)
    stored = generate(lora_model(), PROMPTS, NEW)
    monkeypatch.setattr(loop, "transposes_kernels", lambda: True)
    model = lora_model()
    assert loop.KernelLayout(model).transposed == _dense_kernels(model)  # the frozen kernels, not the LoRA factors
    transposed = generate(model, PROMPTS, NEW)
    assert transposed.sequences == stored.sequences


def test_the_compiled_loop_carries_the_transposes_made_before_it(gpu_layout):
    model = _model("gpt-nano", 4, task="causal_lm")
    generate(model, PROMPTS, NEW)
    function = list(compiled._COMPILED[model].values())[-1]
    calls = []
    jitted = function.compiled
    function.compiled = lambda *args: calls.append(args) or jitted(*args)
    generate(model, [[p + 1 for p in prompt] for prompt in PROMPTS], NEW)  # the same shapes: the same function
    text = jitted.lower(*calls[0]).as_text()
    kernel, = [w for w in model.weights if w.path == "block_0/feed_forward/intermediate/kernel"]
    assert tuple(kernel.shape) == (32, 64)
    before, _, after = text.partition("stablehlo.while")
    assert after, "no while loop in the compiled generation"
    assert "stablehlo.optimization_barrier" in before
    # The loop carries the (64, 32) transpose of each (32, 64) kernel.
    carried = after.split("\n", 1)[0]
    assert "tensor<64x32xf32>" in carried and "tensor<96x32xf32>" in carried
