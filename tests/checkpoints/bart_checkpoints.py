"""Tiny random BART checkpoints in Hugging Face's format, built here (nothing
downloads), a float64 NumPy reference of `BartForConditionalGeneration`'s
forward pass that reads their tensors directly, and GPT-2's byte-level BPE
rules, which `BartTokenizer` follows.

A folder is what `facebook/bart-large-cnn` holds: config.json,
model.safetensors (`model.shared.weight`, each stack's `embed_positions`
and `layernorm_embedding`, the layers, `final_logits_bias`), vocab.json
and merges.txt (a byte-level BPE learned here on a few sentences: `<s>` 0,
`<pad>` 1, `</s>` 2, `<unk>` 3, the 256 byte characters, the merges, then
`<mask>` last), tokenizer.json (the same vocabulary and merges in the
layout transformers' `RobertaConverter` writes), and generation_config.json
(bart-large-cnn's keys: 4 beams, `length_penalty` 2.0, the decoder started
at `</s>` with `<s>` forced next). Every weight is random, LayerNorm gains
and biases, position rows and `final_logits_bias` included, so a tensor in
the wrong place changes the logits.
"""

import collections
import json
import math
from pathlib import Path

import numpy as np
import regex

SIZES = dict(d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
             encoder_ffn_dim=48, decoder_ffn_dim=48)
MAX_POSITIONS = 64
SPECIAL = ["<s>", "<pad>", "</s>", "<unk>"]
TRAINING_TEXTS = [
    "The president said on Monday that the new bridge will open next year.",
    "Police arrested two men after the robbery in the city centre.",
    "The company reported record profits for the third quarter.",
    "Scientists found water on the surface of the distant planet.",
    "The football team won the championship after a dramatic final.",
    "Grüße aus München: die Straße ist schön, naïve café.",
    "Le café est très célèbre à Paris.",
    "東京 is the capital of Japan 🙂.",
] * 3
TEXTS = [
    "The president said the bridge will open.",
    "Grüße aus München – naïve café, 東京 🙂!",
    "  Two  spaces, tabs\tand a newline\nhere's it's we'll 1234 numbers.",
    "",
    "Ünïcödé ßtraße ½ ﬁ — “quotes” ☃",
]
# GPT-2's pattern (openai/gpt-2, src/encoder.py), which BartTokenizer uses.
PATTERN = regex.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")


# --- GPT-2's byte-level BPE ---------------------------------------------------------------------


def bytes_to_unicode():
    """GPT-2's map of the 256 bytes to printable characters: the printable Latin-1 bytes are
    themselves, the others 256 + n in order."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    characters, n = keep[:], 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            characters.append(256 + n)
            n += 1
    return dict(zip(keep, map(chr, characters)))


BYTE_ENCODER = bytes_to_unicode()
BYTE_DECODER = {c: b for b, c in BYTE_ENCODER.items()}


def _words(text):
    return ["".join(BYTE_ENCODER[b] for b in piece.encode("utf-8")) for piece in PATTERN.findall(text)]


def learn_merges(texts, count):
    """`count` byte-pair merges learned on `texts` (the most frequent pair first; ties by the pair)."""
    words = collections.Counter(tuple(word) for text in texts for word in _words(text))
    merges = []
    for _ in range(count):
        pairs = collections.Counter()
        for word, n in words.items():
            for pair in zip(word, word[1:]):
                pairs[pair] += n
        if not pairs:
            break
        best = max(pairs, key=lambda pair: (pairs[pair], pair))
        merges.append(best)
        merged = collections.Counter()
        for word, n in words.items():
            merged[_merge(word, best)] += n
        words = merged
    return merges


def _merge(word, pair):
    out, i = [], 0
    while i < len(word):
        if i < len(word) - 1 and (word[i], word[i + 1]) == pair:
            out.append(word[i] + word[i + 1])
            i += 2
        else:
            out.append(word[i])
            i += 1
    return tuple(out)


def vocabulary_and_merges(merge_count=80):
    """(vocab.json, merges): the special tokens, the 256 byte characters, each merge's token, `<mask>`."""
    merges = learn_merges(TRAINING_TEXTS, merge_count)
    vocabulary = {token: i for i, token in enumerate(SPECIAL)}
    for b in range(256):
        vocabulary.setdefault(BYTE_ENCODER[b], len(vocabulary))
    for a, b in merges:
        vocabulary.setdefault(a + b, len(vocabulary))
    vocabulary["<mask>"] = len(vocabulary)
    return vocabulary, merges


