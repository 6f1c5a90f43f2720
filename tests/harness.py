"""One shared harness for every layer, after keras-hub's `run_layer_test`.

    from tests.harness import run_layer_test

    run_layer_test(
        FeedForward,
        {"intermediate_dim": 8},
        np.random.rand(2, 3, 4).astype("float32"),
        tmp_path=tmp_path,
        expected_output_shape=(2, 3, 4),
    )

`input_data` is the first positional input, or a dict of tensor call
arguments (`{"query": ..., "padding_mask": ...}`); `call_kwargs` holds the
static ones (`use_causal_mask=True`), which are baked into the models built
here.
"""

import inspect

import keras
import numpy as np
from keras import ops, tree


def _numpy(x):
    return None if x is None else np.asarray(ops.convert_to_numpy(x))


def _as_kwargs(input_data):
    """Tensor inputs as call kwargs, plus the name of the first (main) one."""
    if isinstance(input_data, dict):
        return dict(input_data), None
    return {"inputs": input_data}, "inputs"


def _call(layer, inputs, positional, call_kwargs, **extra):
    if positional is not None:
        return layer(inputs[positional], **call_kwargs, **extra)
    return layer(**inputs, **call_kwargs, **extra)


def _functional_model(layer, input_data, call_kwargs):
    inputs, positional = _as_kwargs(input_data)
    symbolic = {
        name: keras.Input(shape=value.shape[1:], dtype=str(_numpy(value).dtype), name=name)
        for name, value in inputs.items()
    }
    outputs = _call(layer, symbolic, positional, call_kwargs)
    return keras.Model(symbolic, outputs), symbolic, outputs


def _build_shapes(layer, inputs):
    """The shapes `build()` expects, matched by name like Keras does."""
    params = [
        p
        for p in inspect.signature(layer.build).parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    ]
    shapes = [tuple(v.shape) for v in inputs.values()]
    if len(params) == 1:
        return {params[0].name: shapes[0]}
    by_name = {f"{k}_shape": tuple(v.shape) for k, v in inputs.items()}
    # The first input also answers to the first build argument's name.
    by_name.setdefault(params[0].name, shapes[0])
    return {p.name: by_name[p.name] for p in params if p.name in by_name}


def _flatten_shapes(shapes):
    """A shape, or a nested structure of shapes, as a flat list of shapes."""
    if isinstance(shapes, (tuple, list)) and all(isinstance(d, (int, type(None))) for d in shapes):
        return [tuple(shapes)]
    return [s for part in shapes for s in _flatten_shapes(part)]


def _assert_shapes_match(actual, expected, what):
    assert len(actual) == len(expected), f"{what}: {len(actual)} outputs, expected {len(expected)}"
    for a, e in zip(actual, expected):
        ok = len(a) == len(e) and all(x is None or y is None or x == y for x, y in zip(a, e))
        assert ok, f"{what}: shape {a} does not match {e}"


def run_layer_test(
    cls,
    init_kwargs,
    input_data,
    *,
    tmp_path,
    call_kwargs=None,
    expected_output_shape=None,
    expected_num_trainable_weights=None,
    run_training_check=True,
    run_mixed_precision_check=True,
):
    """Build, symbolic call, eager call, config round trip, `.keras`
    save/load, one `fit` step, and a `mixed_bfloat16` call.

    Args:
        cls: the layer class.
        init_kwargs: its constructor arguments.
        input_data: a NumPy array (the first positional input) or a dict of
            NumPy arrays passed as call keyword arguments.
        tmp_path: pytest's `tmp_path`, where the `.keras` file goes.
        call_kwargs: non-tensor call arguments, passed to every call.
        expected_output_shape: the eager output shape (a tuple, or a
            structure of tuples for several outputs).
        expected_num_trainable_weights: checked after build, if given.
        run_training_check: run the `fit` step.
        run_mixed_precision_check: run the `mixed_bfloat16` call.

    Returns:
        The eager output of a freshly built layer, as NumPy.
    """
    call_kwargs = dict(call_kwargs or {})
    inputs, positional = _as_kwargs(input_data)

    # 1. Build from shapes alone.
    layer = cls(**init_kwargs)
    layer.build(**_build_shapes(layer, inputs))
    assert layer.built, f"{cls.__name__}.build() did not set built"
    if expected_num_trainable_weights is not None:
        assert len(layer.trainable_weights) == expected_num_trainable_weights, [
            w.path for w in layer.trainable_weights
        ]

    # 2. Config round trip, directly and through Keras' (de)serialization.
    config = layer.get_config()
    for name, value in init_kwargs.items():  # the arguments are the config
        if value is None or isinstance(value, (bool, int, float, str)):
            assert name in config and config[name] == value, f"get_config() lost {name}={value!r}"
    assert cls.from_config(config).get_config() == config
    revived = keras.layers.deserialize(keras.layers.serialize(layer))
    assert type(revived) is cls and revived.get_config() == config

    # 3. Symbolic call: the layer inside a functional model.
    layer = cls(**init_kwargs)
    model, _, symbolic_outputs = _functional_model(layer, input_data, call_kwargs)
    symbolic_shapes = [tuple(x.shape) for x in tree.flatten(symbolic_outputs)]

    # 4. Eager call, through the functional model and the bare layer, which
    # share weights and must agree; the symbolic shapes must match too.
    eager = _numpy_tree(_call(layer, inputs, positional, call_kwargs))
    eager_shapes = [x.shape for x in tree.flatten(eager)]
    if expected_output_shape is not None:
        expected = _flatten_shapes(expected_output_shape)
        assert eager_shapes == expected, f"{cls.__name__}: eager shapes {eager_shapes} != {expected}"
    _assert_shapes_match(symbolic_shapes, eager_shapes, f"{cls.__name__} symbolic call")
    through_model = _numpy_tree(model(inputs, training=False))
    for a, b in zip(tree.flatten(eager), tree.flatten(through_model)):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
    for out in tree.flatten(eager):
        if np.issubdtype(out.dtype, np.floating):
            assert np.all(np.isfinite(out)), f"{cls.__name__}: non-finite eager output"

    # 5. Save a functional model to `.keras`, load it safely, same outputs.
    path = str(tmp_path / f"{cls.__name__}.keras")
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    assert loaded is not model
    reloaded = _numpy_tree(loaded(inputs, training=False))
    for a, b in zip(tree.flatten(through_model), tree.flatten(reloaded)):
        np.testing.assert_allclose(b, a, rtol=1e-6, atol=1e-6)

    # 6. One fit step (MSE on random targets) changes every trainable weight.
    if run_training_check:
        _run_fit_step(cls, init_kwargs, input_data, call_kwargs)

    # 7. Mixed precision: runs under `mixed_bfloat16`, finite output, close
    # to the float32 output with the same weights.
    if run_mixed_precision_check:
        _run_mixed_precision(cls, init_kwargs, inputs, positional, call_kwargs, layer, eager)

    return eager


