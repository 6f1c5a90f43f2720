"""Tiny random Marian (opus-mt) checkpoints in Hugging Face's format, built
here (nothing downloads), a float64 NumPy reference of `MarianMTModel`'s
forward pass that reads their tensors directly, and a re-implementation of
`MarianTokenizer`'s rules.

A folder is what `Helsinki-NLP/opus-mt-de-en` holds: config.json,
model.safetensors (`model.shared.weight`, the layers, `final_logits_bias`),
source.spm and target.spm (two SentencePiece models trained here on a few
sentences), vocab.json (the pieces of both, `</s>` 0 and `<unk>` 1 first
and `<pad>` last, as transformers' `convert_marian_to_pytorch.py` writes
it), tokenizer_config.json and generation_config.json. Every weight is
random, LayerNorm gains and biases and `final_logits_bias` included, so a
tensor in the wrong place changes the logits.
"""

import io
import json
import math
from pathlib import Path

import numpy as np

SIZES = dict(d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
             encoder_ffn_dim=48, decoder_ffn_dim=48)
GERMAN = [
    "Ein Mann fährt Fahrrad.", "Zwei Hunde laufen über die Straße.", "Eine Frau liest ein Buch im Café.",
    "Die Kinder spielen im Garten.", "Ein Mädchen isst einen Apfel.", "Der Mann trägt einen großen Hut.",
    "Grüße aus München, schöne Größe.", "Ärger über Öl und Übel.",
] * 4
ENGLISH = [
    "A man rides a bike.", "Two dogs run across the street.", "A woman reads a book in the café.",
    "The children play in the garden.", "A girl eats an apple.", "The man wears a big hat.",
    "Greetings from Munich, nice size.", "Trouble over oil and evil.",
] * 4
SOURCE_SENTENCES = ["Ein Mann fährt Fahrrad.", "Größe über Straße – naïve 東京 🙂", ">>en<< Die Kinder spielen.", ""]
TARGET_SENTENCES = ["A man rides a bike.", "naïve café, 東京 🙂", "The children play in the garden."]


def train_sentence_piece(texts, vocabulary_size):
    """A SentencePiece unigram model's bytes, trained on `texts` (Marian's spm models are unigram)."""
    import sentencepiece

    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(texts), model_writer=model, vocab_size=vocabulary_size, model_type="unigram",
        character_coverage=1.0, hard_vocab_limit=False, minloglevel=2, num_threads=1,
    )
    return model.getvalue()


def marian_vocabulary(*protos):
    """vocab.json as transformers' conversion writes it: `</s>` 0, `<unk>` 1,
    the pieces of the SentencePiece models (their normal pieces, each once),
    then `<pad>` last."""
    import sentencepiece

    vocabulary = {"</s>": 0, "<unk>": 1}
    for proto in protos:
        processor = sentencepiece.SentencePieceProcessor()
        processor.LoadFromSerializedProto(proto)
        for i in range(processor.get_piece_size()):
            if not (processor.is_control(i) or processor.is_unknown(i)):
                vocabulary.setdefault(processor.id_to_piece(i), len(vocabulary))
    vocabulary["<pad>"] = len(vocabulary)
    return vocabulary


def config(vocabulary_size, **changes):
    pad = vocabulary_size - 1
    return {
        "architectures": ["MarianMTModel"], "model_type": "marian", "vocab_size": vocabulary_size,
        "decoder_vocab_size": vocabulary_size, **SIZES, "max_position_embeddings": 64,
        "activation_function": "swish", "dropout": 0.1, "attention_dropout": 0.0, "activation_dropout": 0.0,
        "scale_embedding": True, "normalize_before": False, "normalize_embedding": False,
        "add_final_layer_norm": False, "static_position_embeddings": True, "share_encoder_decoder_embeddings": True,
        "is_encoder_decoder": True, "pad_token_id": pad, "eos_token_id": 0, "bos_token_id": 0,
        "decoder_start_token_id": pad, "forced_eos_token_id": 0, "bad_words_ids": [[pad]], "num_beams": 4,
        "max_length": 64, "init_std": 0.02, "use_cache": True, **changes,
    }


