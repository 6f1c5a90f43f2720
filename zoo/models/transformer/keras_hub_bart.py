"""keras-hub's `BartBackbone` -> the zoo's `EncoderDecoder`, and its
`BartTokenizer` -> `zoo.tokenizers.HuggingFaceTokenizer`.

keras-hub's BART is transformers' post-LN BART with exact GELU, LayerNorms
of epsilon 1e-5 on the embeddings, one token table for both stacks and the
output, and no `final_logits_bias`; its learned position tables start at
position 0 (keras-hub's converter drops transformers' first 2 rows), so
`position_offset=0`. keras-hub's Keras attention keeps (d, h, k) kernels
where the zoo fuses [q | k | v].
"""

import json
import tempfile
from pathlib import Path

import numpy as np

from zoo.models.keras_hub_layers import copy_attention, copy_block, copy_dense, copy_layer_norm
from zoo.models.tensor_names import to_numpy

BACKBONE = "keras_hub>BartBackbone"
TASKS = {"keras_hub>BartSeq2SeqLM": "seq2seq"}
TOKENIZER = {"keras_hub>BartTokenizer": ("vocabulary.json", "merges.txt")}


def zoo_config(backbone, where):
    config = backbone.get_config()
    return dict(
        vocabulary_size=config["vocabulary_size"],
        source_vocabulary_size=config["vocabulary_size"],
        num_layers=config["num_layers"],
        num_heads=config["num_heads"],
        hidden_dim=config["hidden_dim"],
        intermediate_dim=config["intermediate_dim"],
        max_sequence_length=config["max_sequence_length"],
        dropout=float(config["dropout"]),
        share_embeddings=True,
        tie_output=True,
        norm_first=False,
        activation="gelu",  # keras.activations.gelu, exact
        layer_norm_epsilon=1e-5,
        scale_embeddings=False,
        final_logits_bias=False,
        position="learned",
        position_offset=0,
        share_positions=False,
        layernorm_embedding=True,
    )


def _cross_attention(target, source, d):
    """keras' MultiHeadAttention -> the zoo's cross-attention: q alone, [k | v] fused."""
    copy_dense(target.query_dense, source._query_dense)
    kernels = [to_numpy(p.kernel).reshape(d, d) for p in (source._key_dense, source._value_dense)]
    target.key_value_dense.kernel.assign(np.concatenate(kernels, axis=1))
    target.key_value_dense.bias.assign(np.concatenate([to_numpy(p.bias).reshape(d) for p in
                                                       (source._key_dense, source._value_dense)]))
    copy_dense(target.output_dense, source._output_dense)


def copy_weights(model, backbone, where):
    """keras-hub's BartBackbone's weights into `model`."""
    d = backbone.hidden_dim
    model.decoder_embedding.token_embedding.embeddings.assign(to_numpy(backbone.token_embedding.embeddings))
    for embedding, position, norm, hub_norm in (
        (model.encoder_embedding, backbone.encoder_position_embedding, model.encoder_embedding_norm,
         backbone.encoder_embeddings_layer_norm),
        (model.decoder_embedding, backbone.decoder_position_embedding, model.decoder_embedding_norm,
         backbone.decoder_embeddings_layer_norm),
    ):
        embedding.position_embedding.position_embeddings.assign(to_numpy(position.position_embeddings))
        copy_layer_norm(norm, hub_norm)
    for target, source in zip(model.encoder_blocks, backbone.encoder_transformer_layers):
        copy_block(target, source, d)
    for target, source in zip(model.decoder_blocks, backbone.decoder_transformer_layers):
        copy_block(target, source, d)
        _cross_attention(target.cross_attention_layer, source._cross_attention_layer, d)
        copy_layer_norm(target.cross_attention_add_norm.layer_norm, source._cross_attention_layer_norm)


def tokenizer(hub_tokenizer):
    """keras-hub's BartTokenizer as the zoo's byte-level BPE with its ids; the decoder starts
    from `</s>` then `<s>`, as keras-hub's BartSeq2SeqLMPreprocessor and transformers' BART."""
    from zoo.tokenizers import HuggingFaceTokenizer

    vocabulary = dict(hub_tokenizer.vocabulary)
    generation = {"decoder_start_token_id": vocabulary["</s>"], "forced_bos_token_id": vocabulary["<s>"]}
    with tempfile.TemporaryDirectory() as folder:
        vocabulary_file, merges_file = Path(folder) / "vocab.json", Path(folder) / "merges.txt"
        vocabulary_file.write_text(json.dumps(vocabulary, ensure_ascii=False), encoding="utf-8")
        merges_file.write_text("".join(f"{merge}\n" for merge in hub_tokenizer.merges), encoding="utf-8")
        return HuggingFaceTokenizer.from_byte_level_bpe(vocabulary_file, merges_file, generation=generation)
