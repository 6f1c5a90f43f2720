"""Shared pytest setup: quiet TensorFlow, float32 by default, fixed seeds."""

import os

# Before TensorFlow (and so Keras) is first imported.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# The tests run many tiny ops, each compiled once by XLA (every op on JAX):
# skipping LLVM's optimisations halves the compile time that dominates them.
if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0"
    ).strip()

import keras  # noqa: E402
import pytest  # noqa: E402

SEED = 1337


@pytest.fixture(autouse=True)
def float32_and_seeded():
    """Every test starts seeded under float32 and leaves float32 behind,
    even when it switched to `mixed_bfloat16` and failed halfway."""
    keras.config.set_dtype_policy("float32")
    keras.utils.set_random_seed(SEED)
    yield
    keras.config.set_dtype_policy("float32")
