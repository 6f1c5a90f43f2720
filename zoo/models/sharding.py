"""How a zoo model's variables are laid out over a device mesh for model
parallelism (`keras.distribution.ModelParallel`).

Every family names its layers alike (`token_embedding`, `query_key_value`
or `query` and `key_value`, `output`, `intermediate`, `gate`), so one layout map
serves them all. It follows Megatron-LM (Shoeybi et al. 2019, section 3):
in each attention and feed-forward sub-layer the first projection is split
by output columns and the second by input rows, so each device computes its
heads and its slice of the inner layer on its own, and one reduction joins
them; the token embedding is split along its width (a vocabulary such as
GPT-2's 50,257 rarely divides by the device count; the width must, as the
heads do). Everything else
(LayerNorms, biases of the second projections, position and segment
embeddings, heads) is small and replicated.
"""

import keras

# variable path pattern (a regular expression over the whole path) -> the
# mesh axis of each dimension, "model" standing for the model-parallel
# axis. Each variable matches one pattern at most.
MEGATRON_SHARDING = {
    ".*token_embedding/embeddings": (None, "model"),  # (V, d): width
    ".*attention/(query_key_value|query|key_value)/kernel": (None, "model"),  # (d, n*d): heads
    ".*attention/(query_key_value|query|key_value)/bias": ("model",),
    ".*attention/output/kernel": ("model", None),  # (d, d): input rows, one reduction
    ".*feed_forward/(intermediate|gate)/kernel": (None, "model"),  # (d, d_ff): columns (SwiGLU's gate too)
    ".*feed_forward/intermediate/bias": ("model",),
    ".*feed_forward/output/kernel": ("model", None),  # (d_ff, d): rows, one reduction
}


def get_layout_map(device_mesh, model_parallel_dim_name="model", data_parallel_dim_name="batch"):
    """A `keras.distribution.LayoutMap` that shards a zoo model's large
    kernels on the mesh's model axis, in keras-hub's convention
    (`Backbone.get_layout_map`).

    Args:
        device_mesh: a `keras.distribution.DeviceMesh`, e.g. of shape
            (batch, model) with axis names ("batch", "model").
        model_parallel_dim_name: the mesh axis the kernels are split on.
        data_parallel_dim_name: the mesh axis of the batch (unused by the
            variables, which are replicated along it; kept for keras-hub's
            signature).

    Returns:
        A `LayoutMap` for `keras.distribution.ModelParallel(layout_map=...,
        batch_dim_name=data_parallel_dim_name)`.

    Example:

    ```python
    mesh = keras.distribution.DeviceMesh((2, 2), ("batch", "model"), keras.distribution.list_devices())
    distribution = keras.distribution.ModelParallel(layout_map=get_layout_map(mesh), batch_dim_name="batch")
    keras.distribution.set_distribution(distribution)
    model = zoo.build("gpt2-medium", task="causal_lm")  # each kernel lives in halves on two devices
    ```

    References:
        Shoeybi et al. 2019 (Megatron-LM), section 3 and figure 3.
    """
    if model_parallel_dim_name not in device_mesh.axis_names:
        raise ValueError(
            f"model_parallel_dim_name: the mesh has the axes {list(device_mesh.axis_names)}; "
            f"got {model_parallel_dim_name!r}."
        )
    layout_map = keras.distribution.LayoutMap(device_mesh)
    for pattern, axes in MEGATRON_SHARDING.items():
        layout_map[pattern] = tuple(model_parallel_dim_name if axis == "model" else axis for axis in axes)
    return layout_map