def bpe(word, ranks):
    """GPT-2's `Encoder.bpe`: merge the lowest-ranked pair present until none is a merge."""
    parts = tuple(word)
    while len(parts) > 1:
        pairs = set(zip(parts, parts[1:]))
        best = min(pairs, key=lambda pair: ranks.get(pair, math.inf))
        if best not in ranks:
            break
        parts = _merge(parts, best)
    return parts


def reference_ids(folder, text):
    """transformers' `BartTokenizer(text)["input_ids"]` by its rules (text without special tokens):
    GPT-2's pattern cuts the text, each piece's UTF-8 bytes become GPT-2's characters, the merges
    of merges.txt apply by rank, each token is its vocab.json id, and `<s>` ... `</s>` frame it."""
    folder = Path(folder)
    vocabulary = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
    lines = (folder / "merges.txt").read_text(encoding="utf-8").splitlines()
    ranks = {tuple(line.split(" ")): i for i, line in enumerate(lines[1:]) if line}
    ids = [vocabulary[token] for word in _words(text) for token in bpe(word, ranks)]
    return [vocabulary["<s>"]] + ids + [vocabulary["</s>"]]


def reference_text(folder, ids):
    """`BartTokenizer.decode(ids, skip_special_tokens=True)`: the tokens' characters back to bytes."""
    vocabulary = json.loads((Path(folder) / "vocab.json").read_text(encoding="utf-8"))
    tokens = {i: token for token, i in vocabulary.items()}
    text = "".join(tokens[i] for i in ids if tokens[i] not in SPECIAL + ["<mask>"])
    return bytes(BYTE_DECODER[c] for c in text).decode("utf-8", errors="replace")


def tokenizer_json(vocabulary, merges):
    """tokenizer.json as transformers' `RobertaConverter` writes it for BartTokenizerFast."""
    added = [{"id": vocabulary[token], "content": token, "single_word": False, "lstrip": token == "<mask>",
              "rstrip": False, "normalized": False, "special": True}
             for token in SPECIAL + ["<mask>"]]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": {"type": "RobertaProcessing", "sep": ["</s>", vocabulary["</s>"]],
                           "cls": ["<s>", vocabulary["<s>"]], "trim_offsets": True, "add_prefix_space": False},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocabulary, "merges": [f"{a} {b}" for a, b in merges]},
    }


# --- The folder ---------------------------------------------------------------------------------


def config(vocabulary_size, **changes):
    """bart-large-cnn's config.json keys, tiny sizes."""
    return {
        "_name_or_path": "bart-tiny-cnn", "activation_dropout": 0.0, "activation_function": "gelu",
        "add_bias_logits": False, "add_final_layer_norm": False, "architectures": ["BartForConditionalGeneration"],
        "attention_dropout": 0.0, "bos_token_id": 0, "classif_dropout": 0.0, "classifier_dropout": 0.0,
        **SIZES, "decoder_layerdrop": 0.0, "decoder_start_token_id": 2, "dropout": 0.1, "early_stopping": True,
        "encoder_layerdrop": 0.0, "eos_token_id": 2, "force_bos_token_to_be_generated": True,
        "forced_bos_token_id": 0, "forced_eos_token_id": 2, "gradient_checkpointing": False, "init_std": 0.02,
        "is_encoder_decoder": True, "length_penalty": 2.0, "max_length": 24, "max_position_embeddings": MAX_POSITIONS,
        "min_length": 4, "model_type": "bart", "no_repeat_ngram_size": 3, "normalize_before": False,
        "normalize_embedding": True, "num_beams": 4, "num_hidden_layers": 2, "output_past": True,
        "pad_token_id": 1, "prefix": " ", "scale_embedding": False, "use_cache": True,
        "vocab_size": vocabulary_size, **changes,
    }


