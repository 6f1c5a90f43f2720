"""Decoder-only Transformer with today's variants: Llama, Mistral, Qwen2,
Qwen3, SmolLM2, TinyLlama.

The GPT decoder (`zoo.models.gpt`) with four named changes: RMSNorm in
place of LayerNorm, rotary positions in place of learned ones,
grouped-query attention, and the SwiGLU feed-forward network; no biases
(but Qwen2's Q, K and V), an optional untied head and Qwen3's per-head
query/key norm. Shape letters: B batch, T length, d width, V vocabulary,
h heads, g key/value heads, k head width.
"""

import keras

from zoo.families import Family, Task, register
from zoo.layers import DecoderBlock, RMSNorm, TokenEmbedding
from zoo.models.base import ZooModel, check_positive, gpt_initializer
from zoo.models.gpt import DecoderStack, GPTCausalLM


@keras.saving.register_keras_serializable(package="zoo")
class LlamaBackbone(DecoderStack, ZooModel):
    """Token embeddings, N pre-norm blocks (RMSNorm, rotary grouped-query
    self-attention, SwiGLU) and a final RMSNorm. Outputs the (B, T, d)
    hidden states.

    Args:
        vocabulary_size: V.
        num_layers: N.
        num_heads: h, the query heads.
        hidden_dim: d.
        intermediate_dim: d_ff, the width of the gate and up projections.
        num_key_value_heads: g (dividing h): h is multi-head attention, 1
            multi-query; None for h.
        head_dim: k; None for d / h (Qwen3 sets it).
        max_sequence_length: the context the checkpoint was trained for
            (rotary positions have no table; generation slides its window
            past it).
        rope_theta: the rotary frequency base.
        rope_scaling: None or a Hugging Face "llama3" scaling dict.
        layer_norm_epsilon: the RMSNorms' epsilon (`rms_norm_eps`).
        tie_word_embeddings: the logits through the token embedding (True)
            or through their own (d, V) head (False, as TinyLlama).
        attention_bias: biases on the Q, K and V projections (Qwen2).
        query_key_norm: an RMSNorm on each query and key head (Qwen3).
        dropout: residual and attention dropout (0 in the checkpoints).
        initializer_range: std of the normal initialisation of every
            kernel and embedding (0.02).

    Inputs: `token_ids` (B, T) int32 and, optionally, `padding_mask`
    (B, T) int32, as `GPTBackbone`.

    Example:

    ```python
    backbone = LlamaBackbone(vocabulary_size=50, num_layers=2, num_heads=4, hidden_dim=16,
                             intermediate_dim=32, num_key_value_heads=2, max_sequence_length=32)
    hidden = backbone({"token_ids": np.array([[5, 6, 7, 8]])})  # (1, 4, 16)
    cache = backbone.empty_cache(1, 8)
    cache[0].shape  # (1, 2, 2, 8, 4): (B, 2, g, S, k), g = 2 key/value heads
    ```

    References:
        Touvron et al. 2023 (LLaMA), section 2.2: pre-normalisation with
        RMSNorm (Zhang and Sennrich 2019), SwiGLU (Shazeer 2020), rotary
        embeddings (Su et al. 2021); Ainslie et al. 2023 (grouped-query
        attention); Meta's Llama 3 (rope scaling); Qwen2 and Qwen3
        technical reports (Q, K, V biases; query/key norm).
    """

    is_encoder_decoder = False
    optional_inputs = ("padding_mask",)

    def __init__(
        self,
        vocabulary_size,
        num_layers,
        num_heads,
        hidden_dim,
        intermediate_dim,
        num_key_value_heads=None,
        head_dim=None,
        max_sequence_length=2048,
        rope_theta=10000.0,
        rope_scaling=None,
        layer_norm_epsilon=1e-5,
        tie_word_embeddings=True,
        attention_bias=False,
        query_key_norm=False,
        dropout=0.0,
        initializer_range=0.02,
        dtype=None,
        **kwargs,
    ):
        num_key_value_heads = num_key_value_heads or num_heads
        check_positive(
            vocabulary_size=vocabulary_size,
            num_layers=num_layers,
            num_heads=num_heads,
            hidden_dim=hidden_dim,
            intermediate_dim=intermediate_dim,
            num_key_value_heads=num_key_value_heads,
            max_sequence_length=max_sequence_length,
        )
        if head_dim is None and hidden_dim % num_heads:
            raise ValueError(f"hidden_dim={hidden_dim} must be divisible by num_heads={num_heads}, or pass `head_dim`.")
        initializer = gpt_initializer(initializer_range)
        # === Layers ===
        self.embedding = TokenEmbedding(
            vocabulary_size, hidden_dim, embeddings_initializer=initializer, dtype=dtype, name="token_embedding"
        )
        self.embeddings_dropout = keras.layers.Dropout(dropout, dtype=dtype, name="embeddings_dropout")
        self.blocks = [
            DecoderBlock(
                num_heads,
                intermediate_dim,
                dropout=dropout,
                activation="silu",
                norm_first=True,
                layer_norm_epsilon=layer_norm_epsilon,
                kernel_initializer=initializer,
                use_bias=False,
                normalization="rms_norm",
                gated_feed_forward=True,
                num_key_value_heads=num_key_value_heads,
                head_dim=head_dim,
                rope_theta=rope_theta,
                rope_scaling=rope_scaling,
                query_key_norm=query_key_norm,
                attention_bias=attention_bias,
                dtype=dtype,
                name=f"block_{i}",
            )
            for i in range(num_layers)
        ]
        self.final_norm = RMSNorm(layer_norm_epsilon, dtype=dtype, name="final_norm")
        self.lm_head = None
        if not tie_word_embeddings:
            self.lm_head = keras.layers.Dense(
                vocabulary_size, use_bias=False, kernel_initializer=initializer, dtype=dtype, name="lm_head"
            )

        # === Functional model ===
        inputs, x = self._functional_graph()
        if self.lm_head is not None:
            self.lm_head.build(x.shape)
        super().__init__(inputs=inputs, outputs=x, dtype=dtype, **kwargs)

        # === Config ===
        self.vocabulary_size = vocabulary_size
        self.num_layers = num_layers
        self.num_heads = num_heads
        self.hidden_dim = hidden_dim
        self.intermediate_dim = intermediate_dim
        self.num_key_value_heads = num_key_value_heads
        self.head_dim = head_dim or hidden_dim // num_heads
        self.max_sequence_length = max_sequence_length
        self.tie_word_embeddings = tie_word_embeddings
        self.dropout = dropout
        self._record_config(
            vocabulary_size=vocabulary_size,
            num_layers=num_layers,
            num_heads=num_heads,
            hidden_dim=hidden_dim,
            intermediate_dim=intermediate_dim,
            num_key_value_heads=num_key_value_heads,
            head_dim=head_dim,
            max_sequence_length=max_sequence_length,
            rope_theta=rope_theta,
            rope_scaling=rope_scaling,
            layer_norm_epsilon=layer_norm_epsilon,
            tie_word_embeddings=tie_word_embeddings,
            attention_bias=attention_bias,
            query_key_norm=query_key_norm,
            dropout=dropout,
            initializer_range=initializer_range,
        )

    def embed(self, token_ids, start_index=0, training=None):
        """(B, T) token ids -> (B, T, d). Positions enter in each
        attention layer's rotation, so `start_index` is not read here."""
        return self.embeddings_dropout(self.embedding(token_ids), training=training)

    def logits(self, hidden):
        """(B, T, d) final hidden states -> (B, T, V) logits: the tied token
        embedding, or the untied head."""
        if self.lm_head is None:
            return self.embedding(hidden, reverse=True)
        return self.lm_head(hidden)


