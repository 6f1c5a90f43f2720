"""What every decoder-only backbone shares: the functional graph, the
cached step and the attention scores.

Shape letters: B batch, T length, d width, V vocabulary, g key/value
heads, k head width, S_max the cache length.
"""

import keras

from zoo.layers.multi_head_attention import merge_rows
from zoo.traced_once import call_block


class DecoderStack:
    """What every decoder-only backbone shares, written once: the
    functional graph, the cached step and the attention scores, each its
    own loop over the blocks.

    The cached step and the attention scores call each block's `call`
    directly: they need none of `Layer.__call__`'s work (building, casting,
    Keras masks), and the step's Python stays short.

    A backbone that mixes it in has `blocks` (`DecoderBlock`s),
    `final_norm` (or None), `embed(token_ids, start_index, training)`,
    `embedding` (the token embedding, tied to the logits unless `logits`
    is overridden), `num_key_value_heads` and `head_dim`.

    Example:

    ```python
    backbone = zoo.build("gpt-nano")  # a GPTBackbone, a DecoderStack
    token_ids = np.array([[5, 6, 7, 8]])
    hidden = backbone({"token_ids": token_ids})  # (1, 4, 32): the functional graph
    cached, cache = backbone.hidden_states_with_cache(token_ids, backbone.empty_cache(1, 8), 0)
    np.testing.assert_allclose(cached, hidden, atol=1e-5)  # the cached step: the same blocks
    backbone.attention_scores({"token_ids": token_ids})["self"].shape  # (2, 1, 4, 4, 4): (N, B, h, T, T)
    ```

    References:
        keras-hub's `CausalLM.call_with_cache` (the cached step a model
        owns); Radford et al. 2019 (GPT-2), section 2.3.
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
            cache: N per-block (keys, values) self-attention caches, each
                (B, g, S_max, k)
                (`empty_cache`); the new positions are written at
                `cache_index`.
            cache_index: the absolute position of the first token.
        """
        x = self.embed(token_ids, start_index=cache_index, training=False)
        new_cache = []
        for i, block_cache in enumerate(cache):
            x, block_cache = call_block(self.blocks, i, x, self_attention_cache=block_cache, cache_index=cache_index,
                                        training=False)
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
        """N per-block (keys, values) zero caches, each (B, g, length, k)
        (head-major, the g key/value heads): tensors of their own rather
        than one stacked tensor, so that a compiled loop updates each in
        place and the attention reads each as it is."""
        shape = (batch_size, self.num_key_value_heads, length, self.head_dim)
        return tuple(tuple(keras.ops.zeros(shape, dtype=self.compute_dtype) for _ in range(2)) for _ in self.blocks)

    def loop_cache(self, cache):
        """The cache in the form a compiled decoding loop carries
        (`merge_rows`): at batch 1 each (1, g, S, k) tensor as (g, S, k),
        which the attention product reads without a reshape, so that XLA
        writes each step's keys and values in place; of more rows, as it is."""
        return merge_rows(cache)

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
            x, block_scores = block.call(x, padding_mask=padding_mask, return_attention_scores=True, training=False)
            scores.append(block_scores["self"])
        return {"self": keras.ops.stack(scores)}
