"""Tiny random T5 checkpoints in Hugging Face's format, built here (nothing
downloads), a float64 NumPy reference of `T5ForConditionalGeneration`'s
forward pass that reads their tensors directly, and a re-implementation of
`T5Tokenizer`'s rules.

A folder is what `t5-small` (v1.0: ReLU, the output tied to `shared` and
rescaled by d_model**-0.5) or `google/flan-t5-small` (v1.1: gated GELU,
an untied `lm_head`, heads of width d_kv other than d_model / h) holds:
config.json, model.safetensors, spiece.model (a SentencePiece model trained
here with T5's `<pad>` 0, `</s>` 1, `<unk>` 2), tokenizer_config.json and
generation_config.json. Every weight is random, the RMSNorm gains and the
relative position tables included, so a tensor in the wrong place changes
the logits.
"""

import io
import json
import math
from pathlib import Path

import numpy as np

from tests.checkpoints.marian_checkpoints import ENGLISH, GERMAN

EXTRA_IDS = 100
SENTENCES = ["translate English to German: A man rides a bike.", "Größe über Straße – naïve 東京 🙂",
             "summarize: Die Kinder spielen im Garten.", "", ">>de<< Ein Mann <extra_id_0> fährt<extra_id_12>  Rad </s>."]
VERSIONS = {
    "v1.0": dict(d_model=32, d_kv=8, d_ff=48, num_layers=2, num_decoder_layers=2, num_heads=4,
                 feed_forward_proj="relu", tie_word_embeddings=True),
    "v1.1": dict(d_model=32, d_kv=6, d_ff=40, num_layers=2, num_decoder_layers=2, num_heads=4,
                 feed_forward_proj="gated-gelu", tie_word_embeddings=False),
}


def train_sentence_piece(texts, vocabulary_size):
    """A SentencePiece unigram model's bytes with T5's special ids: `<pad>` 0, `</s>` 1, `<unk>` 2, no `<s>`."""
    import sentencepiece

    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(texts), model_writer=model, vocab_size=vocabulary_size, model_type="unigram",
        character_coverage=1.0, hard_vocab_limit=False, minloglevel=2, num_threads=1,
        pad_id=0, eos_id=1, unk_id=2, bos_id=-1,
    )
    return model.getvalue()


def tokenizer_json(proto, extra_ids=EXTRA_IDS):
    """The tokenizer.json transformers' `T5TokenizerFast` writes for `spiece.model` (its
    `T5Converter`, legacy mode): a Unigram model over the pieces and their scores, then the
    sentinels `<extra_id_99>` .. `<extra_id_0>`; the SentencePiece model's precompiled
    normalizer, a right strip and runs of spaces as one; Metaspace ("always" a leading `▁`);
    `</s>` appended; `<pad>`, `</s>`, `<unk>` and the sentinels as special added tokens."""
    from sentencepiece import sentencepiece_model_pb2
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    spm = sentencepiece_model_pb2.ModelProto()
    spm.ParseFromString(proto)
    vocabulary = [(piece.piece, piece.score) for piece in spm.pieces]
    vocabulary += [(f"<extra_id_{i}>", 0.0) for i in range(extra_ids - 1, -1, -1)]
    tokenizer = Tokenizer(models.Unigram(vocabulary, spm.trainer_spec.unk_id, False))
    tokenizer.normalizer = normalizers.Sequence([
        normalizers.Precompiled(spm.normalizer_spec.precompiled_charsmap),
        normalizers.Strip(left=False, right=True),
        normalizers.Replace(Regex(" {2,}"), "\u2581"),
    ])
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
    tokenizer.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always")
    end = [piece.piece for piece in spm.pieces].index("</s>")
    tokenizer.post_processor = processors.TemplateProcessing(
        single=["$A", "</s>"], pair=["$A", "</s>", "$B", "</s>"], special_tokens=[("</s>", end)])
    tokenizer.add_special_tokens([AddedToken(token, normalized=False) for token in ("<pad>", "</s>", "<unk>")])
    tokenizer.add_special_tokens([AddedToken(f"<extra_id_{i}>", normalized=False) for i in range(extra_ids)])
    return tokenizer.to_str()