@keras.saving.register_keras_serializable(package="zoo")
class LlamaCausalLM(GPTCausalLM):
    """A `LlamaBackbone` with its language-model head (tied or untied, as
    the backbone's `tie_word_embeddings`): logits (B, T, V) for the next
    token. The same task as `GPTCausalLM` (the cached step `zoo.generate`
    calls, `attention_scores`), over the Llama backbone.

    Args:
        backbone: a `LlamaBackbone`.

    Example:

    ```python
    backbone = LlamaBackbone(vocabulary_size=50, num_layers=2, num_heads=4, hidden_dim=16,
                             intermediate_dim=32, num_key_value_heads=2, max_sequence_length=32)
    lm = LlamaCausalLM(backbone)
    out = zoo.generate(lm, [[5, 6, 7]], max_new_tokens=4)
    len(out.sequences[0])  # 4
    ```

    References:
        Touvron et al. 2023 (LLaMA); Radford et al. 2018, section 3.1 (the
        language-modelling objective).
    """


register(
    Family(
        "llama",
        LlamaBackbone,
        tasks={"causal_lm": Task(LlamaCausalLM)},
        checkpoints="zoo.checkpoints.llama",
        description="Llama, Mistral, Qwen2/3, SmolLM2, TinyLlama: RMSNorm, rotary, grouped-query attention, SwiGLU",
    )
)
