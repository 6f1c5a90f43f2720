"""AdamW as one elementwise pass over every weight at once (a benchmark lever).

Keras' AdamW updates the weights one variable at a time: for GPT-2 small,
about 150 variables, each with its own decay, moment and update kernels and
its own squared sum for the global-norm clipping. `FlatAdamW` keeps the two
moments as one flat vector each, concatenates the gradients and the weights,
clips by the one norm, applies the decay and the Adam update in one
expression and splits the result back into the variables: what PyTorch's
fused AdamW (`fused=True`, nanoGPT's) does with its multi-tensor kernels.

The arithmetic is Keras' AdamW's (Loshchilov and Hutter 2019, with Keras'
bias correction and its clipping of the whole gradient's norm), so the two
give the same weights up to float32 rounding
(`tests/test_train_gpu_benchmark.py`). Float32 weights only (mixed
precision keeps them so); no gradient accumulation and no moving average.
"""

import math

import keras
from keras import ops


class FlatAdamW(keras.optimizers.AdamW):
    def build(self, variables):
        if self.built:
            return
        keras.optimizers.Optimizer.build(self, variables)  # the iterations and learning rate, not per-variable moments
        dtypes = {v.dtype for v in variables}
        if dtypes != {"float32"}:
            raise ValueError(f"FlatAdamW updates float32 weights; got {sorted(dtypes)}")
        self.sizes = [math.prod(v.shape) for v in variables]
        total = sum(self.sizes)
        self.flat_momentum = self.add_variable((total,), initializer="zeros", dtype="float32", name="momentum")
        self.flat_velocity = self.add_variable((total,), initializer="zeros", dtype="float32", name="velocity")
        self.decays = [float(self.weight_decay or 0.0) if self._use_weight_decay(v) else 0.0 for v in variables]

    def _backend_apply_gradients(self, grads, trainable_variables):
        if self.gradient_accumulation_steps or self.use_ema:
            raise ValueError("FlatAdamW has no gradient accumulation and no moving average")
        if len(trainable_variables) != len(self.sizes):
            raise ValueError("FlatAdamW updates every variable it was built with at each step")
        g = ops.concatenate([ops.reshape(ops.cast(grad, "float32"), (-1,)) for grad in grads])  # (N,)
        if self.global_clipnorm is not None:  # Keras' clip_by_global_norm on the one vector
            norm = ops.sqrt(ops.sum(ops.square(g)))
            g = g * (self.global_clipnorm * ops.minimum(1.0 / norm, 1.0 / self.global_clipnorm))
        p = ops.concatenate([ops.reshape(v.value, (-1,)) for v in trainable_variables])  # (N,)
        decay = ops.concatenate([ops.full((n,), wd, "float32") for n, wd in zip(self.sizes, self.decays)])
        lr = ops.cast(self.learning_rate, "float32")
        step = ops.cast(self.iterations + 1, "float32")
        alpha = lr * ops.sqrt(1 - ops.power(self.beta_2, step)) / (1 - ops.power(self.beta_1, step))
        m = self.flat_momentum + (g - self.flat_momentum) * (1 - self.beta_1)
        v = self.flat_velocity + (ops.square(g) - self.flat_velocity) * (1 - self.beta_2)
        p = p - p * decay * lr - m * alpha / (ops.sqrt(v) + self.epsilon)
        self.flat_momentum.assign(m)
        self.flat_velocity.assign(v)
        start = 0
        for variable, size in zip(trainable_variables, self.sizes):
            variable.assign(ops.reshape(p[start:start + size], variable.shape))
            start += size