def piece_count(proto):
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor()
    processor.LoadFromSerializedProto(proto)
    return processor.get_piece_size()


def config(vocabulary_size, version="v1.1", **changes):
    return {
        "architectures": ["T5ForConditionalGeneration"], "model_type": "t5", "vocab_size": vocabulary_size,
        **VERSIONS[version], "relative_attention_num_buckets": 8, "relative_attention_max_distance": 20,
        "dropout_rate": 0.1, "layer_norm_epsilon": 1e-6, "initializer_factor": 1.0,
        "is_gated_act": VERSIONS[version]["feed_forward_proj"].startswith("gated"), "is_encoder_decoder": True,
        "pad_token_id": 0, "eos_token_id": 1, "decoder_start_token_id": 0, "use_cache": True, **changes,
    }


def tensors(config, seed=0):
    """{transformers name: float32 array} of a T5ForConditionalGeneration, every weight random."""
    rng = np.random.default_rng(seed)

    def r(*shape, mean=0.0, scale=0.3):
        return rng.normal(mean, scale, shape).astype(np.float32)

    d, ff, v, h = config["d_model"], config["d_ff"], config["vocab_size"], config["num_heads"]
    inner, buckets = h * config["d_kv"], config["relative_attention_num_buckets"]
    t = {"shared.weight": r(v, d, scale=1.0)}

    def attention(p, position_bias):
        for n in "qkv":  # small enough that the unscaled scores (no 1/sqrt(d_kv)) stay in float32's reach
            t[f"{p}{n}.weight"] = r(inner, d, scale=0.15)
        t[p + "o.weight"] = r(d, inner)
        if position_bias:
            t[p + "relative_attention_bias.weight"] = r(buckets, h, scale=1.0)

    def norm(p):
        t[p + ".weight"] = r(d, mean=1.0)

    def feed_forward(p):
        if config["feed_forward_proj"].startswith("gated"):
            t[p + "wi_0.weight"], t[p + "wi_1.weight"] = r(ff, d), r(ff, d)
        else:
            t[p + "wi.weight"] = r(ff, d)
        t[p + "wo.weight"] = r(d, ff)

    for i in range(config["num_layers"]):
        p = f"encoder.block.{i}.layer."
        attention(p + "0.SelfAttention.", i == 0), norm(p + "0.layer_norm")
        feed_forward(p + "1.DenseReluDense."), norm(p + "1.layer_norm")
    norm("encoder.final_layer_norm")
    for i in range(config["num_decoder_layers"]):
        p = f"decoder.block.{i}.layer."
        attention(p + "0.SelfAttention.", i == 0), norm(p + "0.layer_norm")
        attention(p + "1.EncDecAttention.", False), norm(p + "1.layer_norm")
        feed_forward(p + "2.DenseReluDense."), norm(p + "2.layer_norm")
    norm("decoder.final_layer_norm")
    if not config["tie_word_embeddings"]:
        t["lm_head.weight"] = r(v, d)
    return t


def hf_folder(folder, version="v1.1", seed=0, config_changes=None, tokenizer="spiece.model"):
    """A T5 folder: config.json, model.safetensors, spiece.model (or, with `tokenizer="tokenizer.json"`,
    T5TokenizerFast's tokenizer.json of the same model instead) and the tokenizer and generation files."""
    from safetensors.numpy import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    proto = train_sentence_piece(GERMAN + ENGLISH, 90)
    # The embedding has rows past the tokenizer's ids, as t5-small's 32128 for 32100 tokens.
    settings = config(piece_count(proto) + EXTRA_IDS + 8, version, **(config_changes or {}))
    weights = tensors(settings, seed)
    # transformers writes each stack's `embed_tokens`, a copy of `shared`, in some checkpoints.
    weights["encoder.embed_tokens.weight"] = weights["shared.weight"]
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(settings), encoding="utf-8")
    if tokenizer == "tokenizer.json":
        (folder / "tokenizer.json").write_text(tokenizer_json(proto), encoding="utf-8")
    else:
        (folder / "spiece.model").write_bytes(proto)
    tokenizer_config = {"tokenizer_class": "T5Tokenizer", "model_max_length": 512, "eos_token": "</s>",
                        "unk_token": "<unk>", "pad_token": "<pad>", "extra_ids": EXTRA_IDS}
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer_config), encoding="utf-8")
    generation = {"decoder_start_token_id": 0, "eos_token_id": 1, "pad_token_id": 0}
    (folder / "generation_config.json").write_text(json.dumps(generation), encoding="utf-8")
    return folder


