"""What a command does before its first Keras import: TensorFlow's log
level.

TensorFlow's libraries log a few lines as they load (oneDNN, cudart,
"All log messages before absl::InitializeLog()"), before
`TF_CPP_MIN_LOG_LEVEL` takes effect, so `load_keras` applies that level
to them too. Commands import Keras only once their arguments are parsed,
so `zoo -h` and `zoo train NAME -h` load no backend at all.
"""

import contextlib
import os
import re
import sys
import tempfile

QUIET = "3"  # TF_CPP_MIN_LOG_LEVEL when the user set none
_SEVERITIES = "IWEF"  # levels 0-3 of TF_CPP_MIN_LOG_LEVEL
# absl's "I0000 00:00:1795725546.80 30236 port.cc:153] ..." and TensorFlow's "2025-01-01 10:00:00.1: I tensorflow/..."
_LOG_LINE = re.compile(r"^(?:([IWEF])\d{4} \d\d:\d\d:\d+\.\d+ +\d+ [^\]\s]+\]|\d{4}-\d\d-\d\d [\d:.]+: ([IWEF]) )")
_ABSL_NOTICE = "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"


def log_level():
    """The TensorFlow log level in force: the user's, else `QUIET` (set in
    the environment, so that TensorFlow reads it as it loads)."""
    level = os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", QUIET)
    return int(level) if level.strip().isdigit() else 0


def shown(line, level):
    """Whether a line TensorFlow writes as it loads passes `level`; any
    other line (Python's own warnings, say) always does."""
    if line.startswith(_ABSL_NOTICE):
        return level < 1
    match = _LOG_LINE.match(line)
    return match is None or _SEVERITIES.index(match.group(1) or match.group(2)) >= level


@contextlib.contextmanager
def _stderr_at(level):
    """Holds back what is written to file descriptor 2 (where the C++
    libraries log) and writes back the lines `level` lets through."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            for line in held.read().decode("utf-8", "replace").splitlines(keepends=True):
                if shown(line, level):
                    sys.stderr.write(line)
            sys.stderr.flush()


def load_keras(tensorflow=False):
    """Imports Keras (and so its backend) at the log level in force;
    `tensorflow=True` imports TensorFlow too, for tf.data, whatever the
    backend. Returns the `keras` module."""
    wanted = ["keras"] + (["tensorflow"] if tensorflow else [])
    if all(name in sys.modules for name in wanted):
        return sys.modules["keras"]
    with _stderr_at(log_level()):
        import keras

        if tensorflow:
            import tensorflow  # noqa: F401
    return keras

