"""Property-based tests (hypothesis) over the layers and the tiny presets.

What the two test files share lives here: the settings every fuzzed test
runs under, the strategies that draw padding masks (all-padded rows and
rows holding only their first token included), and the NumPy bookkeeping
that says which outputs a perturbation of masked keys must leave alone.

Shape letters: B batch, T query length, S key length.

The runs are reproducible: `derandomize=True` draws the same cases on every
run (until the test's source or hypothesis changes), and no example database
is written. Each test builds its layers or models once per module and varies
only the inputs. Array lengths come from a few sizes (1, a middle one and
the maximum) because every new shape is compiled again op by op on JAX;
real lengths vary freely inside them through the padding masks.
`pytest --hypothesis-show-statistics tests/fuzz` shows how often each kind
of padded row was drawn.
"""

import numpy as np
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from keras import ops

# The parent of every fuzzed test's settings; each adds its `max_examples`.
FUZZ = settings(
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# Outputs that must not move are compared at this tolerance: a masked key
# enters a softmax as exp(-1e9) = 0, so the two runs agree to the last bit
# in practice.
ATOL = 1e-6

ROW_KINDS = ("all padded", "first token only", "no padding", "right padded", "random")

batch_sizes = st.integers(1, 4)


def lengths(maximum, middle=7):
    """A few array lengths from 1 to `maximum` (see the module docstring)."""
    return st.sampled_from(sorted({1, min(middle, maximum), maximum}))


@st.composite
def padding_masks(draw, batch, length):
    """(B, T) int32, 1 at real tokens; every row of one of `ROW_KINDS`."""
    rows = []
    for _ in range(batch):
        kind = draw(st.sampled_from(ROW_KINDS))
        event(f"a row {kind}")  # counted by --hypothesis-show-statistics
        if kind == "all padded":
            row = [0] * length
        elif kind == "first token only":
            row = [1] + [0] * (length - 1)
        elif kind == "no padding":
            row = [1] * length
        elif kind == "right padded":
            real = draw(st.integers(1, length))
            row = [1] * real + [0] * (length - real)
        else:
            row = draw(st.lists(st.booleans(), min_size=length, max_size=length))
        rows.append(row)
    return np.array(rows, dtype="int32")


@st.composite
def attention_masks(draw, batch, query_length, key_length):
    """None, or a random (B, T, S) bool mask of random density."""
    density = draw(st.sampled_from([None, 0.2, 0.7]))
    if density is None:
        return None
    seed = draw(st.integers(0, 2**32 - 1))
    return np.random.default_rng(seed).random((batch, query_length, key_length)) < density


def allowed(batch, query_length, key_length, padding_mask=None, attention_mask=None, causal=False):
    """(B, T, S) bool: where query t may attend to key s, in NumPy."""
    mask = np.ones((batch, query_length, key_length), dtype=bool)
    if padding_mask is not None:
        mask &= np.asarray(padding_mask, dtype=bool)[:, None, :]
    if attention_mask is not None:
        mask &= np.asarray(attention_mask, dtype=bool)
    if causal:
        mask &= np.tril(np.ones((query_length, key_length), dtype=bool))
    return mask


def perturbed_keys(rng, padding_mask, extra):
    """(B, S) bool: the positions whose values a test changes.

    Always the padded ones; `extra` adds "none", a random suffix per row
    (what a causal mask hides from earlier queries) or random positions.
    """
    padded = ~np.asarray(padding_mask, dtype=bool)
    batch, length = padded.shape
    if extra == "suffix":
        cuts = rng.integers(0, length + 1, size=(batch, 1))
        return padded | (np.arange(length)[None, :] >= cuts)
    if extra == "random":
        return padded | (rng.random((batch, length)) < 0.3)
    return padded


def unaffected(allowed_mask, changed_keys, changed_queries=None):
    """(B, T) bool: queries that attend to no changed key and are not
    changed themselves; their outputs must not move."""
    sees_change = np.any(allowed_mask & changed_keys[:, None, :], axis=-1)
    if changed_queries is None:
        return ~sees_change
    return ~sees_change & ~changed_queries


def to_numpy(x):
    return np.asarray(ops.convert_to_numpy(x))


def assert_finite(name, x):
    x = to_numpy(x)
    assert np.isfinite(x).all(), f"{name} has {np.size(x) - np.isfinite(x).sum()} non-finite values"
    return x


def assert_unmoved(name, before, after, keep):
    """`before` and `after` agree wherever `keep` (broadcast over the
    trailing axes) is True."""
    keep = np.asarray(keep, dtype=bool)
    np.testing.assert_allclose(
        after[keep], before[keep], rtol=0, atol=ATOL, err_msg=f"{name} depends on a masked position"
    )
