"""Rotary grouped-query decoders (the Llama family, Gemma 3): the config
fields they share, the backbone that builds their blocks from it, and
those fields under transformers' config keys.

A family subclasses `RotaryDecoderConfig` with its own flags and each
layer's attention options, and `RotaryDecoder` with its block's choices
(activation, norm) and, where it differs, its `embed`. Shape letters:
B batch, T length, d width, V vocabulary, h heads, g key/value heads,
k head width.
"""

from dataclasses import dataclass

import keras

from zoo.layers import DecoderBlock, RMSNorm, TokenEmbedding
from zoo.layers.initializers import fresh
from zoo.models.base import ZooModel, gpt_initializer
from zoo.models.config import ModelConfig
from zoo.models.decoder_stack import DecoderStack


@dataclass(frozen=True)
class RotaryDecoderConfig(ModelConfig):
    """The fields every rotary grouped-query decoder shares (the Llama
    family's and Gemma 3's configs start with them, in this order).

    Attributes:
        vocabulary_size: V.
        num_layers: N.
        num_heads: h, the query heads.
        hidden_dim: d.
        intermediate_dim: d_ff, the width of the gate and up projections.
        num_key_value_heads: g (dividing h): h is multi-head attention, 1
            multi-query; None for h.
        head_dim: k; None for d / h.
        max_sequence_length: the context the checkpoint was trained for
            (rotary positions have no table; generation slides its window
            past it).
        rope_theta: the rotary frequency base.
        rms_norm_epsilon: the RMSNorms' epsilon (transformers' `rms_norm_eps`).
        dropout: residual and attention dropout (0 in the checkpoints).
        initializer_range: std of the normal initialisation of every
            kernel and embedding (0.02).
    """

    vocabulary_size: int
    num_layers: int
    num_heads: int
    hidden_dim: int
    intermediate_dim: int
    num_key_value_heads: int = None
    head_dim: int = None
    max_sequence_length: int = 2048
    rope_theta: float = 10000.0
    rms_norm_epsilon: float = 1e-6
    dropout: float = 0.0
    initializer_range: float = 0.02

    positive = ("vocabulary_size", "num_layers", "num_heads", "hidden_dim", "intermediate_dim",
                "num_key_value_heads", "max_sequence_length")
    former_names = {"layer_norm_epsilon": "rms_norm_epsilon"}

    def resolve(self):
        return {"num_key_value_heads": self.num_key_value_heads or self.num_heads}

    def check(self):
        super().check()
        if self.num_heads % self.num_key_value_heads:
            raise ValueError(f"num_key_value_heads={self.num_key_value_heads} must divide num_heads={self.num_heads} "
                             "(each key/value head serves the same number of query heads).")
        head_dim = self.head_dim or self.hidden_dim // self.num_heads
        if head_dim % 2:
            raise ValueError(f"The head width {head_dim} must be even: rotary positions turn pairs of its dimensions.")

    def attention_options(self, i):
        """Layer i's self-attention flags beyond g and k (`MultiHeadAttention`'s arguments)."""
        return {"rope_theta": self.rope_theta}


