"""The encoder-decoder Transformer (Vaswani et al. 2017, Figure 1).

Shape letters: B batch, S source length, T target length, d width,
V vocabulary.
"""

import keras
from keras import ops

from zoo.layers import (
    DecoderBlock,
    EncoderBlock,
    LayerNormalization,
    OutputBias,
    RelativePositionBias,
    RMSNorm,
    TokenAndPositionEmbedding,
    TokenEmbedding,
)
from zoo.layers.multi_head_attention import merge_rows
from zoo.models.base import ZooModel
from zoo.models.transformer.config import EncoderDecoderConfig
from zoo.traced_once import apply_block, call_block


@keras.saving.register_keras_serializable(package="zoo")
class EncoderDecoder(ZooModel):
    """Encoder (N blocks, unmasked self-attention) and decoder (N blocks,
    causal self-attention + cross-attention to the final encoder output),
    then a linear map to target-vocabulary logits.

    Args:
        config: an `EncoderDecoderConfig`, or its fields as keyword (or
            positional) arguments: `EncoderDecoder(vocabulary_size=..., ...)`.

    Inputs: `encoder_token_ids` (B, S), `encoder_padding_mask` (B, S),
    `decoder_token_ids` (B, T), `decoder_padding_mask` (B, T), int32.
    Output: float32 logits (B, T, V). Trained with teacher forcing: the
    decoder input is the target shifted right behind a start token.

    It owns its cached decoding step, what `zoo.generate` calls:
    `start(source_ids, source_padding_mask)` runs the encoder once and
    projects each decoder block's cross-attention keys and values;
    `empty_cache(batch_size, length)` and `call_with_cache(token_ids, cache,
    cache_index, context) -> (logits, cache)` then decode through the same
    blocks as the functional graph.

    Example:

    ```python
    model = EncoderDecoder(vocabulary_size=40, num_layers=2, num_heads=2, hidden_dim=16, max_sequence_length=16)
    inputs = {
        "encoder_token_ids": np.array([[4, 5, 6, 0]]),
        "encoder_padding_mask": np.array([[1, 1, 1, 0]]),
        "decoder_token_ids": np.array([[1, 7, 8]]),
        "decoder_padding_mask": np.array([[1, 1, 1]]),
    }
    logits = model(inputs)  # (1, 3, 40)
    scores = model.attention_scores(inputs)
    scores["cross"].shape  # (2, 1, 2, 3, 4): (N, B, h, T, S)
    out = zoo.generate(model, [[1]], max_new_tokens=3, source=[[4, 5, 6]])
    ```

    References:
        Vaswani et al. 2017, section 3 and Figure 1 (the architecture),
        section 3.4 (shared, scaled embeddings), section 3.5 (sinusoidal
        positions); Lewis et al. 2020 (BART: learned positions for each
        stack, a LayerNorm on the embeddings, GELU); Raffel et al. 2020 (T5:
        relative position biases, pre-norm RMSNorm, no biases, unscaled
        attention logits; v1.1's gated GELU and untied output).
    """

    is_encoder_decoder = True
    config_class = EncoderDecoderConfig

    def __init__(self, *args, dtype=None, **kwargs):
        config, kwargs = EncoderDecoderConfig.take(args, kwargs)
        # === Layers ===
        self._build_embeddings(config, dtype)
        block_args = dict(
            dropout=config.dropout,
            activation=config.activation,
            norm_first=config.norm_first,
            norm_epsilon=config.layer_norm_epsilon,
            dtype=dtype,
        )
        # T5's variants, passed only where set, so that the other presets' blocks keep their defaults.
        attention_options = {k: v for k, v in (("attention_scale", config.attention_scale),
                                                ("head_dim", config.head_dim)) if v is not None}
        encoder_args, decoder_args = dict(block_args), dict(block_args)
        if config.position == "relative":
            variant = dict(use_bias=config.use_bias, normalization=config.normalization,
                           gated_feed_forward=config.gated_feed_forward, self_attention_options=attention_options,
                           feed_forward_dropout=config.dropout)
            encoder_args.update(variant)
            decoder_args.update(variant, cross_attention_options=attention_options)
        self.encoder_blocks = [
            EncoderBlock(config.num_heads, config.intermediate_dim, name=f"encoder_block_{i}", **encoder_args)
            for i in range(config.num_layers)
        ]
        self.decoder_blocks = [
            DecoderBlock(
                config.num_heads, config.intermediate_dim, use_cross_attention=True, name=f"decoder_block_{i}",
                **decoder_args,
            )
            for i in range(config.num_layers)
        ]
        # T5's relative position biases: one table per stack, its bias added in every layer of the stack.
        self.encoder_position_bias = self.decoder_position_bias = None
        if config.position == "relative":
            buckets = dict(num_buckets=config.relative_attention_num_buckets,
                           max_distance=config.relative_attention_max_distance, dtype=dtype)
            self.encoder_position_bias = RelativePositionBias(
                config.num_heads, bidirectional=True, name="encoder_relative_attention_bias", **buckets)
            self.decoder_position_bias = RelativePositionBias(
                config.num_heads, bidirectional=False, name="decoder_relative_attention_bias", **buckets)
        if config.normalization == "rms_norm":  # T5's final stack norms
            norm = lambda name: RMSNorm(config.layer_norm_epsilon, dtype=dtype, name=name)  # noqa: E731
        else:
            norm = lambda name: LayerNormalization(epsilon=config.layer_norm_epsilon, dtype=dtype, name=name)  # noqa: E731
        self.encoder_norm = norm("encoder_norm") if config.norm_first else None
        self.decoder_norm = norm("decoder_norm") if config.norm_first else None
        # T5's dropout on each stack's output, after its final norm.
        self.encoder_output_dropout = self.decoder_output_dropout = None
        if config.position == "relative":
            self.encoder_output_dropout = keras.layers.Dropout(config.dropout, dtype=dtype, name="encoder_output_dropout")
            self.decoder_output_dropout = keras.layers.Dropout(config.dropout, dtype=dtype, name="decoder_output_dropout")
        self.output_scale = config.hidden_dim**-0.5 if config.scale_tied_output else None
        self.output_projection = (
            None
            if config.tie_output
            else keras.layers.Dense(config.vocabulary_size, use_bias=config.use_bias, dtype=dtype,
                                    name="output_projection")
        )
        self.output_bias = None
        if config.final_logits_bias:
            self.output_bias = OutputBias(dtype=dtype, name="final_logits_bias")
            self.output_bias.supports_masking = True  # elementwise: the target's Keras mask passes through
        self.logits_cast = keras.layers.Activation("linear", dtype="float32", name="logits")

        # === Functional model ===
        inputs = {
            "encoder_token_ids": keras.Input(shape=(None,), dtype="int32", name="encoder_token_ids"),
            "encoder_padding_mask": keras.Input(shape=(None,), dtype="int32", name="encoder_padding_mask"),
            "decoder_token_ids": keras.Input(shape=(None,), dtype="int32", name="decoder_token_ids"),
            "decoder_padding_mask": keras.Input(shape=(None,), dtype="int32", name="decoder_padding_mask"),
        }
        encoded = self.encode(inputs["encoder_token_ids"], inputs["encoder_padding_mask"])
        x = self.embed_target(inputs["decoder_token_ids"])
        bias = self._position_bias(self.decoder_position_bias, x)
        for block in self.decoder_blocks:
            x = block(
                x,
                encoded,
                padding_mask=inputs["decoder_padding_mask"],
                encoder_padding_mask=inputs["encoder_padding_mask"],
                **bias,
            )
        logits = self.logits(x)
        super().__init__(inputs=inputs, outputs=logits, dtype=dtype, **kwargs)

        # === Config ===
        self._set_config(config)

    def _build_embeddings(self, config, dtype):
        """The token and position embeddings of both stacks (one shared
        table, or one each), BART's LayerNorms on them, and their dropouts."""
        def embedding(size, name, token_embedding=None):
            return TokenAndPositionEmbedding(
                size,
                config.max_sequence_length,
                config.hidden_dim,
                position=config.position,
                position_offset=config.position_offset,
                scale_embeddings=config.scale_embeddings,  # section 3.4: embeddings times sqrt(d_model)
                embeddings_initializer=keras.initializers.RandomNormal(stddev=config.hidden_dim**-0.5),
                token_embedding=token_embedding,
                dtype=dtype,
                name=name,
            )

        if config.position == "relative":  # T5: one token table, no absolute positions
            self.decoder_embedding = self.encoder_embedding = TokenEmbedding(
                config.vocabulary_size, config.hidden_dim, embeddings_initializer=keras.initializers.RandomNormal(
                    stddev=1.0), dtype=dtype, name="embedding")
        elif not config.share_embeddings:
            self.decoder_embedding = embedding(config.vocabulary_size, "decoder_embedding")
            self.encoder_embedding = embedding(config.source_vocabulary_size, "encoder_embedding")
        elif config.share_positions:  # one layer: the paper's shared table and its positions
            self.decoder_embedding = self.encoder_embedding = embedding(config.vocabulary_size, "embedding")
        else:  # one token table, a learned position table per stack (BART)
            self.decoder_embedding = embedding(config.vocabulary_size, "decoder_embedding")
            self.encoder_embedding = embedding(
                config.vocabulary_size, "encoder_embedding", token_embedding=self.decoder_embedding.token_embedding
            )
        norm = lambda name: LayerNormalization(epsilon=config.layer_norm_epsilon, dtype=dtype, name=name)
        # BART's `layernorm_embedding`: a LayerNorm on tokens plus positions, before the dropout.
        self.encoder_embedding_norm = norm("encoder_layernorm_embedding") if config.layernorm_embedding else None
        self.decoder_embedding_norm = norm("decoder_layernorm_embedding") if config.layernorm_embedding else None
        dropout = lambda name: keras.layers.Dropout(config.dropout, dtype=dtype, name=name)
        self.encoder_embeddings_dropout = dropout("encoder_embeddings_dropout")
        self.decoder_embeddings_dropout = dropout("decoder_embeddings_dropout")

    def encode(self, encoder_token_ids, encoder_padding_mask, training=None):
        """(B, S) source ids -> (B, S, d) final encoder output. The same
        layers serve the functional graph and `zoo.generate`."""
        x = self.embed_source(encoder_token_ids, training=training)
        bias = self._position_bias(self.encoder_position_bias, x)
        for i in range(len(self.encoder_blocks)):
            x = apply_block(self.encoder_blocks, i, x, padding_mask=encoder_padding_mask, training=training, **bias)
        return self._encoder_final(x, training=training)

    @staticmethod
    def _position_bias(layer, x, **kwargs):
        """{"attention_bias": (1, h, T, S)} of a stack's relative position
        bias (T5), the keyword its blocks take; {} without one."""
        return {} if layer is None else {"attention_bias": layer(x, **kwargs)}

    def embed_source(self, encoder_token_ids, training=None):
        """(B, S) source ids -> (B, S, d)."""
        x = self._embed(self.encoder_embedding, encoder_token_ids)
        if self.encoder_embedding_norm is not None:
            x = self.encoder_embedding_norm(x)
        return self.encoder_embeddings_dropout(x, training=training)

    def _encoder_final(self, x, training=None):
        """The encoder's final norm (pre-LN models) of its last block's
        output, and T5's dropout after it."""
        if self.encoder_norm is not None:
            x = self.encoder_norm(x)
        if self.encoder_output_dropout is not None:
            x = self.encoder_output_dropout(x, training=training)
        return x

    def _embed(self, layer, token_ids, start_index=0):
        """Token ids -> (B, T, d): a token-and-position embedding, or T5's token embedding alone."""
        if self.decoder_position_bias is not None:
            return layer(token_ids)
        return layer(token_ids, start_index=start_index)

    def embed_target(self, decoder_token_ids, start_index=0, training=None):
        """(B, T) target ids at positions start_index.. -> (B, T, d)."""
        x = self._embed(self.decoder_embedding, decoder_token_ids, start_index)
        if self.decoder_embedding_norm is not None:
            x = self.decoder_embedding_norm(x)
        return self.decoder_embeddings_dropout(x, training=training)

    def start(self, source_ids, source_padding_mask):
        """Encode the source once for cached decoding -> the `context` of
        `call_with_cache`: (N per-block cross-attention (keys, values), each
        (B, h, S, k), the (B, S) source padding mask). Every tensor in it
        has the batch on axis 0."""
        encoded = self.encode(source_ids, source_padding_mask, training=False)  # (B, S, d)
        cross_caches = tuple(block.compute_cross_attention_cache(encoded) for block in self.decoder_blocks)
        return cross_caches, source_padding_mask

    def empty_cache(self, batch_size, length):
        """N per-block (keys, values) zero self-attention caches, each
        (B, h, length, k): tensors of their own rather than one stacked
        tensor, so that a compiled loop updates each in place and the
        attention reads each as it is."""
        shape = (batch_size, self.num_heads, length, self.head_dim or self.hidden_dim // self.num_heads)
        return tuple(tuple(keras.ops.zeros(shape, dtype=self.compute_dtype) for _ in range(2))
                     for _ in self.decoder_blocks)

    def loop_cache(self, cache):
        """The self-attention cache in the form a compiled decoding loop
        carries (`merge_rows`): at batch 1 each (1, h, S, k) tensor as
        (h, S, k), which the attention product reads without a reshape, so
        that XLA writes each step's keys and values in place; of more rows,
        as it is."""
        return merge_rows(cache)

    def call_with_cache(self, token_ids, cache, cache_index, context):
        """The cached step: (B, T) target ids at positions cache_index.. ->
        ((B, T, V) float32 logits, cache with those positions written), in
        inference mode. `cache_index` is a scalar, or (B,) one a row (each
        row at its own position: the positions, the cache write, the causal
        mask and T5's bias all read it per row). `context` comes from
        `start`."""
        cross_caches, source_padding_mask = context
        x, new_cache = self.embed_target(token_ids, start_index=cache_index, training=False), []
        bias = self._position_bias(self.decoder_position_bias, x, key_length=ops.shape(cache[0][0])[-2],
                                   start_index=cache_index)  # (1 or B, h, T, L)
        for i, (block_cache, cross_cache) in enumerate(zip(cache, cross_caches)):
            x, block_cache = call_block(
                self.decoder_blocks,
                i,
                x,
                self_attention_cache=block_cache,
                cache_index=cache_index,
                cross_attention_cache=cross_cache,
                encoder_padding_mask=source_padding_mask,
                training=False,
                **bias,
            )
            new_cache.append(block_cache)
        return self.logits(x), tuple(new_cache)

    def attention_scores(self, inputs):
        """The attention weights of every block and head for `inputs` (the
        model's input dict), computed by the blocks' own layers in inference
        mode.

        Returns:
            {"encoder": (N, B, h, S, S), "self": (N, B, h, T, T), "cross":
            (N, B, h, T, S)}: the encoder's self-attention, the decoder's
            causal self-attention and its cross-attention; index 0 is the
            first block.
        """
        source_mask = inputs["encoder_padding_mask"]
        x, encoder_scores = self.embed_source(inputs["encoder_token_ids"], training=False), []
        bias = self._position_bias(self.encoder_position_bias, x)
        for block in self.encoder_blocks:
            x, block_scores = block.call(x, padding_mask=source_mask, return_attention_scores=True, training=False,
                                         **bias)
            encoder_scores.append(block_scores)
        encoded = self._encoder_final(x)
        x, decoder_scores = self.embed_target(inputs["decoder_token_ids"], training=False), []
        bias = self._position_bias(self.decoder_position_bias, x)
        for block in self.decoder_blocks:
            x, block_scores = block.call(
                x,
                encoded,
                padding_mask=inputs["decoder_padding_mask"],
                encoder_padding_mask=source_mask,
                return_attention_scores=True,
                training=False,
                **bias,
            )
            decoder_scores.append(block_scores)
        stack = keras.ops.stack
        return {
            "encoder": stack(encoder_scores),
            "self": stack([s["self"] for s in decoder_scores]),
            "cross": stack([s["cross"] for s in decoder_scores]),
        }

    def logits(self, hidden):
        """(B, T, d) decoder output -> (B, T, V) float32 logits."""
        if self.decoder_norm is not None:
            hidden = self.decoder_norm(hidden)
        if self.decoder_output_dropout is not None:
            hidden = self.decoder_output_dropout(hidden)
        if self.output_scale is not None:  # T5 v1.0: the tied head sees the output times d_model**-0.5
            hidden = hidden * self.output_scale
        if self.output_projection is None:
            logits = self.decoder_embedding(hidden, reverse=True)
        else:
            logits = self.output_projection(hidden)
        if self.output_bias is not None:
            logits = self.output_bias(logits)
        return self.logits_cast(logits)

    @classmethod
    def _nested_models(cls):
        return ()
