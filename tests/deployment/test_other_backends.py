"""A runtime export from another backend than TensorFlow: the model is
exported by a TensorFlow process, with the same outputs."""

import keras
import numpy as np
import pytest

import zoo


@pytest.mark.skipif(keras.backend.backend() == "tensorflow", reason="exports from the other backends")
def test_another_backend_exports_through_tensorflow_with_the_same_outputs(tmp_path):
    import onnxruntime

    keras.utils.set_random_seed(2)
    model = zoo.build("gpt-nano", task="causal_lm")
    ids = np.random.default_rng(0).integers(1, 60, (2, 9)).astype("int32")
    inputs = {"token_ids": ids, "padding_mask": np.ones_like(ids)}
    expected = keras.ops.convert_to_numpy(model(inputs))
    folder = zoo.export(model, tmp_path / "m", format="onnx")
    session = onnxruntime.InferenceSession(str(folder / "model.onnx"))
    np.testing.assert_allclose(session.run(None, inputs)[0], expected, atol=1e-4)