def _numpy_tree(outputs):
    return tree.map_structure(_numpy, outputs)


def _run_fit_step(cls, init_kwargs, input_data, call_kwargs):
    layer = cls(**init_kwargs)
    model, _, outputs = _functional_model(layer, input_data, call_kwargs)
    if len(tree.flatten(outputs)) > 1:
        model = keras.Model(model.inputs, tree.flatten(outputs)[0])
    if not layer.trainable_weights:
        return
    inputs, _ = _as_kwargs(input_data)
    batch = len(next(iter(inputs.values())))
    rng = np.random.default_rng(0)
    targets = rng.normal(size=(batch,) + tuple(model.outputs[0].shape[1:])).astype("float32")
    before = [_numpy(w) for w in layer.trainable_weights]
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    history = model.fit(inputs, targets, batch_size=len(targets), epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    unchanged = [
        w.path for w, b in zip(layer.trainable_weights, before) if np.array_equal(_numpy(w), b)
    ]
    assert not unchanged, f"{cls.__name__}: a fit step left these weights unchanged: {unchanged}"


def _run_mixed_precision(cls, init_kwargs, inputs, positional, call_kwargs, float32_layer, float32_out):
    previous = keras.config.dtype_policy()
    keras.mixed_precision.set_dtype_policy("mixed_bfloat16")
    try:
        layer = cls(**init_kwargs)
        assert layer.compute_dtype == "bfloat16" and layer.variable_dtype == "float32"
        layer.build(**_build_shapes(layer, inputs))
        layer.set_weights(float32_layer.get_weights())
        outputs = _call(layer, inputs, positional, call_kwargs)
        for w in layer.weights:
            assert w.dtype == "float32", f"{w.path} is {w.dtype} under mixed_bfloat16"
        for out, expected in zip(tree.flatten(outputs), tree.flatten(float32_out)):
            assert keras.backend.standardize_dtype(out.dtype) == "bfloat16", (
                f"{cls.__name__}: output dtype {out.dtype} under mixed_bfloat16"
            )
            values = _numpy(ops.cast(out, "float32"))
            assert np.all(np.isfinite(values)), f"{cls.__name__}: non-finite output in bfloat16"
            # bfloat16 keeps about 3 significant digits; the tolerance is
            # relative to the output's own scale (an absolute floor would let
            # a small output, e.g. an embedding's ~0.05, pass as all zeros).
            scale = float(np.abs(expected).max())
            np.testing.assert_allclose(values, expected, atol=0.05 * scale, err_msg=f"{cls.__name__} in bfloat16")
            error = np.linalg.norm(values - expected) / max(float(np.linalg.norm(expected)), 1e-30)
            assert error < 0.05, f"{cls.__name__}: bfloat16 output is {error:.1%} off the float32 one"
    finally:
        keras.config.set_dtype_policy(previous)


def dropout_state(layer):
    """A layer's non-trainable state (its dropout seeds), to replay."""
    return [ops.convert_to_numpy(v) for v in layer.non_trainable_variables]


def replay_dropout(layer, state):
    """Restore `dropout_state`, so that the next call draws the same masks."""
    for v, value in zip(layer.non_trainable_variables, state):
        v.assign(value)
    # torch's Keras dropout draws from torch's global generator, not from
    # the layer's seed state: reseed that too.
    keras.utils.set_random_seed(1234)
