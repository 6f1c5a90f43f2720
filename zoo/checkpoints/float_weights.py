"""A quantized model's weights as it computes with them, in float32, for
the writers of float checkpoints (the GGUF export): `float_weights(model)`
makes each int8 or int4 Dense's `kernel` and Embedding's `embeddings` read
as `float_weight`, the dequantized matrix Keras' quantized calls multiply
by."""

import contextlib

import keras
import numpy as np
from keras import ops


def float_weight(layer):
    """The float32 NumPy matrix a quantized Dense (d_in, d_out) or
    Embedding (V, d) computes with, as Keras' int8 and int4 calls do: the
    integers (int4's unpacked) divided by their column's (a Dense's output
    unit's, an Embedding's token's) scale, or, quantized in groups, the
    integers less their group's zero point times the group's scale; plus
    the LoRA update where LoRA is enabled."""
    embedding = isinstance(layer, keras.layers.Embedding)
    if not isinstance(layer, (keras.layers.Dense, keras.layers.Embedding)):
        raise ValueError(f"{layer.name}: a quantized {type(layer).__name__} has no float weight here; "
                         "expected a Dense or an Embedding.")
    integers = np.asarray(layer._embeddings if embedding else layer._kernel)
    scale = np.asarray(layer.embeddings_scale if embedding else layer.kernel_scale)
    if layer.quantization_mode == "int4":
        integers = np.asarray(keras.quantizers.unpack_int4(integers, layer._orig_output_dim, axis=-1))
    integers = integers.T if embedding else integers  # (d_in, d_out): an Embedding's (d, V)
    if getattr(layer, "_int4_block_size", None) in (None, -1) or layer.quantization_mode != "int4":
        weight = integers.astype(scale.dtype) / scale  # one scale per column
    else:  # in groups along d_in, with zero points: g_idx is each input row's group
        groups = np.asarray(layer.g_idx).astype("int32")
        zero = np.asarray(layer.embeddings_zero if embedding else layer.kernel_zero)
        scale, zero = (scale.T, zero.T) if embedding else (scale, zero)  # (groups, d_out)
        weight = (integers.astype(scale.dtype) - zero[groups].astype(scale.dtype)) * scale[groups]
    weight = weight.T if embedding else weight
    if layer.lora_enabled:
        a, b = (layer.lora_embeddings_a, layer.lora_embeddings_b) if embedding else (layer.lora_kernel_a, layer.lora_kernel_b)
        weight = weight + np.asarray((layer.lora_alpha / layer.lora_rank) * ops.matmul(a, b))
    return weight.astype("float32")


@contextlib.contextmanager
def float_weights(model):
    """Within it, each quantized Dense's `kernel` and Embedding's
    `embeddings` in `model` read as `float_weight`: what a writer of float
    checkpoints reads through those attributes."""
    swapped = []
    try:
        for layer in model._flatten_layers(include_self=False):
            if getattr(layer.dtype_policy, "quantization_mode", None) not in ("int8", "int4"):
                continue  # float8 keeps its float kernel
            float_weight(layer)  # refuses a layer it cannot read before any is swapped back
            cls = type(layer)
            attribute = "embeddings" if isinstance(layer, keras.layers.Embedding) else "kernel"
            reading = type(cls.__name__, (cls,), {attribute: property(float_weight), "__module__": cls.__module__})
            object.__setattr__(layer, "__class__", reading)
            swapped.append((layer, cls))
        yield model
    finally:
        for layer, cls in swapped:
            object.__setattr__(layer, "__class__", cls)