def generation_config(**changes):
    return {"bos_token_id": 0, "decoder_start_token_id": 2, "early_stopping": True, "eos_token_id": 2,
            "forced_bos_token_id": 0, "forced_eos_token_id": 2, "length_penalty": 2.0, "max_length": 24,
            "min_length": 4, "no_repeat_ngram_size": 3, "num_beams": 4, "pad_token_id": 1, **changes}


def tensors(config, seed=0):
    """{transformers name: float32 array} of a BartForConditionalGeneration, every weight random."""
    rng = np.random.default_rng(seed)

    def r(*shape, mean=0.0, scale=0.2):
        return rng.normal(mean, scale, shape).astype(np.float32)

    d, ff, v = config["d_model"], config["encoder_ffn_dim"], config["vocab_size"]
    positions = config["max_position_embeddings"] + 2
    t = {"model.shared.weight": r(v, d, scale=0.5), "final_logits_bias": r(1, v, scale=0.5)}

    def attention(p):
        for n in ("q_proj", "k_proj", "v_proj", "out_proj"):
            t[f"{p}{n}.weight"], t[f"{p}{n}.bias"] = r(d, d), r(d)

    def norm(p):
        t[p + ".weight"], t[p + ".bias"] = r(d, mean=1.0), r(d)

    def feed_forward(p):
        t[p + "fc1.weight"], t[p + "fc1.bias"], t[p + "fc2.weight"], t[p + "fc2.bias"] = r(ff, d), r(ff), r(d, ff), r(d)
        norm(p + "final_layer_norm")

    for side in ("encoder", "decoder"):
        t[f"model.{side}.embed_positions.weight"] = r(positions, d, scale=0.5)
        norm(f"model.{side}.layernorm_embedding")
    for i in range(config["encoder_layers"]):
        p = f"model.encoder.layers.{i}."
        attention(p + "self_attn."), norm(p + "self_attn_layer_norm"), feed_forward(p)
    for i in range(config["decoder_layers"]):
        p = f"model.decoder.layers.{i}."
        attention(p + "self_attn."), norm(p + "self_attn_layer_norm")
        attention(p + "encoder_attn."), norm(p + "encoder_attn_layer_norm"), feed_forward(p)
    return t


def hf_folder(folder, seed=0, config_changes=None, generation_changes=None, tokenizer_file=True):
    """A BART folder: config.json, model.safetensors, vocab.json, merges.txt, tokenizer.json
    (unless not `tokenizer_file`) and generation_config.json."""
    from safetensors.numpy import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    vocabulary, merges = vocabulary_and_merges()
    settings = config(len(vocabulary), **(config_changes or {}))
    save_file(tensors(settings, seed), str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(settings), encoding="utf-8")
    (folder / "vocab.json").write_text(json.dumps(vocabulary, ensure_ascii=False), encoding="utf-8")
    (folder / "merges.txt").write_text("\n".join(["#version: 0.2"] + [f"{a} {b}" for a, b in merges]) + "\n",
                                       encoding="utf-8")
    if tokenizer_file:
        (folder / "tokenizer.json").write_text(json.dumps(tokenizer_json(vocabulary, merges), ensure_ascii=False),
                                               encoding="utf-8")
    generation = generation_config(**(generation_changes or {}))
    (folder / "generation_config.json").write_text(json.dumps(generation), encoding="utf-8")
    return folder


# --- The float64 reference -------------------------------------------------------------------

POSITION_OFFSET = 2  # BartLearnedPositionalEmbedding.offset: position p reads row p + 2


def _layer_norm(x, w, p):
    mean = x.mean(-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + 1e-5) * w[p + ".weight"] + w[p + ".bias"]


def _linear(x, w, p):
    return x @ w[p + ".weight"].T + w[p + ".bias"]


def _attention(x, memory, w, p, heads, allowed):
    """BartAttention: q scaled by head_dim^-0.5, masked softmax over the keys."""
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


_erf = np.vectorize(math.erf)


def gelu(x):
    """The exact GELU, x Phi(x) (transformers' "gelu", PyTorch's `nn.functional.gelu`)."""
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def embedding_norm(x, w, p):
    """`layernorm_embedding`, on tokens plus positions."""
    return _layer_norm(x, w, p)