def tensors(config, seed=0):
    """{transformers name: float32 array} of a MarianMTModel, every weight random."""
    rng = np.random.default_rng(seed)

    def r(*shape, mean=0.0, scale=0.2):
        return rng.normal(mean, scale, shape).astype(np.float32)

    d, ff, v = config["d_model"], config["encoder_ffn_dim"], config["vocab_size"]
    t = {"model.shared.weight": r(v, d, scale=0.5), "final_logits_bias": r(1, v, scale=0.5)}
    if not config["share_encoder_decoder_embeddings"]:  # MarianModel's two tables, `shared` None
        t["model.encoder.embed_tokens.weight"] = t.pop("model.shared.weight")
        t["model.decoder.embed_tokens.weight"] = r(v, d, scale=0.5)

    def attention(p):
        for n in ("q_proj", "k_proj", "v_proj", "out_proj"):
            t[f"{p}{n}.weight"], t[f"{p}{n}.bias"] = r(d, d), r(d)

    def norm(p):
        t[p + ".weight"], t[p + ".bias"] = r(d, mean=1.0), r(d)

    def feed_forward(p):
        t[p + "fc1.weight"], t[p + "fc1.bias"], t[p + "fc2.weight"], t[p + "fc2.bias"] = r(ff, d), r(ff), r(d, ff), r(d)
        norm(p + "final_layer_norm")

    for i in range(config["encoder_layers"]):
        p = f"model.encoder.layers.{i}."
        attention(p + "self_attn."), norm(p + "self_attn_layer_norm"), feed_forward(p)
    for i in range(config["decoder_layers"]):
        p = f"model.decoder.layers.{i}."
        attention(p + "self_attn."), norm(p + "self_attn_layer_norm")
        attention(p + "encoder_attn."), norm(p + "encoder_attn_layer_norm"), feed_forward(p)
    return t


def hf_folder(folder, seed=0, config_changes=None, generation_changes=None):
    """A Marian folder: config.json, model.safetensors and the tokenizer and generation files."""
    from safetensors.numpy import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    source, target = train_sentence_piece(GERMAN, 60), train_sentence_piece(ENGLISH, 60)
    vocabulary = marian_vocabulary(source, target)
    settings = config(len(vocabulary), **(config_changes or {}))
    weights = tensors(settings, seed)
    # transformers writes the tied embedding once, and older checkpoints the sinusoidal tables too.
    weights["model.encoder.embed_positions.weight"] = sinusoids(settings["max_position_embeddings"], settings["d_model"]).astype(np.float32)
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(settings), encoding="utf-8")
    (folder / "source.spm").write_bytes(source)
    (folder / "target.spm").write_bytes(target)
    (folder / "vocab.json").write_text(json.dumps(vocabulary, ensure_ascii=False), encoding="utf-8")
    tokenizer_config = {"source_lang": "de", "target_lang": "en", "model_max_length": 64, "separate_vocabs": False,
                        "unk_token": "<unk>", "eos_token": "</s>", "pad_token": "<pad>",
                        "tokenizer_class": "MarianTokenizer"}
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer_config), encoding="utf-8")
    pad = settings["pad_token_id"]
    generation = {"bad_words_ids": [[pad]], "bos_token_id": 0, "decoder_start_token_id": pad, "eos_token_id": 0,
                  "forced_eos_token_id": 0, "max_length": 64, "num_beams": 4, "pad_token_id": pad,
                  "renormalize_logits": True, **(generation_changes or {})}
    (folder / "generation_config.json").write_text(json.dumps(generation), encoding="utf-8")
    return folder


# --- The float64 reference -------------------------------------------------------------------