# --- The float64 reference -------------------------------------------------------------------


def relative_position_bucket(relative_position, bidirectional, num_buckets, max_distance):
    """T5Attention._relative_position_bucket, its logarithm in float32 as torch takes it."""
    buckets = np.zeros_like(relative_position)
    if bidirectional:
        num_buckets //= 2
        buckets += (relative_position > 0).astype(np.int64) * num_buckets
        relative_position = np.abs(relative_position)
    else:
        relative_position = -np.minimum(relative_position, 0)
    max_exact = num_buckets // 2
    with np.errstate(divide="ignore"):
        scaled = (np.log(relative_position.astype(np.float32) / np.float32(max_exact))
                  / np.float32(math.log(max_distance / max_exact)) * np.float32(num_buckets - max_exact))
    large = max_exact + np.where(np.isfinite(scaled), scaled, 0).astype(np.int64)
    large = np.minimum(large, num_buckets - 1)
    return buckets + np.where(relative_position < max_exact, relative_position, large)


def position_bias(table, config, query_length, key_length, bidirectional):
    """T5Attention.compute_bias: (1, h, T, S)."""
    relative = np.arange(key_length)[None, :] - np.arange(query_length)[:, None]
    buckets = relative_position_bucket(relative, bidirectional, config["relative_attention_num_buckets"],
                                       config["relative_attention_max_distance"])
    return table[buckets].transpose(2, 0, 1)[None]


def _rms_norm(x, w, p, epsilon):
    """T5LayerNorm: no mean subtraction, no bias."""
    return w[p + ".weight"] * x / np.sqrt((x**2).mean(-1, keepdims=True) + epsilon)


def _attention(x, memory, w, p, config, allowed, bias):
    """T5Attention: no 1/sqrt(d_kv) scaling; the position bias (or 0) added to the scores."""
    b, t, _ = x.shape
    s, heads, k = memory.shape[1], config["num_heads"], config["d_kv"]
    q = (x @ w[p + "q.weight"].T).reshape(b, t, heads, k).transpose(0, 2, 1, 3)  # (B, h, T, k)
    key = (memory @ w[p + "k.weight"].T).reshape(b, s, heads, k).transpose(0, 2, 1, 3)  # (B, h, S, k)
    value = (memory @ w[p + "v.weight"].T).reshape(b, s, heads, k).transpose(0, 2, 1, 3)
    scores = q @ key.transpose(0, 1, 3, 2) + bias  # (B, h, T, S)
    scores = np.where(allowed[:, None], scores, -np.inf)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    return (weights @ value).transpose(0, 2, 1, 3).reshape(b, t, heads * k) @ w[p + "o.weight"].T


