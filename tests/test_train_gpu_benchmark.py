"""benchmarks/gpu/train_gpu.py: its rows and levers are parsed as documented,
a tiny run of lever rows trains and profiles (on a CPU too), and the flat
AdamW lever takes the steps of Keras' AdamW and of a float64 reference."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu"
SCRIPT = BENCHMARKS / "train_gpu.py"


def _module(name="train_gpu"):
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))  # the scripts import the modules beside them
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_rows_with_levers_are_parsed():
    train_gpu = _module()
    args = train_gpu.parse(["--impl", "torch,zoo,zoo+pad+cublas,zoo+flat,zoo+noclip+nodecay,zoo+sgd"])
    assert args.impls == ["torch", "zoo", "zoo+pad+cublas", "zoo+flat", "zoo+noclip+nodecay", "zoo+sgd"]
    assert train_gpu.split_row("zoo+pad+cublas") == ("zoo", ["pad", "cublas"])
    assert train_gpu.title("zoo+pad") == "zoo + pad"
    assert train_gpu.padded(50257) == 50304 and train_gpu.padded(50304) == 50304


@pytest.mark.parametrize(
    "impl, expected",
    [("zoo+bogus", "levers go on zoo rows"), ("hub+pad", "levers go on zoo rows"), ("gpt", "unknown row 'gpt'"),
     ("zoo+chunked", "measured without the optimizer: zoo+gradonly+chunked")],
)
def test_a_bad_row_is_refused_in_one_line(impl, expected, capsys):
    with pytest.raises(SystemExit):
        _module().parse(["--impl", impl])
    assert expected in capsys.readouterr().err


@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="the lever rows run on JAX (pip install jax)")
@pytest.mark.integration
def test_tiny_lever_rows_train_and_split_their_kernels():
    """The rows run on JAX whatever the suite's backend (`--backend jax`)."""
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--impl", "zoo,zoo+flat,zoo+pad+gradonly,zoo+gradonly,zoo+gradonly+chunked", "--layers", "1", "--seq", "16",
         "--batch", "2", "--steps", "2", "--warmup", "1", "--width", "32", "--heads", "2", "--vocab", "130",
         "--profile"],
        capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    rows = {title: next(i for i, line in enumerate(lines) if line.startswith(title + " "))
            for title in ("zoo", "zoo + flat", "zoo + pad + gradonly", "zoo + gradonly", "zoo + gradonly + chunked")}
    for title, i in rows.items():
        assert "failed" not in lines[i] and "->" in lines[i], lines[i]
        profile = lines[i + 1]
        assert "kernels per step" in profile and "forward" in profile and "backward" in profile, profile
        assert ("optimizer" in profile) == ("gradonly" not in title), profile
    first_losses = {title: lines[i].split()[-3] for title, i in rows.items()}
    assert first_losses["zoo"] == first_losses["zoo + flat"]  # the same first weights, the same first loss
    losses = {title: lines[i].split()[-3:] for title, i in rows.items()}
    assert losses["zoo + gradonly + chunked"] == losses["zoo + gradonly"]  # the chunked loss is the same loss
    params = int(lines[rows["zoo + pad + gradonly"]].split()[5].replace(",", ""))
    import zoo

    padded = zoo.build("gpt2-small", task="causal_lm", vocabulary_size=256, num_layers=1, num_heads=2, hidden_dim=32,
                       intermediate_dim=128, max_sequence_length=16, dropout=0.0)
    assert params == padded.count_params()  # the table has 256 rows, not 130


def _adamw_reference(p, g, lr, wd, beta_1, beta_2, epsilon, clipnorm, steps):
    """AdamW in float64 (Keras' form: decay, then the bias-corrected Adam step),
    the gradient `g(p)` clipped to `clipnorm` by its global norm."""
    p = [x.astype("float64") for x in p]
    m = [np.zeros_like(x) for x in p]
    v = [np.zeros_like(x) for x in p]
    for t in range(1, steps + 1):
        grads = g(p)
        norm = np.sqrt(sum((x ** 2).sum() for x in grads))
        grads = [x * min(1.0, clipnorm / norm) for x in grads]
        alpha = lr * np.sqrt(1 - beta_2 ** t) / (1 - beta_1 ** t)
        for i, grad in enumerate(grads):
            m[i] += (grad - m[i]) * (1 - beta_1)
            v[i] += (grad ** 2 - v[i]) * (1 - beta_2)
            p[i] = p[i] - p[i] * wd[i] * lr - m[i] * alpha / (np.sqrt(v[i]) + epsilon)
    return p


@pytest.mark.parametrize("steps", [1, 3])
def test_flat_adamw_takes_the_steps_of_keras_adamw_and_of_a_float64_reference(steps):
    """A quadratic loss sum(c * w^2) over two variables, the bias excluded
    from the decay and the clipping active: the flat update, Keras' AdamW and
    float64 NumPy agree."""
    flat_adamw = _module("flat_adamw")
    rng = np.random.default_rng(0)
    start = [rng.normal(size=(3, 4)).astype("float32"), rng.normal(size=(4,)).astype("float32")]
    scale = [rng.uniform(0.5, 2.0, size=x.shape).astype("float32") for x in start]
    settings = dict(learning_rate=0.05, weight_decay=0.1, beta_2=0.95, global_clipnorm=0.5)

    def train(optimizer_class):
        variables = [keras.Variable(x, name=name) for x, name in zip(start, ("kernel", "bias"))]
        optimizer = optimizer_class(**settings)
        optimizer.exclude_from_weight_decay(var_names=["bias"])
        for _ in range(steps):
            grads = [2 * c * keras.ops.convert_to_numpy(v) for c, v in zip(scale, variables)]
            optimizer.apply(grads, variables)
        return [keras.ops.convert_to_numpy(v) for v in variables]

    flat, keras_adamw = train(flat_adamw.FlatAdamW), train(keras.optimizers.AdamW)
    reference = _adamw_reference(start, lambda p: [2 * c * x for c, x in zip(scale, p)], 0.05, [0.1, 0.0], 0.9, 0.95,
                                 1e-7, 0.5, steps)
    for a, b, r in zip(flat, keras_adamw, reference):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)
        np.testing.assert_allclose(a, r, rtol=0, atol=1e-5)
    moved = max(np.abs(a - x).max() for a, x in zip(flat, start))
    assert moved > 0.02  # the steps moved the weights (0.05 per step at most)
