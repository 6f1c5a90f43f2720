"""The same command gives the same model: a recipe run again with the same
flags (the same `--seed`) writes a `model.keras` with equal weights, bit for
bit, on TensorFlow and one machine. Each recipe's test file runs its smoke
command a second time and compares the two folders."""

import contextlib
import io

import numpy as np


def run_printing(main, argv):
    """`main(argv)`'s return value and the lines it printed."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        figure = main(argv)
    return figure, printed.getvalue().strip().splitlines()


def weights(folder):
    import zoo

    return zoo.load(folder / "model.keras").get_weights()


def assert_equal_weights(first, again):
    """The `model.keras` files of two run folders hold equal weights."""
    first, again = weights(first), weights(again)
    assert len(first) == len(again)
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)


def differ(first, other):
    return any(not np.array_equal(a, b) for a, b in zip(weights(first), weights(other)))
