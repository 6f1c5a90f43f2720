"""Decoder-only Transformer: GPT-1 (post-LN) and GPT-2 (pre-LN).

Radford et al. 2018, 2019. Shape letters: B batch, T length, d width,
V vocabulary.
"""

import math
from dataclasses import dataclass

import keras

from zoo.families import Family, Task, register
from zoo.layers import DecoderBlock, TokenAndPositionEmbedding
from zoo.models.base import ZooModel, gpt_initializer
from zoo.models.config import ModelConfig, Preset


class DecoderStack:
    """What every decoder-only backbone shares, written once: the
    functional graph, the cached step and the attention scores, each its
    own loop over the blocks.

    A backbone that mixes it in has `blocks` (`DecoderBlock`s),
    `final_norm` (or None), `embed(token_ids, start_index, training)`,
    `embedding` (the token embedding, tied to the logits unless `logits`
    is overridden), `num_key_value_heads` and `head_dim`.
    """

    def _functional_graph(self):
        """The functional model's inputs, `token_ids` (B, T) and the
        optional `padding_mask` (B, T), and its (B, T, d) output."""
        token_ids = keras.Input(shape=(None,), dtype="int32", name="token_ids")
        padding_mask = keras.Input(shape=(None,), dtype="int32", name="padding_mask", optional=True)
        x = self.embed(token_ids)
        for block in self.blocks:
            x = block(x, padding_mask=padding_mask)
        return {"token_ids": token_ids, "padding_mask": padding_mask}, self._final(x)

    def _final(self, x):
        """The final norm (pre-LN models) of the last block's output."""
        return x if self.final_norm is None else self.final_norm(x)

    def hidden_states_with_cache(self, token_ids, cache, cache_index):
        """The cached forward pass: (B, T) token ids at positions
        cache_index.. -> ((B, T, d) hidden states, cache), in inference mode.

        Args:
            token_ids: (B, T) int32.
            cache: N per-block (B, 2, g, S_max, k) self-attention caches
                (`empty_cache`); the new positions are written at
                `cache_index`.
            cache_index: the absolute position of the first token.
        """
        x = self.embed(token_ids, start_index=cache_index, training=False)
        new_cache = []
        for block, block_cache in zip(self.blocks, cache):
            x, block_cache = block.call_with_cache(x, block_cache, cache_index)
            new_cache.append(block_cache)
        return self._final(x), tuple(new_cache)

    def logits(self, hidden):
        """(B, T, d) final hidden states -> (B, T, V) logits through the
        tied token embedding (a family with an untied head overrides it)."""
        return self.embedding(hidden, reverse=True)

    def call_with_cache(self, token_ids, cache, cache_index, context=None):
        """The cached step with the language-model logits (what the causal
        LM computes): -> ((B, T, V) logits in the compute dtype, as the
        causal LM's; generation casts them to float32), cache). So a bare
        backbone generates too."""
        hidden, cache = self.hidden_states_with_cache(token_ids, cache, cache_index)
        return self.logits(hidden), cache

    def empty_cache(self, batch_size, length):
        """N per-block (B, 2, g, length, k) zero caches (head-major keys and
        values of the g key/value heads), a tuple rather than one stacked
        tensor, so that a compiled loop updates each in place."""
        shape = (batch_size, 2, self.num_key_value_heads, length, self.head_dim)
        return tuple(keras.ops.zeros(shape, dtype=self.compute_dtype) for _ in self.blocks)

    def attention_scores(self, inputs):
        """The attention weights of every block and head for `inputs` (the
        model's input dict; `padding_mask` optional), computed by the
        blocks' own layers in inference mode.

        Returns:
            {"self": (N, B, h, T, T)}: `scores["self"][i]` is block i's.
        """
        padding_mask = inputs.get("padding_mask")
        x, scores = self.embed(inputs["token_ids"], training=False), []
        for block in self.blocks:
            x, block_scores = block.call_with_attention_scores(x, padding_mask=padding_mask)
            scores.append(block_scores["self"])
        return {"self": keras.ops.stack(scores)}


