"""Shared pytest setup: quiet TensorFlow, full-precision float32 matmuls,
float32 by default, fixed seeds."""

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest

# Before TensorFlow (and so Keras) is first imported.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

# The data sets by name come from the offline mirror beside the repository
# (the Makefile sets the same), and nothing a test fetches lands in the
# user's own cache: each test process has a cache of its own.
os.environ.setdefault("ZOO_DATA", str(Path(__file__).resolve().parents[2] / "shared" / "data"))
os.environ["ZOO_HOME"] = tempfile.mkdtemp(prefix="zoo-home-")
atexit.register(shutil.rmtree, os.environ["ZOO_HOME"], ignore_errors=True)


def pytest_configure(config):
    """Runs before any test module (and so Keras) is imported."""
    if not _selects_slow_tests(config.getoption("markexpr") or ""):
        # The fast tests run many tiny ops, each compiled once by XLA (every
        # op on JAX): skipping LLVM's optimisations halves the compile time
        # that dominates them. The slow tests train for an hour, where code
        # compiled that way runs several times slower: they keep XLA's default.
        if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
            os.environ["XLA_FLAGS"] = (
                os.environ.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0"
            ).strip()
    import keras

    use_full_float32_matmuls(keras.backend.backend())
    if keras.backend.backend() == "jax":
        share_jax_compilations()


def _selects_slow_tests(expression):
    """Whether `-m EXPRESSION` runs the slow tests (`-m slow`, not the
    default `-m 'not slow and not integration'`)."""
    return "slow" in expression and "not slow" not in expression


SEED = 1337


def use_full_float32_matmuls(backend):
    """Multiply float32 matrices in float32 on every device, for the tests only.

    GPUs (Ampere and later) multiply float32 in TF32 by default, a 10-bit
    mantissa: about 1e-3 off a float64 reference, where the comparisons here
    expect about 1e-6. Users keep that speed: the library never sets this.
    Only the backend in use is configured (and imported). The variables set
    here reach the Python processes that tests start (a model reloaded in a
    fresh process must give the same outputs bit for bit): JAX reads its
    default precision from the environment, and cuBLAS and cuDNN honour
    NVIDIA_TF32_OVERRIDE=0 under every framework.
    """
    os.environ.setdefault("JAX_DEFAULT_MATMUL_PRECISION", "highest")
    os.environ.setdefault("NVIDIA_TF32_OVERRIDE", "0")
    if backend == "jax":
        import jax

        jax.config.update("jax_default_matmul_precision", "highest")
    elif backend == "tensorflow":
        import tensorflow as tf

        tf.config.experimental.enable_tensor_float_32_execution(False)
    elif backend == "torch":
        import torch

        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")


def share_jax_compilations():
    """Compile each XLA program once per test process, for the tests only.

    Most tests build a small model of the same few shapes (gpt-nano,
    llama-nano, transformer-tiny) and generate with it; JAX traces the
    weights as arguments, so every such model lowers to the same program,
    and JAX's compilation cache, keyed by that program, serves the second
    model's compilation from the first one's. The cache is a folder of this
    process's own (two processes writing one folder could read each other's
    half-written entries), under its ZOO_HOME, removed when it exits; the
    processes that tests start compile for themselves.
    """
    import jax

    jax.config.update("jax_compilation_cache_dir", os.path.join(os.environ["ZOO_HOME"], "jax-compilations"))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


INTEGRATION_CASES = Path(__file__).with_name("integration_cases.txt")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """The cases listed in tests/integration_cases.txt run with the
    end-to-end runs (`-m integration`), not in the quick suite."""
    listed = {line.strip() for line in INTEGRATION_CASES.read_text(encoding="utf-8").splitlines()}
    for item in items:
        if item.nodeid in listed:
            item.add_marker(pytest.mark.integration)


def pytest_runtest_logreport(report):
    """With ZOO_TEST_FAILURE_LOG=FILE, each failure's report is appended to
    FILE as it happens, so that a run cut short (a time limit on a borrowed
    GPU) still says why each failed test failed."""
    path = os.environ.get("ZOO_TEST_FAILURE_LOG")
    if path and report.failed:
        with open(path, "a", encoding="utf-8") as log:
            log.write(f"=== {report.nodeid} ({report.when})\n{report.longreprtext}\n\n")


@pytest.fixture(autouse=True)
def float32_and_seeded():
    """Every test starts seeded under float32 and leaves float32 behind,
    even when it switched to `mixed_bfloat16` and failed halfway."""
    import keras

    keras.config.set_dtype_policy("float32")
    keras.utils.set_random_seed(SEED)
    yield
    keras.config.set_dtype_policy("float32")