def _gelu_new(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def _feed_forward(x, w, p, config):
    """T5DenseActDense (relu) or T5DenseGatedActDense (gated-gelu: gelu_new(wi_0 x) * wi_1 x)."""
    if config["feed_forward_proj"] == "gated-gelu":
        hidden = _gelu_new(x @ w[p + "wi_0.weight"].T) * (x @ w[p + "wi_1.weight"].T)
    else:
        hidden = np.maximum(x @ w[p + "wi.weight"].T, 0)
    return hidden @ w[p + "wo.weight"].T


def reference_logits(tensors, config, source_ids, source_mask, target_ids):
    """T5ForConditionalGeneration's logits (B, T, V) in float64, in inference mode: pre-norm
    blocks, layer 0's position bias in every layer of its stack, final norms, then the untied
    lm_head, or the tied `shared` after the d_model**-0.5 rescale."""
    w = {name: value.astype(np.float64) for name, value in tensors.items()}
    eps = config["layer_norm_epsilon"]
    embedding = w["shared.weight"]
    source_mask = np.asarray(source_mask, bool)
    b, s, t = len(source_ids), source_ids.shape[1], target_ids.shape[1]

    x = embedding[source_ids]
    allowed = np.broadcast_to(source_mask[:, None, :], (b, s, s))
    bias = position_bias(w["encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"], config, s, s, True)
    for i in range(config["num_layers"]):
        p = f"encoder.block.{i}.layer."
        x = x + _attention(_rms_norm(x, w, p + "0.layer_norm", eps), _rms_norm(x, w, p + "0.layer_norm", eps), w,
                           p + "0.SelfAttention.", config, allowed, bias)
        x = x + _feed_forward(_rms_norm(x, w, p + "1.layer_norm", eps), w, p + "1.DenseReluDense.", config)
    memory = _rms_norm(x, w, "encoder.final_layer_norm", eps)

    y = embedding[target_ids]
    causal = np.broadcast_to(np.tril(np.ones((t, t), bool)), (b, t, t))
    cross_allowed = np.broadcast_to(source_mask[:, None, :], (b, t, s))
    bias = position_bias(w["decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"], config, t, t, False)
    for i in range(config["num_decoder_layers"]):
        p = f"decoder.block.{i}.layer."
        h = _rms_norm(y, w, p + "0.layer_norm", eps)
        y = y + _attention(h, h, w, p + "0.SelfAttention.", config, causal, bias)
        y = y + _attention(_rms_norm(y, w, p + "1.layer_norm", eps), memory, w, p + "1.EncDecAttention.", config,
                           cross_allowed, 0.0)
        y = y + _feed_forward(_rms_norm(y, w, p + "2.layer_norm", eps), w, p + "2.DenseReluDense.", config)
    y = _rms_norm(y, w, "decoder.final_layer_norm", eps)
    if config["tie_word_embeddings"]:
        return (y * config["d_model"] ** -0.5) @ embedding.T
    return y @ w["lm_head.weight"].T


def reference_greedy(tensors, config, source_ids, max_new_tokens):
    """transformers' greedy `generate` of one source through `reference_logits` (no cache): start
    at `decoder_start_token_id`, stop after `</s>`. Returns the new ids."""
    decoded = [config["decoder_start_token_id"]]
    while len(decoded) <= max_new_tokens:
        logits = reference_logits(tensors, config, np.array([source_ids]), np.ones((1, len(source_ids))),
                                  np.array([decoded]))[0, -1]
        decoded.append(int(np.argmax(logits)))
        if decoded[-1] == config["eos_token_id"]:
            break
    return decoded[1:]


# --- T5Tokenizer's rules ---------------------------------------------------------------------


def reference_ids(folder, text):
    """transformers' `T5Tokenizer(...)(text)["input_ids"]` (legacy mode) by its rules: the text
    split at its special tokens (`</s>`, `<pad>`, `<unk>`, `<extra_id_n>`; each sentinel's
    AddedToken strips the whitespace on both sides), each stretch between them
    `SentencePieceProcessor.encode(text, out_type=str)` of spiece.model, each piece its
    `piece_to_id`; `<extra_id_n>` is id len(sp_model) + 99 - n; `</s>` appended."""
    import re

    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor()
    processor.Load(str(Path(folder) / "spiece.model"))
    special = {"</s>": processor.eos_id(), "<pad>": processor.pad_id(), "<unk>": processor.unk_id()}
    ids, rest = [], text
    while rest:
        found = re.search(r"<extra_id_(\d+)>|</s>|<pad>|<unk>", rest)
        before, token = (rest, None) if found is None else (rest[: found.start()], found.group(0))
        after = "" if found is None else rest[found.end() :]
        if token is not None and token.startswith("<extra_id_"):
            before, after = before.rstrip(), after.lstrip()
        if before:
            ids += [processor.piece_to_id(piece) for piece in processor.encode(before, out_type=str)]
        if token is not None:
            ids.append(special[token] if token in special else processor.get_piece_size() + 99 - int(found.group(1)))
        rest = after
    return ids + [processor.eos_id()]
