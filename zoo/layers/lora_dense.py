"""A Dense layer whose LoRA update is added to the output, as in the paper.

Shape letters: B batch, T length, d_in and d_out the widths.
"""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="zoo")
class LoraDense(keras.layers.Dense):
    """`keras.layers.Dense` whose LoRA forward pass is Hu et al.'s
    h = W0 x + (alpha / r) B A x: the frozen kernel W0 and the low-rank
    product are applied to x one after the other, never summed into one
    (d_in, d_out) matrix.

    Keras' float Dense forms the merged kernel W0 + (alpha / r) A B at every
    step; autodiff then keeps it, one float copy of every adapted kernel,
    for the backward pass, and takes the gradient of the adapters through
    a (d_in, d_out) matrix. Here the backward pass reads W0 itself and
    the adapters' gradients go through the (B, T, r) product x A only.
    The weights, their names, the quantized calls (Keras' int8 and int4
    already add the adapters to the output), saving (the adapters merged
    into the kernel) and everything else are Keras' Dense.

    Args:
        as `keras.layers.Dense`.

    Call arguments:
        inputs: (B, T, d_in) or (B, d_in).

    Example:

    ```python
    dense = LoraDense(3)
    dense.build((None, 4))
    dense.enable_lora(2)
    y = dense(np.ones((1, 4)))  # (1, 3): x W0 + x A B (B starts at zero)
    ```

    References:
        Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language
        Models", equation 3.
    """

    def call(self, inputs, training=None):
        if not self.lora_enabled:
            return super().call(inputs, training=training)
        x = ops.matmul(inputs, ops.cast(self._kernel, self.compute_dtype))  # (B, T, d_out)
        update = ops.matmul(ops.matmul(inputs, self.lora_kernel_a), self.lora_kernel_b)  # (B, T, r) -> (B, T, d_out)
        x = ops.add(x, ops.cast((self.lora_alpha / self.lora_rank) * update, self.compute_dtype))
        if self.bias is not None:
            x = ops.add(x, self.bias)
        if self.activation is not None:
            x = self.activation(x)
        return x

    def quantize(self, mode=None, type_check=True, config=None):
        # Keras' Dense refuses subclasses (`type_check`); only the float LoRA call above differs from it.
        super().quantize(mode, type_check=False, config=config)
