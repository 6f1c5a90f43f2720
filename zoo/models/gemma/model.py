"""Decoder-only Transformer of Gemma 3 (the text models: 270M, 1B).

The Llama block (`zoo.models.llama`) with Gemma's changes: the token
embeddings scaled by sqrt(d), the (1 + g) RMSNorm, a second norm on each
sub-layer's output (sandwich norm), GeGLU in place of SwiGLU, a norm on
each query and key head, and local layers: five of every six attend
within a sliding window with their own rotary base, the sixth to the whole
context. The head is tied to the token embedding. Shape letters: B batch,
T length, d width, V vocabulary, h heads, g key/value heads, k head width.
"""

import math

import keras
from keras import ops

from zoo.models.causal_lm import CausalLM
from zoo.models.gemma.config import Gemma3Config
from zoo.models.rotary_decoder import RotaryDecoder


@keras.saving.register_keras_serializable(package="zoo")
class Gemma3Backbone(RotaryDecoder):
    """Token embeddings times sqrt(d), N pre-norm blocks with sandwich norms
    ((1 + g) RMSNorm, rotary grouped-query self-attention with query/key
    norms, GeGLU), local and global by `layer_types`, and a final norm.
    Outputs the (B, T, d) hidden states.

    Args:
        config: a `Gemma3Config`, or its fields as keyword (or positional)
            arguments: `Gemma3Backbone(vocabulary_size=..., num_layers=...)`.

    Inputs: `token_ids` (B, T) int32 and, optionally, `padding_mask`
    (B, T) int32, as `GPTBackbone`.

    Example:

    ```python
    backbone = Gemma3Backbone(vocabulary_size=50, num_layers=2, num_heads=4, hidden_dim=16, intermediate_dim=32,
                              num_key_value_heads=1, head_dim=8, max_sequence_length=32)
    hidden = backbone({"token_ids": np.array([[5, 6, 7, 8, 9, 10]])})  # (1, 6, 16)
    backbone.layer_types  # ['sliding_attention', 'sliding_attention']
    ```

    References:
        Gemma Team 2025, "Gemma 3 Technical Report", section 2
        (architecture: 5:1 local/global layers, QK-norm, RoPE bases);
        Gemma Team 2024, "Gemma 2" (sandwich norms, GeGLU, sqrt(d)
        embedding scale); Shazeer 2020 (GLU variants); Beltagy et al.
        2020 (sliding-window attention).
    """

    config_class = Gemma3Config
    activation = "gelu_approximate"
    normalization = "gemma_rms_norm"
    sandwich_norm = True

    def embed(self, token_ids, start_index=0, training=None):
        """(B, T) token ids -> (B, T, d) embeddings times sqrt(d), the
        factor rounded to the compute dtype as the checkpoints do.
        Positions enter in each attention layer's rotation."""
        x = self.embedding(token_ids)
        x = x * ops.cast(math.sqrt(self.embedding.output_dim), x.dtype)
        return self.embeddings_dropout(x, training=training)


@keras.saving.register_keras_serializable(package="zoo")
class Gemma3CausalLM(CausalLM):
    """A `Gemma3Backbone` with its tied language-model head: logits
    (B, T, V) for the next token. The same task as `GPTCausalLM` (the
    cached step `zoo.generate` calls, `attention_scores`).

    Args:
        backbone: a `Gemma3Backbone`.

    Example:

    ```python
    backbone = Gemma3Backbone(vocabulary_size=50, num_layers=2, num_heads=4, hidden_dim=16, intermediate_dim=32,
                              num_key_value_heads=1, head_dim=8, max_sequence_length=32)
    lm = Gemma3CausalLM(backbone)
    out = zoo.generate(lm, [[5, 6, 7]], max_new_tokens=4)
    len(out.sequences[0])  # 4
    ```

    References:
        Gemma Team 2025 (Gemma 3); Radford et al. 2018, section 3.1 (the
        language-modelling objective).
    """
