"""The order in which a quantized layer's float kernel is computed.

A quantized layer multiplies by its dequantized kernel in the forward pass
and again, for the input gradient, in the backward pass. Both depend on the
weights alone, so XLA is free to compute every layer's float kernel at the
start of the training step, or to compute it once for both passes, and then
holds all of them until the backward pass: a float copy of the weights,
which quantized fine-tuning (QLoRA) is meant not to hold. On the CPU XLA
also drops optimization barriers. What keeps the order is a data
dependency: a weight read through `after(weight, x)` is computed only once
x exists, and is not the same computation as the weight itself.
"""

from keras import ops


def after(value, x):
    """value plus zero times a sum over x: the same value, computed once x
    exists. XLA does not fold the addition away (zero times a float is not
    zero when the float is infinite or NaN)."""
    return ops.add(value, ops.cast(0.0 * ops.sum(x[..., :1]), value.dtype))