@dataclass(frozen=True)
class GPTConfig(ModelConfig):
    """GPT's sizes and flags: `GPTBackbone`'s constructor arguments, and its
    presets.

    Attributes:
        vocabulary_size: V.
        num_layers: N.
        num_heads: h.
        hidden_dim: d.
        intermediate_dim: d_ff (4 * d in GPT).
        max_sequence_length: the context length (learned positions).
        dropout: residual, attention and embedding dropout.
        norm_first: True for GPT-2 (pre-LN + final LayerNorm), False for
            GPT-1 (post-LN, no final LayerNorm).
        activation: "gelu_approximate" (GPT-2) by default.
        layer_norm_epsilon: 1e-5 as GPT-2.
        initializer_range: std of the normal initialisation (0.02); the
            projections into the residual stream use
            initializer_range / sqrt(2 * num_layers), GPT-2's scaled init.
        use_bias: whether the projections and LayerNorms have biases; True
            for GPT-2, False for nanoGPT's `bias=False`.

    Example:

    ```python
    config = GPTConfig(vocabulary_size=50, num_layers=2, num_heads=2, hidden_dim=16)
    config.intermediate_dim  # 64: None is 4 d
    GPTBackbone(config=config).count_params() == GPTBackbone(**config.to_dict()).count_params()  # True
    ```

    References:
        Radford et al. 2018 (GPT-1) and 2019 (GPT-2); nanoGPT's
        `GPTConfig` (`bias=False`).
    """

    vocabulary_size: int
    num_layers: int
    num_heads: int
    hidden_dim: int
    intermediate_dim: int = None
    max_sequence_length: int = 1024
    dropout: float = 0.0
    norm_first: bool = True
    activation: str = "gelu_approximate"
    layer_norm_epsilon: float = 1e-5
    initializer_range: float = 0.02
    use_bias: bool = True

    positive = ("vocabulary_size", "num_layers", "num_heads", "hidden_dim", "max_sequence_length")

    def resolve(self):
        return {
            "intermediate_dim": self.intermediate_dim or 4 * self.hidden_dim,
        }