class RotaryDecoder(DecoderStack, ZooModel):
    """Token embeddings, N pre-norm blocks (RMSNorm, rotary grouped-query
    self-attention, a gated feed-forward network), a final RMSNorm and,
    where the family has one, an untied head. Outputs the (B, T, d) hidden
    states; `DecoderStack` adds the cached step and the attention scores.

    A family sets `config_class` and its block's `activation`,
    `normalization` and `sandwich_norm`; layer i's self-attention flags
    are its config's `attention_options(i)`. It overrides `embed` or
    `untied_head` where it differs.

    Inputs: `token_ids` (B, T) int32 and, optionally, `padding_mask`
    (B, T) int32, as `GPTBackbone`.
    """

    is_encoder_decoder = False
    optional_inputs = ("padding_mask",)
    config_class = RotaryDecoderConfig
    activation = "silu"
    normalization = "rms_norm"
    sandwich_norm = False

    def __init__(self, *args, dtype=None, **kwargs):
        config, kwargs = self.config_class.take(args, kwargs)
        initializer = gpt_initializer(config.initializer_range)
        # === Layers ===
        self.embedding = TokenEmbedding(
            config.vocabulary_size, config.hidden_dim, embeddings_initializer=fresh(initializer), dtype=dtype,
            name="token_embedding",
        )
        self.embeddings_dropout = keras.layers.Dropout(config.dropout, dtype=dtype, name="embeddings_dropout")
        self.blocks = [
            DecoderBlock(
                config.num_heads,
                config.intermediate_dim,
                dropout=config.dropout,
                activation=self.activation,
                norm_first=True,
                norm_epsilon=config.rms_norm_epsilon,
                kernel_initializer=initializer,
                use_bias=False,
                normalization=self.normalization,
                sandwich_norm=self.sandwich_norm,
                gated_feed_forward=True,
                self_attention_options=dict(
                    num_key_value_heads=config.num_key_value_heads,
                    head_dim=config.head_dim,
                    **config.attention_options(i),
                ),
                dtype=dtype,
                name=f"block_{i}",
            )
            for i in range(config.num_layers)
        ]
        self.final_norm = RMSNorm(
            config.rms_norm_epsilon, unit_offset=self.normalization == "gemma_rms_norm", dtype=dtype,
            name="final_norm",
        )
        self.lm_head = self.untied_head(config, initializer, dtype)

        # === Functional model ===
        inputs, x = self._functional_graph()
        if self.lm_head is not None:
            self.lm_head.build(x.shape)
        super().__init__(inputs=inputs, outputs=x, dtype=dtype, **kwargs)

        # === Config ===
        self._set_config(config, head_dim=config.head_dim or config.hidden_dim // config.num_heads)

    def untied_head(self, config, initializer, dtype):
        """The (d, V) head, or None when the logits go through the token embedding."""
        return None

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


def huggingface_fields(backbone):
    """The shared fields under transformers' config keys (the Llama
    family's and Gemma 3's alike)."""
    config = backbone.config
    return {
        "vocab_size": config.vocabulary_size,
        "hidden_size": config.hidden_dim,
        "intermediate_size": config.intermediate_dim,
        "num_hidden_layers": config.num_layers,
        "num_attention_heads": config.num_heads,
        "num_key_value_heads": config.num_key_value_heads,
        "head_dim": backbone.head_dim,
        "max_position_embeddings": config.max_sequence_length,
        "rope_theta": config.rope_theta,
        "rms_norm_eps": config.rms_norm_epsilon,
        "attention_dropout": config.dropout,
        "initializer_range": config.initializer_range,
    }


def fields_from_huggingface(get, head_dim=None, max_sequence_length=2048):
    """The shared fields from a transformers config (`get(key, default)`
    reads it); `head_dim` and `max_sequence_length` are the defaults of
    keys a config may leave out. The rotary base is the family's to read
    (transformers keeps it under version-dependent keys)."""
    num_heads, hidden_dim = get("num_attention_heads"), get("hidden_size")
    head_dim = get("head_dim", head_dim)
    return dict(
        vocabulary_size=get("vocab_size"),
        num_layers=get("num_hidden_layers"),
        num_heads=num_heads,
        hidden_dim=hidden_dim,
        intermediate_dim=get("intermediate_size"),
        num_key_value_heads=get("num_key_value_heads", num_heads),
        head_dim=None if head_dim == hidden_dim // num_heads else head_dim,
        max_sequence_length=get("max_position_embeddings", max_sequence_length),
        rms_norm_epsilon=float(get("rms_norm_eps", 1e-6)),
        dropout=float(get("attention_dropout", 0.0)),
        initializer_range=float(get("initializer_range", 0.02)),
    )


def huggingface_tensor_names(backbone, prefix="model."):
    """transformers' tensor names of a rotary decoder (`LlamaModel`,
    `Gemma3TextModel`, ...), each beside the zoo variable it is
    (`zoo.models.tensor_names.TensorName`): `q_proj`, `k_proj` and `v_proj`
    are column blocks of the fused kernel, q/k norms where the attention
    has them, two norms per layer or four with sandwich norms, and the
    untied `lm_head` where there is one."""
    from zoo.models.tensor_names import TensorName, fused_linear

    p = prefix
    query_width = backbone.num_heads * backbone.head_dim  # h k
    key_width = backbone.num_key_value_heads * backbone.head_dim  # g k
    names = [TensorName(f"{p}embed_tokens.weight", backbone.embedding.embeddings)]
    for i, block in enumerate(backbone.blocks):
        layer = f"{p}layers.{i}."
        attention, ff = block.self_attention, block.feed_forward
        attention_norms, feed_forward_norms = block.self_attention_add_norm, block.feed_forward_add_norm
        parts = [f"{layer}self_attn.{part}_proj" for part in "qkv"]
        qkv = attention.query_key_value_dense
        names += fused_linear(parts, qkv, (query_width, key_width, key_width), bias=qkv.use_bias)
        names.append(TensorName(f"{layer}self_attn.o_proj.weight", attention.output_dense.kernel, transpose=True))
        if attention.query_norm is not None:
            names += [
                TensorName(f"{layer}self_attn.q_norm.weight", attention.query_norm.scale),
                TensorName(f"{layer}self_attn.k_norm.weight", attention.key_norm.scale),
            ]
        names += [
            TensorName(f"{layer}mlp.gate_proj.weight", ff.gate_dense.kernel, transpose=True),
            TensorName(f"{layer}mlp.up_proj.weight", ff.intermediate_dense.kernel, transpose=True),
            TensorName(f"{layer}mlp.down_proj.weight", ff.output_dense.kernel, transpose=True),
            TensorName(f"{layer}input_layernorm.weight", attention_norms.layer_norm.scale),
        ]
        if block.sandwich_norm:
            names += [
                TensorName(f"{layer}post_attention_layernorm.weight", attention_norms.output_norm.scale),
                TensorName(f"{layer}pre_feedforward_layernorm.weight", feed_forward_norms.layer_norm.scale),
                TensorName(f"{layer}post_feedforward_layernorm.weight", feed_forward_norms.output_norm.scale),
            ]
        else:
            names.append(TensorName(f"{layer}post_attention_layernorm.weight", feed_forward_norms.layer_norm.scale))
    names.append(TensorName(f"{p}norm.weight", backbone.final_norm.scale))
    if backbone.lm_head is not None:
        names.append(TensorName("lm_head.weight", backbone.lm_head.kernel, transpose=True))
    return names
