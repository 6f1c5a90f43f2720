"""The causal language model over any decoder-only backbone: logits for
the next token, and the cached step that `zoo.generate` calls.

Shape letters: B batch, T length, d width, V vocabulary, g key/value
heads, k head width.
"""

import keras

from zoo.models.base import ZooModel


@keras.saving.register_keras_serializable(package="zoo")
class CausalLM(ZooModel):
    """A decoder-only backbone (`DecoderStack`) with its language-model
    head: logits (B, T, V) for the next token, in the head's compute dtype
    (bfloat16 under mixed precision, as keras-hub's causal LMs; the losses
    sum them in float32). Each family registers its own subclass
    (`GPTCausalLM`, `LlamaCausalLM`, `Gemma3CausalLM`), which adds only its
    documentation.

    It owns its cached decoding step, what `zoo.generate` calls:
    `empty_cache(batch_size, length)` and `call_with_cache(token_ids,
    cache, cache_index) -> (logits, cache)`, through the backbone's own
    blocks.

    Args:
        backbone: the family's backbone.

    Inputs: as the backbone's (`padding_mask` optional).

    Example:

    ```python
    lm = zoo.build("llama-nano", task="causal_lm")  # a LlamaCausalLM, a CausalLM
    logits = lm({"token_ids": np.array([[5, 6, 7]])})  # (1, 3, 100)
    hidden, cache = lm.backbone.hidden_states_with_cache(np.array([[5, 6, 7]]), lm.empty_cache(1, 8), 0)
    np.testing.assert_allclose(lm.logits(hidden), logits, atol=1e-5)  # the cached step, the same logits
    ```

    References:
        Radford et al. 2018 (GPT-1), section 3.1 (the language-modelling
        objective).
    """

    is_encoder_decoder = False
    optional_inputs = ("padding_mask",)

    def __init__(self, backbone, **kwargs):
        # === Layers ===
        self.backbone = backbone
        # The embedding's compute dtype, not its policy: a reloaded quantized embedding's policy
        # ("int8_from_float32") would make this cast a quantized layer, which Keras has no call for.
        self.logits_cast = keras.layers.Activation("linear", dtype=backbone.embedding.compute_dtype, name="logits")
        # === Functional model ===
        inputs = {
            "token_ids": keras.Input(shape=(None,), dtype="int32", name="token_ids"),
            "padding_mask": keras.Input(shape=(None,), dtype="int32", name="padding_mask", optional=True),
        }
        hidden = backbone(inputs)
        logits = self.logits(hidden)
        super().__init__(inputs=inputs, outputs=logits, **kwargs)
        # === Config ===
        self._record_config(backbone=backbone)

    @property
    def vocabulary_size(self):
        return self.backbone.vocabulary_size

    @property
    def max_sequence_length(self):
        return self.backbone.max_sequence_length

    def logits(self, hidden):
        """(B, T, d) final hidden states -> (B, T, V) logits (compute dtype)."""
        return self.logits_cast(self.backbone.logits(hidden))

    def empty_cache(self, batch_size, length):
        """The zero key/value cache of `call_with_cache`: N per-block
        (keys, values), each (B, g, length, k)."""
        return self.backbone.empty_cache(batch_size, length)

    def loop_cache(self, cache):
        """The backbone's `loop_cache`: the form a compiled loop carries."""
        return self.backbone.loop_cache(cache)

    def call_with_cache(self, token_ids, cache, cache_index, context=None):
        """The cached step: (B, T) token ids at positions cache_index.. ->
        ((B, T, V) logits, cache with those positions written).
        `context` is unused (decoder-only models have no encoder)."""
        hidden, cache = self.backbone.hidden_states_with_cache(token_ids, cache, cache_index)
        return self.logits(hidden), cache

    def attention_scores(self, inputs):
        """The backbone's `attention_scores`: {"self": (N, B, h, T, T)}."""
        return self.backbone.attention_scores(inputs)