@keras.saving.register_keras_serializable(package="zoo")
class GPTBackbone(DecoderStack, ZooModel):
    """Token + learned position embeddings, N causal blocks, and (pre-LN)
    a final LayerNorm. Outputs the (B, T, d) hidden states.

    Args:
        config: a `GPTConfig`, or its fields as keyword (or positional)
            arguments: `GPTBackbone(vocabulary_size=..., num_layers=...)`.

    Inputs: `token_ids` (B, T) int32 and, optionally, `padding_mask`
    (B, T) int32 (1 for tokens, 0 for padding). Without a padding mask
    (language-model batches of full windows need none) the only mask is the
    causal one, and attention runs the backend's causal kernel.

    Example:

    ```python
    backbone = GPTBackbone(vocabulary_size=50, num_layers=2, num_heads=2, hidden_dim=16, max_sequence_length=32)
    token_ids = np.array([[5, 6, 7, 8]])
    hidden = backbone({"token_ids": token_ids})  # (1, 4, 16)
    scores = backbone.attention_scores({"token_ids": token_ids})
    scores["self"].shape  # (2, 1, 2, 4, 4): (N, B, h, T, T)
    ```

    References:
        Radford et al. 2018 (GPT-1), section 3.1; Radford et al. 2019
        (GPT-2), section 2.3 (pre-LN, final LayerNorm, scaled init).
    """

    is_encoder_decoder = False
    optional_inputs = ("padding_mask",)
    config_class = GPTConfig

    def __init__(self, *args, dtype=None, **kwargs):
        config, kwargs = GPTConfig.take(args, kwargs)
        # === Layers ===
        self.embedding = TokenAndPositionEmbedding(
            config.vocabulary_size,
            config.max_sequence_length,
            config.hidden_dim,
            position="learned",
            embeddings_initializer=gpt_initializer(config.initializer_range),
            position_initializer=gpt_initializer(config.initializer_range),
            dtype=dtype,
            name="embedding",
        )
        self.embeddings_dropout = keras.layers.Dropout(config.dropout, dtype=dtype, name="embeddings_dropout")
        residual_initializer = gpt_initializer(config.initializer_range / math.sqrt(2 * config.num_layers))
        self.blocks = [
            DecoderBlock(
                config.num_heads,
                config.intermediate_dim,
                dropout=config.dropout,
                activation=config.activation,
                norm_first=config.norm_first,
                layer_norm_epsilon=config.layer_norm_epsilon,
                kernel_initializer=gpt_initializer(config.initializer_range),
                output_kernel_initializer=residual_initializer,
                use_bias=config.use_bias,
                dtype=dtype,
                name=f"block_{i}",
            )
            for i in range(config.num_layers)
        ]
        self.final_norm = (
            keras.layers.LayerNormalization(
                epsilon=config.layer_norm_epsilon, center=config.use_bias, dtype=dtype, name="final_norm"
            )
            if config.norm_first
            else None
        )

        # === Functional model ===
        inputs, x = self._functional_graph()
        super().__init__(inputs=inputs, outputs=x, dtype=dtype, **kwargs)

        # === Config ===
        self._set_config(config, num_key_value_heads=config.num_heads, head_dim=config.hidden_dim // config.num_heads)

    def embed(self, token_ids, start_index=0, training=None):
        """(B, T) token ids at positions start_index.. -> (B, T, d)."""
        x = self.embedding(token_ids, start_index=start_index)
        return self.embeddings_dropout(x, training=training)


@keras.saving.register_keras_serializable(package="zoo")
class GPTCausalLM(ZooModel):
    """A GPT backbone with its language-model head tied to the token
    embedding. Outputs logits (B, T, V) for the next token, in the head's
    compute dtype (bfloat16 under mixed precision, as keras-hub's GPT2CausalLM;
    the losses sum them in float32).

    It owns its cached decoding step, what `zoo.generate` calls:
    `empty_cache(batch_size, length)` and `call_with_cache(token_ids,
    cache, cache_index) -> (logits, cache)`, through the backbone's own
    blocks.

    Args:
        backbone: a `GPTBackbone`.

    Inputs: as the backbone's (`padding_mask` optional).

    Example:

    ```python
    backbone = GPTBackbone(vocabulary_size=50, num_layers=2, num_heads=2, hidden_dim=16, max_sequence_length=32)
    lm = GPTCausalLM(backbone)
    logits = lm({"token_ids": np.array([[5, 6, 7]])})  # (1, 3, 50)
    out = zoo.generate(lm, [[5, 6, 7]], max_new_tokens=4)
    len(out.sequences[0])  # 4
    ```

    References:
        Radford et al. 2018 (GPT-1), section 3.1 (the language-modelling
        objective, the output head tied to the token embedding).
    """

    is_encoder_decoder = False
    optional_inputs = ("padding_mask",)

    def __init__(self, backbone, **kwargs):
        # === Layers ===
        self.backbone = backbone
        self.logits_cast = keras.layers.Activation("linear", dtype=backbone.embedding.dtype_policy, name="logits")
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
        (B, 2, g, length, k) tensors."""
        return self.backbone.empty_cache(batch_size, length)

    def call_with_cache(self, token_ids, cache, cache_index, context=None):
        """The cached step: (B, T) token ids at positions cache_index.. ->
        ((B, T, V) logits, cache with those positions written).
        `context` is unused (decoder-only models have no encoder)."""
        hidden, cache = self.backbone.hidden_states_with_cache(token_ids, cache, cache_index)
        return self.logits(hidden), cache

    def attention_scores(self, inputs):
        """The backbone's `attention_scores`: {"self": (N, B, h, T, T)}."""
        return self.backbone.attention_scores(inputs)


# The papers' sizes (GPT-1, GPT-2), and small ones for characters and tests.
PRESETS = {
    "gpt2-small": Preset(
        "GPT-2 124M: 12 layers, d=768, h=12, context 1024.",
        GPTConfig(vocabulary_size=50257, num_layers=12, num_heads=12, hidden_dim=768,
                  intermediate_dim=3072, max_sequence_length=1024, dropout=0.1),
    ),
    "gpt2-medium": Preset(
        "GPT-2 355M: 24 layers, d=1024, h=16, context 1024.",
        GPTConfig(vocabulary_size=50257, num_layers=24, num_heads=16, hidden_dim=1024,
                  intermediate_dim=4096, max_sequence_length=1024, dropout=0.1),
    ),
    "gpt1": Preset(
        "GPT-1 (post-LN): 12 layers, d=768, h=12, context 512, vocabulary 40,478.",
        GPTConfig(vocabulary_size=40478, num_layers=12, num_heads=12, hidden_dim=768,
                  intermediate_dim=3072, max_sequence_length=512, dropout=0.1,
                  norm_first=False, activation="gelu"),
    ),
    "gpt-baby": Preset(
        "nanoGPT's CPU 'baby GPT' for characters: 4 layers, d=128, h=4, block 64.",
        GPTConfig(vocabulary_size=65, num_layers=4, num_heads=4, hidden_dim=128,
                  intermediate_dim=512, max_sequence_length=64, dropout=0.0),
    ),
    "gpt-nano": Preset(
        "Tests: 2 layers, d=32, h=4, context 32 (minGPT's gpt-nano width was 48).",
        GPTConfig(vocabulary_size=100, num_layers=2, num_heads=4, hidden_dim=32,
                  intermediate_dim=64, max_sequence_length=32, dropout=0.0),
    ),
}


register(
    Family(
        "gpt",
        GPTBackbone,
        tasks={"causal_lm": Task(GPTCausalLM)},
        checkpoints="zoo.checkpoints.gpt2",
        description="GPT-1 and GPT-2: learned positions, LayerNorm, GELU",
        presets=PRESETS,
    )
)
