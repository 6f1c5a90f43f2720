"""Model files saved by an earlier version of the zoo still load, with the
same outputs: `tests/data/saved/NAME.keras` were written by zoo 0.1.0 as
released (one per family), beside `NAME.npz` with an input and the output
it gave. Keras stores a layer's weights under its attribute names, so
renaming a layer attribute would break every saved run; this test fails
first."""

from pathlib import Path

import numpy as np
import pytest

import zoo

SAVED = Path(__file__).resolve().parents[1] / "data" / "saved"


@pytest.mark.parametrize("name", ["gpt-nano", "bert-tiny", "transformer-tiny"])
def test_a_file_saved_by_an_earlier_version_loads_with_the_same_outputs(name):
    model = zoo.load(SAVED / f"{name}.keras")
    record = np.load(SAVED / f"{name}.npz")
    inputs = {key[len("input_"):]: record[key] for key in record.files if key.startswith("input_")}
    np.testing.assert_allclose(np.asarray(model.predict_on_batch(inputs)), record["output"], atol=1e-5)
