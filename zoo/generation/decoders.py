"""What generation needs from a model: fill a key/value cache, then step.

Each model family exposes the same operations to the decoding loop,
all through the model's own layers (one forward path: the cached step and
the full forward pass run the same block and attention code):

    context = decoder.start(source_ids, source_mask)  # once per call
    cache = decoder.prefill(prompt_ids, cache, context)  # the prompt, one pass
    logits, cache = decoder.step(token_ids, cache, index, context)  # one position

Shape letters: B batch, P padded prompt length, L cache length (prompt plus
new tokens), S source length, N layers, h heads, k head width, V vocabulary.
"""

from keras import ops

from zoo.models import (
    BertBackbone,
    BertClassifier,
    BertMaskedLM,
    BertSentenceEncoder,
    EncoderDecoder,
    GPTBackbone,
    GPTCausalLM,
)

_ENCODER_ONLY = (BertBackbone, BertClassifier, BertMaskedLM, BertSentenceEncoder)


class CausalDecoder:
    """A decoder-only model: a `GPTCausalLM`, or a bare `GPTBackbone` whose
    logits come from its tied token embedding."""

    is_encoder_decoder = False

    def __init__(self, model):
        self.model = model
        self.backbone = model.backbone if isinstance(model, GPTCausalLM) else model
        b = self.backbone
        self.num_layers, self.num_heads = b.num_layers, b.num_heads
        self.head_dim = b.hidden_dim // b.num_heads
        self.max_sequence_length = b.max_sequence_length
        self.vocabulary_size = b.vocabulary_size

    def start(self, source_ids=None, source_mask=None):
        return None

    def empty_cache(self, batch_size, length):
        return _empty_cache(self, batch_size, length, self.backbone.compute_dtype)

    def _hidden(self, token_ids, cache, index):
        x = self.backbone.embedding(token_ids, start_index=index)
        x = self.backbone.embeddings_dropout(x, training=False)
        return self.backbone.hidden_states(x, cache=cache, cache_index=index)

    def prefill(self, token_ids, cache, context=None):
        _, cache = self._hidden(token_ids, cache, 0)
        return cache

    def step(self, token_ids, cache, index, context=None):
        """(B, 1) token ids at position `index` -> (B, V) float32 logits for
        position index + 1, and the cache with position `index` written."""
        hidden, cache = self._hidden(token_ids, cache, index)
        return self._logits(hidden)[:, 0], cache

    def _logits(self, hidden):
        if isinstance(self.model, GPTCausalLM):
            return self.model.logits(hidden)
        return ops.cast(self.backbone.embedding(hidden, reverse=True), "float32")

    def repeat_context(self, context, times):
        return None


class Seq2SeqDecoder:
    """An `EncoderDecoder`: the encoder runs once per call; its output,
    projected to each decoder block's cross-attention keys and values, is
    the `context` every decoder step attends to."""

    is_encoder_decoder = True

    def __init__(self, model):
        self.model = model
        self.num_layers, self.num_heads = model.num_layers, model.num_heads
        self.head_dim = model.hidden_dim // model.num_heads
        self.max_sequence_length = model.max_sequence_length
        self.vocabulary_size = model.vocabulary_size
        self.source_vocabulary_size = model.source_vocabulary_size

    def start(self, source_ids, source_mask):
        """-> (cross_cache, source_mask (B, S)); the cross cache is a tuple
        of N per-layer (B, 2, h, S, k) projected encoder outputs."""
        encoded = self.model.encode(source_ids, source_mask, training=False)  # (B, S, d)
        cross_cache = tuple(
            block.cross_attention_layer.compute_key_value(encoded) for block in self.model.decoder_blocks
        )
        return cross_cache, source_mask

    def empty_cache(self, batch_size, length):
        return _empty_cache(self, batch_size, length, self.model.compute_dtype)

    def _hidden(self, token_ids, cache, index, context):
        cross_cache, source_mask = context
        x = self.model.decoder_embedding(token_ids, start_index=index)
        x = self.model.decoder_embeddings_dropout(x, training=False)
        return self.model.decode_step(x, source_mask, cache, index, cross_cache)

    def prefill(self, token_ids, cache, context):
        _, cache = self._hidden(token_ids, cache, 0, context)
        return cache

    def step(self, token_ids, cache, index, context):
        hidden, cache = self._hidden(token_ids, cache, index, context)
        return self.model.logits(hidden)[:, 0], cache

    def repeat_context(self, context, times):
        """Each batch row's context repeated `times` times (one per beam)."""
        cross_cache, source_mask = context
        repeat = lambda x: ops.repeat(x, times, axis=0)  # noqa: E731
        return tuple(repeat(c) for c in cross_cache), repeat(source_mask)


def _empty_cache(decoder, batch_size, length, dtype):
    """N per-layer (B, 2, h, L, k) self-attention caches (head-major), a tuple rather than
    one stacked tensor, so that a compiled loop updates each in place."""
    shape = (batch_size, 2, decoder.num_heads, length, decoder.head_dim)
    return tuple(ops.zeros(shape, dtype=dtype) for _ in range(decoder.num_layers))


def decoder_for(model):
    """The decoding adapter of a zoo model, or a ValueError saying why the
    model cannot generate."""
    if isinstance(model, (GPTCausalLM, GPTBackbone)):
        return CausalDecoder(model)
    if isinstance(model, EncoderDecoder):
        return Seq2SeqDecoder(model)
    if isinstance(model, _ENCODER_ONLY):
        raise ValueError(
            f"`generate` needs a decoder: got the encoder-only model {type(model).__name__}, "
            "which has no causal decoder to predict the next token. Use a decoder-only "
            "model (GPTCausalLM or GPTBackbone, e.g. zoo.build('gpt-nano', task='causal_lm')) "
            "or an encoder-decoder (EncoderDecoder, e.g. zoo.build('transformer-tiny'))."
        )
    raise ValueError(
        "`generate` expects a zoo decoder-only model (GPTCausalLM or GPTBackbone) or an "
        f"EncoderDecoder; got {type(model).__name__}."
    )