def _feed_forward(x, w, p):
    hidden = gelu(_linear(x, w, p + "fc1"))
    return _layer_norm(x + _linear(hidden, w, p + "fc2"), w, p + "final_layer_norm")


def reference_logits(tensors, config, source_ids, source_mask, target_ids):
    """BartForConditionalGeneration's logits (B, T, V) in float64, in inference mode (no dropout):
    tokens (times sqrt(d) only with `scale_embedding`) plus learned positions read at p + 2, then
    `layernorm_embedding`, in each stack; post-LN layers with exact GELU; the shared table as the
    output layer plus `final_logits_bias`."""
    w = {name: value.astype(np.float64) for name, value in tensors.items()}
    d, heads = config["d_model"], config["encoder_attention_heads"]
    scale = math.sqrt(d) if config.get("scale_embedding", False) else 1.0
    shared = w["model.shared.weight"]
    source_mask = np.asarray(source_mask, bool)
    s, t = source_ids.shape[1], target_ids.shape[1]

    x = shared[source_ids] * scale + w["model.encoder.embed_positions.weight"][np.arange(s) + POSITION_OFFSET]
    x = embedding_norm(x, w, "model.encoder.layernorm_embedding")
    encoder_allowed = np.broadcast_to(source_mask[:, None, :], (len(source_ids), s, s))
    for i in range(config["encoder_layers"]):
        p = f"model.encoder.layers.{i}."
        x = _layer_norm(x + _attention(x, x, w, p + "self_attn.", heads, encoder_allowed), w,
                        p + "self_attn_layer_norm")
        x = _feed_forward(x, w, p)
    memory = x

    y = shared[target_ids] * scale + w["model.decoder.embed_positions.weight"][np.arange(t) + POSITION_OFFSET]
    y = embedding_norm(y, w, "model.decoder.layernorm_embedding")
    causal = np.broadcast_to(np.tril(np.ones((t, t), bool)), (len(target_ids), t, t))
    cross_allowed = np.broadcast_to(source_mask[:, None, :], (len(target_ids), t, s))
    for i in range(config["decoder_layers"]):
        p = f"model.decoder.layers.{i}."
        y = _layer_norm(y + _attention(y, y, w, p + "self_attn.", heads, causal), w, p + "self_attn_layer_norm")
        y = _layer_norm(y + _attention(y, memory, w, p + "encoder_attn.", heads, cross_allowed), w,
                        p + "encoder_attn_layer_norm")
        y = _feed_forward(y, w, p)
    return y @ shared.T + w["final_logits_bias"]


def log_probability(tensors, config, source_ids, prompt, new_ids):
    """The float64 log-probability of `new_ids` after the decoder's `prompt`."""
    target = np.array([list(prompt) + list(new_ids[:-1])])
    logits = reference_logits(tensors, config, np.array([source_ids]), np.ones((1, len(source_ids))), target)[0]
    logits = logits[len(prompt) - 1:]
    logits = logits - logits.max(-1, keepdims=True)
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    return float(sum(log_probs[i, token] for i, token in enumerate(new_ids)))


def reference_greedy(tensors, config, source_ids, max_length):
    """transformers' greedy `generate` of one source, in float64 through `reference_logits` (no
    cache), without the length controls (`min_length`, `no_repeat_ngram_size`,
    `forced_eos_token_id`): the decoder starts at `decoder_start_token_id` (`</s>`), its first
    step is forced to `forced_bos_token_id` (`<s>`), then the argmax until `</s>` or
    `max_length` tokens in all. Returns the tokens after the forced `<s>`, `</s>` included."""
    end = config["eos_token_id"]
    decoded = [config["decoder_start_token_id"], config["forced_bos_token_id"]]
    while len(decoded) < max_length:
        logits = reference_logits(tensors, config, np.array([source_ids]), np.ones((1, len(source_ids))),
                                  np.array([decoded]))[0, -1]
        decoded.append(int(np.argmax(logits)))
        if decoded[-1] == end:
            break
    return decoded[2:]