def sinusoids(positions, dim):
    """MarianSinusoidalPositionalEmbedding._init_weight: the angles pos / 10000^(2 (j // 2) / d),
    the sines of the even j in the first ceil(d/2) channels, the cosines of the odd j after them."""
    angles = np.array([[pos / np.power(10000, 2 * (j // 2) / dim) for j in range(dim)] for pos in range(positions)])
    sentinel = dim // 2 if dim % 2 == 0 else dim // 2 + 1
    table = np.empty((positions, dim))
    table[:, :sentinel] = np.sin(angles[:, 0::2])
    table[:, sentinel:] = np.cos(angles[:, 1::2])
    return table


def _layer_norm(x, w, p):
    mean = x.mean(-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + 1e-5) * w[p + ".weight"] + w[p + ".bias"]


def _linear(x, w, p):
    return x @ w[p + ".weight"].T + w[p + ".bias"]


def _attention(x, memory, w, p, heads, allowed):
    """MarianAttention: q scaled by head_dim^-0.5 (eager_attention_forward's `scaling`), masked softmax."""
    b, t, d = x.shape
    s, k = memory.shape[1], d // heads
    q = _linear(x, w, p + "q_proj").reshape(b, t, heads, k).transpose(0, 2, 1, 3)  # (B, h, T, k)
    key = _linear(memory, w, p + "k_proj").reshape(b, s, heads, k).transpose(0, 2, 1, 3)  # (B, h, S, k)
    value = _linear(memory, w, p + "v_proj").reshape(b, s, heads, k).transpose(0, 2, 1, 3)
    scores = (q @ key.transpose(0, 1, 3, 2)) * k**-0.5  # (B, h, T, S)
    scores = np.where(allowed[:, None], scores, -np.inf)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    out = (weights @ value).transpose(0, 2, 1, 3).reshape(b, t, d)
    return _linear(out, w, p + "out_proj")


def _swish(x):
    return x / (1 + np.exp(-x))


def _feed_forward(x, w, p):
    hidden = _swish(_linear(x, w, p + "fc1"))
    return _layer_norm(x + _linear(hidden, w, p + "fc2"), w, p + "final_layer_norm")


def log_probability(tensors, config, source_ids, new_ids):
    """The float64 log-probability of `new_ids` after the decoder start, `<pad>` masked out."""
    start = config["decoder_start_token_id"]
    target = np.array([[start] + list(new_ids[:-1])])
    logits = reference_logits(tensors, config, np.array([source_ids]), np.ones((1, len(source_ids))), target)[0]
    logits[:, config["pad_token_id"]] = -np.inf
    logits = logits - logits.max(-1, keepdims=True)
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    return float(sum(log_probs[i, token] for i, token in enumerate(new_ids)))


def reference_logits(tensors, config, source_ids, source_mask, target_ids):
    """MarianMTModel's logits (B, T, V) in float64, in inference mode (no dropout):
    post-LN encoder and decoder layers, embeddings x sqrt(d) plus Marian's sinusoids
    from position 0, swish, the tied output layer plus `final_logits_bias`."""
    w = {name: value.astype(np.float64) for name, value in tensors.items()}
    d, heads = config["d_model"], config["encoder_attention_heads"]
    scale = math.sqrt(d) if config["scale_embedding"] else 1.0
    table = sinusoids(config["max_position_embeddings"], d)
    source_embedding = w.get("model.encoder.embed_tokens.weight", w.get("model.shared.weight"))
    embedding = w.get("model.decoder.embed_tokens.weight", w.get("model.shared.weight"))  # and the output layer's
    source_mask = np.asarray(source_mask, bool)
    s, t = source_ids.shape[1], target_ids.shape[1]

    x = source_embedding[source_ids] * scale + table[:s]
    encoder_allowed = np.broadcast_to(source_mask[:, None, :], (len(source_ids), s, s))
    for i in range(config["encoder_layers"]):
        p = f"model.encoder.layers.{i}."
        x = _layer_norm(x + _attention(x, x, w, p + "self_attn.", heads, encoder_allowed), w, p + "self_attn_layer_norm")
        x = _feed_forward(x, w, p)
    memory = x

    y = embedding[target_ids] * scale + table[:t]
    causal = np.broadcast_to(np.tril(np.ones((t, t), bool)), (len(target_ids), t, t))
    cross_allowed = np.broadcast_to(source_mask[:, None, :], (len(target_ids), t, s))
    for i in range(config["decoder_layers"]):
        p = f"model.decoder.layers.{i}."
        y = _layer_norm(y + _attention(y, y, w, p + "self_attn.", heads, causal), w, p + "self_attn_layer_norm")
        y = _layer_norm(y + _attention(y, memory, w, p + "encoder_attn.", heads, cross_allowed), w,
                        p + "encoder_attn_layer_norm")
        y = _feed_forward(y, w, p)
    return y @ embedding.T + w["final_logits_bias"]


def reference_greedy(tensors, config, source_ids, max_length, force_end=True):
    """transformers' greedy `generate` of one source, in float64 through `reference_logits`
    (no cache): start at `decoder_start_token_id`, `<pad>` never chosen (`bad_words_ids`),
    `</s>` forced at the last position (`forced_eos_token_id`, unless not `force_end`), stop
    after `</s>`. Returns the new ids, `</s>` included."""
    pad, end = config["pad_token_id"], config["eos_token_id"]
    decoded = [config["decoder_start_token_id"]]
    while len(decoded) < max_length:
        logits = reference_logits(tensors, config, np.array([source_ids]), np.ones((1, len(source_ids))),
                                  np.array([decoded]))[0, -1]
        logits[pad] = -np.inf
        if force_end and len(decoded) == max_length - 1:
            logits = np.where(np.arange(len(logits)) == end, 0.0, -np.inf)
        decoded.append(int(np.argmax(logits)))
        if decoded[-1] == end:
            break
    return decoded[1:]


# --- MarianTokenizer's rules -----------------------------------------------------------------


def reference_ids(folder, text, side):
    """transformers' `MarianTokenizer(...)(text)["input_ids"]` (source mode, or `text_target=` for
    "target"), by its rules: a leading `>>xx<<` is one token (`remove_language_code`); the rest is
    `SentencePieceProcessor.encode(text, out_type=str)` of `source.spm` / `target.spm`; each piece
    is its `vocab.json` id, `<unk>`'s when absent (`_convert_token_to_id`); `</s>` appended
    (`build_inputs_with_special_tokens`)."""
    import sentencepiece

    folder = Path(folder)
    vocabulary = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
    processor = sentencepiece.SentencePieceProcessor()
    processor.Load(str(folder / f"{side}.spm"))
    code = []
    if text.startswith(">>") and text.find("<<") != -1:
        end = text.find("<<")
        code, text = [text[: end + 2]], text[end + 2 :]
    pieces = code + processor.encode(text, out_type=str)
    return [vocabulary.get(piece, vocabulary["<unk>"]) for piece in pieces] + [vocabulary["</s>"]]
