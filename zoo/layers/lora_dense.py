"""A Dense layer whose LoRA update is added to the output, as in the paper.

Shape letters: B batch, T length, d_in and d_out the widths.
"""

import keras
from keras import ops

from zoo.kernels import float_dense, int4_matmul, int8_in_groups, integer_matmul, quantized_matmul
from zoo.layers.dequantized import after


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
            # A decoding step's few rows, float32, on a CPU: the kernel reads the weights whole (zoo.kernels).
            x = None if training else float_dense(inputs, self.kernel)
            if x is None:
                return super().call(inputs, training=training)
            return self._adapted(inputs, x)
        return self._adapted(inputs, ops.matmul(inputs, ops.cast(self._kernel, self.compute_dtype)))

    def _int8_call(self, inputs, training=None):
        return self._adapted(inputs, self._frozen_product(inputs, training, self._kernel, self.kernel_scale))

    def _int4_call(self, inputs, training=None):
        weights = (self._kernel, self.kernel_scale)
        if getattr(self, "_int4_block_size", None) not in (None, -1):  # in groups, with zero points
            weights += (self.kernel_zero, self.g_idx)
        return self._adapted(inputs, self._frozen_product(inputs, training, *weights))

    def _frozen_product(self, inputs, training, *weights):
        """x W0 (B, T, d_out) for a quantized kernel, as Keras' Dense
        computes it, with the input gradient upstream W0^T through the
        dequantized kernel.

        weights: the int8 kernel (d_in, d_out) or int4 one packed two a
        byte (d_in, d_out / 2), its scales (d_out,) and, when quantized in
        groups, the groups' scales and zero points (groups, d_out) and each
        input row's group (d_in,). A kernel with one scale per column
        multiplies the integers (the inputs quantized too where Keras'
        config says so) and de-scales the product, on a CPU in one call of
        `zoo.kernels.quantized_matmul` (or `integer_matmul` for the product
        alone), which reads the int8 kernel itself; one in
        groups with zero points multiplies the inputs rounded to int8 in
        its groups (`zoo.kernels.int8_in_groups`, as llama.cpp's q4_0
        does), read as it is by `zoo.kernels.int4_matmul` where it takes
        the product, else dequantized.

        In training, both products read the weights through `after`
        (zoo.layers.dequantized): the forward pass's once x exists, the
        backward pass's once the upstream gradient does, so that no
        layer's float kernel lives from one pass to the other
        (SmolLM2-135M's shape in int4: the compiled training step's
        temporaries 1,219 MiB without, 816 MiB with;
        benchmarks/training/finetune_memory.py). Outside training the
        forward pass reads them as they are, so that a decoding loop
        dequantizes each kernel once, not at every token.
        """

        @ops.custom_gradient
        def product(inputs, *weights):
            def gradient(*args, upstream=None):
                upstream = args[0] if upstream is None else upstream  # TensorFlow passes it first, JAX by name
                kernel = self._float_kernel(*[after(w, upstream) for w in weights])
                return (ops.matmul(upstream, ops.transpose(kernel)),) + (None,) * len(weights)

            if training:
                weights = [after(w, inputs) for w in weights]
            if len(weights) > 2:
                # In groups: the activations rounded to int8 in the kernel's groups and the 4-bit kernel read as it is
                # where the kernel takes it (zoo.kernels), else the rounded activations times the dequantized kernel.
                x = None if training else int4_matmul(inputs, *weights[:3], self._int4_block_size, self.units)
                if x is None:
                    x = ops.matmul(int8_in_groups(inputs, self._int4_block_size), self._float_kernel(*weights))
                return x, gradient
            scale = weights[1]
            if self.inputs_quantizer:
                # The quantizer, the integer product and the de-scaling in one call where the kernel takes it.
                x = quantized_matmul(inputs, self._integer_kernel(weights[0]), scale, self.inputs_quantizer)
                if x is not None:
                    return ops.cast(x, self.compute_dtype), gradient
                inputs, inputs_scale = self.inputs_quantizer(inputs, axis=-1)
                scale = ops.multiply(scale, inputs_scale)
                x = integer_matmul(inputs, self._integer_kernel(weights[0]))  # int32
            else:
                x = ops.matmul(inputs, self._integer_kernel(weights[0]))
            return ops.divide(ops.cast(x, self.compute_dtype), scale), gradient

        return product(inputs, *[ops.convert_to_tensor(w) for w in weights])

    def _integer_kernel(self, kernel):
        """The (d_in, d_out) int8 kernel, int4's unpacked."""
        if self.quantization_mode == "int4":
            return keras.quantizers.unpack_int4(kernel, self._orig_output_dim, axis=-1)
        return kernel

    def _float_kernel(self, kernel, scale, zero=None, g_idx=None):
        """W0 (d_in, d_out): the integers divided by their column's scale,
        or in groups (scale - zero point) times the group's scale."""
        kernel = self._integer_kernel(kernel)
        if zero is None:
            return ops.divide(ops.cast(kernel, self.compute_dtype), scale)
        groups = ops.cast(g_idx, "int32")  # (d_in,)
        scale, zero = ops.take(scale, groups, axis=0), ops.cast(ops.take(zero, groups, axis=0), scale.dtype)
        return ops.cast(ops.multiply(ops.subtract(kernel, zero), scale), self.compute_dtype)

    def _adapted(self, inputs, x):
        """x W0 (B, T, d_out) plus the LoRA update, the bias and the activation."""
        if self.lora_enabled:
            update = ops.matmul(ops.matmul(inputs, self.lora_kernel_a), self.lora_kernel_b)  # (B, T, r) -> (B, T, d_out)
            x = ops.add(x, ops.cast((self.lora_alpha / self.lora_rank) * update, self.compute_dtype))
        if self.bias is not None:
            x = ops.add(x, self.bias)
        if self.activation is not None:
            x = self.activation(x)
        return x

    def quantize(self, mode=None, type_check=True, config=None):
        # Keras' Dense refuses subclasses (`type_check`); its calls are Keras' but for the LoRA update and the order above.
        super().quantize(mode, type_check=False, config=config)

