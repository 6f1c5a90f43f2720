"""benchmarks/train_gpu.py: its rows and levers are parsed as documented,
and a tiny run of a lever row trains (on a CPU too)."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import keras
import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "train_gpu.py"


def _module():
    spec = importlib.util.spec_from_file_location("train_gpu", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_rows_with_levers_are_parsed():
    train_gpu = _module()
    args = train_gpu.parse(["--impl", "torch,zoo,zoo+pad+cublas"])
    assert args.impls == ["torch", "zoo", "zoo+pad+cublas"]
    assert train_gpu.split_row("zoo+pad+cublas") == ("zoo", ["pad", "cublas"])
    assert train_gpu.title("zoo+pad") == "zoo + pad"
    assert train_gpu.padded(50257) == 50304 and train_gpu.padded(50304) == 50304


@pytest.mark.parametrize(
    "impl, expected",
    [("zoo+bogus", "levers go on zoo rows"), ("hub+pad", "levers go on zoo rows"), ("gpt", "unknown row 'gpt'")],
)
def test_a_bad_row_is_refused_in_one_line(impl, expected, capsys):
    with pytest.raises(SystemExit):
        _module().parse(["--impl", impl])
    assert expected in capsys.readouterr().err


@pytest.mark.skipif(keras.backend.backend() != "jax", reason="the lever rows run on JAX")
def test_a_tiny_lever_row_trains():
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--impl", "zoo+pad+gradonly", "--layers", "1", "--seq", "16", "--batch", "2",
         "--steps", "2", "--warmup", "1", "--width", "32", "--heads", "2", "--vocab", "130"],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    row = next(line for line in done.stdout.splitlines() if line.startswith("zoo + pad + gradonly"))
    assert "failed" not in row and "->" in row
    params = int(row.split()[5].replace(",", ""))
    import zoo

    padded = zoo.build("gpt2-small", task="causal_lm", vocabulary_size=256, num_layers=1, num_heads=2, hidden_dim=32,
                       intermediate_dim=128, max_sequence_length=16, dropout=0.0)
    assert params == padded.count_params()  # the table has 256 rows, not 130
