"""Tiny random GPT-2 and BERT checkpoints in keras-hub's and Hugging Face's
formats, built here (nothing downloads), and float64 NumPy references of
both models that read the Hugging Face tensors directly.

    python -m tests.checkpoints.stand_ins [FOLDER]

writes tiny random stand-ins named as the real checkpoints (gpt2,
bert-base-uncased, gpt2_base_en, bert_base_en_uncased, and a Qwen2 layout
with a chat template as Qwen2.5-0.5B-Instruct) into FOLDER (the current one
by default), with the real context lengths (the Qwen one: 256), so that the
"Start from pretrained weights" commands of docs/pretrained.md and the
fine-tuning ones of docs/fine-tuning.md run offline.

Every weight is random (biases and LayerNorms included), so a tensor put in
the wrong place changes the logits.
"""

import json
from pathlib import Path

import numpy as np

SENTENCES = [
    "The cat sat on the mat.",
    "the theatre in Paris: café, naïve résumé!",
    "Über 東京 中文 tokens 🙂",  # no "ß" or ligatures: keras-hub case-folds them (ß -> ss), transformers does not
    "  spaces\tand\nnewlines  ",
]

GPT2_SIZES = dict(num_layers=2, num_heads=2, hidden_dim=16, intermediate_dim=64, max_sequence_length=32)
BERT_SIZES = dict(num_layers=2, num_heads=2, hidden_dim=16, intermediate_dim=32, max_sequence_length=32)


# --- Vocabularies ---------------------------------------------------------------------


def bytes_to_unicode():
    """GPT-2's byte -> printable character table (openai/gpt-2 encoder.py)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def gpt2_vocabulary():
    """(vocabulary {token: id}, merges ["a b", ...]): all 256 bytes, a few
    merges (one of them the two bytes of "é"), and <|endoftext|> last, as GPT-2."""
    byte_chars = [bytes_to_unicode()[b] for b in range(256)]
    pairs = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("a", "t"), ("Ġc", "at"), ("Ġ", "c"), ("i", "n"),
             ("Ã", "©"), ("e", "r"), ("Ġ", "s"), ("o", "n"), ("r", "e"), ("Ġ", "the")]
    # Keep only merges whose parts exist when they apply, in order.
    tokens = list(byte_chars)
    merges = []
    for a, b in pairs:
        if a in tokens and b in tokens and a + b not in tokens:
            merges.append(f"{a} {b}")
            tokens.append(a + b)
    tokens.append("<|endoftext|>")
    return {t: i for i, t in enumerate(tokens)}, merges


def bert_vocabulary():
    """A small WordPiece vocabulary with BERT's special tokens ([PAD] = 0)."""
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    words = ["the", "cat", "sat", "on", "mat", "theatre", "in", "paris", "cafe", "naive", "resume",
             "uber", "strasse", "tokens", "space", "and", "new", "line", "東", "京", "中", "文"]
    pieces = ["##s", "##e", "##ed", "##a", "##t", "##r", "##ß", "##ss", "##es"]
    characters = list("abcdefghijklmnopqrstuvwxyzäöüß.,:!?'") + [f"##{c}" for c in "abcdefghijklmnopqrstuvwxyz"]
    tokens = specials + words + pieces + characters
    return list(dict.fromkeys(tokens))


def write_gpt2_vocabulary(folder):
    vocabulary, merges = gpt2_vocabulary()
    (folder / "vocab.json").write_text(json.dumps(vocabulary, ensure_ascii=False), encoding="utf-8")
    (folder / "merges.txt").write_text("#version: 0.2\n" + "".join(f"{m}\n" for m in merges), encoding="utf-8")


def write_bert_vocabulary(folder, lowercase=True):
    (folder / "vocab.txt").write_text("".join(f"{t}\n" for t in bert_vocabulary()), encoding="utf-8")
    (folder / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": lowercase}), encoding="utf-8")


# --- Random weights ------------------------------------------------------------------


def randomise(model, seed):
    """Every weight of a Keras model random: N(1, 0.2) for LayerNorm scales, N(0, 0.2) otherwise."""
    rng = np.random.default_rng(seed)
    for weight in model.weights:
        scale = weight.path.endswith("gamma")
        value = rng.normal(1.0 if scale else 0.0, 0.2, tuple(weight.shape))
        weight.assign(value.astype(weight.dtype))


def gpt2_tensors(vocabulary_size, seed=0, prefix="transformer.", **sizes):
    sizes = {**GPT2_SIZES, **sizes}
    d, ff, n, p = sizes["hidden_dim"], sizes["intermediate_dim"], sizes["num_layers"], sizes["max_sequence_length"]
    rng = np.random.default_rng(seed)

    def r(*shape, mean=0.0):
        return rng.normal(mean, 0.2, shape).astype(np.float32)

    t = {f"{prefix}wte.weight": r(vocabulary_size, d), f"{prefix}wpe.weight": r(p, d)}
    for i in range(n):
        h = f"{prefix}h.{i}."
        t.update({
            h + "ln_1.weight": r(d, mean=1.0), h + "ln_1.bias": r(d),
            h + "attn.c_attn.weight": r(d, 3 * d), h + "attn.c_attn.bias": r(3 * d),
            h + "attn.c_proj.weight": r(d, d), h + "attn.c_proj.bias": r(d),
            h + "ln_2.weight": r(d, mean=1.0), h + "ln_2.bias": r(d),
            h + "mlp.c_fc.weight": r(d, ff), h + "mlp.c_fc.bias": r(ff),
            h + "mlp.c_proj.weight": r(ff, d), h + "mlp.c_proj.bias": r(d),
        })
    t[f"{prefix}ln_f.weight"] = r(d, mean=1.0)
    t[f"{prefix}ln_f.bias"] = r(d)
    return t


def gpt2_config(vocabulary_size, **sizes):
    sizes = {**GPT2_SIZES, **sizes}
    return {
        "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": vocabulary_size,
        "n_positions": sizes["max_sequence_length"], "n_ctx": sizes["max_sequence_length"],
        "n_embd": sizes["hidden_dim"], "n_layer": sizes["num_layers"], "n_head": sizes["num_heads"],
        "n_inner": sizes["intermediate_dim"], "activation_function": "gelu_new", "resid_pdrop": 0.1,
        "embd_pdrop": 0.1, "attn_pdrop": 0.1, "layer_norm_epsilon": 1e-5, "initializer_range": 0.02,
        "bos_token_id": vocabulary_size - 1, "eos_token_id": vocabulary_size - 1,
    }


def bert_tensors(vocabulary_size, architecture="BertForMaskedLM", num_labels=3, seed=0, **sizes):
    sizes = {**BERT_SIZES, **sizes}
    d, ff, n, p = sizes["hidden_dim"], sizes["intermediate_dim"], sizes["num_layers"], sizes["max_sequence_length"]
    rng = np.random.default_rng(seed)
    prefix = "" if architecture == "BertModel" else "bert."

    def r(*shape, mean=0.0):
        return rng.normal(mean, 0.2, shape).astype(np.float32)

    def linear(name, out, inp):
        t[name + ".weight"], t[name + ".bias"] = r(out, inp), r(out)

    def norm(name):
        t[name + ".weight"], t[name + ".bias"] = r(d, mean=1.0), r(d)

    t = {
        f"{prefix}embeddings.word_embeddings.weight": r(vocabulary_size, d),
        f"{prefix}embeddings.position_embeddings.weight": r(p, d),
        f"{prefix}embeddings.token_type_embeddings.weight": r(2, d),
    }
    norm(f"{prefix}embeddings.LayerNorm")
    for i in range(n):
        layer = f"{prefix}encoder.layer.{i}."
        for part in ("query", "key", "value"):
            linear(f"{layer}attention.self.{part}", d, d)
        linear(f"{layer}attention.output.dense", d, d)
        norm(f"{layer}attention.output.LayerNorm")
        linear(f"{layer}intermediate.dense", ff, d)
        linear(f"{layer}output.dense", d, ff)
        norm(f"{layer}output.LayerNorm")
    if architecture != "BertForMaskedLM":
        linear(f"{prefix}pooler.dense", d, d)
    if architecture == "BertForMaskedLM":
        linear("cls.predictions.transform.dense", d, d)
        norm("cls.predictions.transform.LayerNorm")
        t["cls.predictions.bias"] = r(vocabulary_size)
    if architecture == "BertForSequenceClassification":
        linear("classifier", num_labels, d)
    return t


def bert_config(vocabulary_size, architecture="BertForMaskedLM", num_labels=3, **sizes):
    sizes = {**BERT_SIZES, **sizes}
    config = {
        "architectures": [architecture], "model_type": "bert", "vocab_size": vocabulary_size,
        "hidden_size": sizes["hidden_dim"], "num_hidden_layers": sizes["num_layers"],
        "num_attention_heads": sizes["num_heads"], "intermediate_size": sizes["intermediate_dim"],
        "hidden_act": "gelu", "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
        "max_position_embeddings": sizes["max_sequence_length"], "type_vocab_size": 2,
        "initializer_range": 0.02, "layer_norm_eps": 1e-12, "pad_token_id": 0,
        "position_embedding_type": "absolute",
    }
    if architecture == "BertForSequenceClassification":
        config["id2label"] = {str(i): f"LABEL_{i}" for i in range(num_labels)}
        config["label2id"] = {f"LABEL_{i}": i for i in range(num_labels)}
    return config


# --- Checkpoint folders ----------------------------------------------------------------


def hf_gpt2_folder(folder, seed=0, prefix="transformer.", **sizes):
    from safetensors.numpy import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    vocabulary, _ = gpt2_vocabulary()
    tensors = gpt2_tensors(len(vocabulary), seed, prefix, **sizes)
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(gpt2_config(len(vocabulary), **sizes)))
    write_gpt2_vocabulary(folder)
    return folder


def hf_bert_folder(folder, architecture="BertForMaskedLM", seed=0, num_labels=3, **sizes):
    from safetensors.numpy import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    size = len(bert_vocabulary())
    tensors = bert_tensors(size, architecture, num_labels, seed, **sizes)
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(bert_config(size, architecture, num_labels, **sizes)))
    write_bert_vocabulary(folder)
    return folder


def keras_hub_gpt2_preset(folder, seed=0, **sizes):
    """A keras-hub GPT2CausalLM preset (backbone, task, tokenizer)."""
    import keras_hub

    vocabulary, merges = gpt2_vocabulary()
    backbone = keras_hub.models.GPT2Backbone(vocabulary_size=len(vocabulary), dropout=0.0, **{**GPT2_SIZES, **sizes})
    randomise(backbone, seed)
    tokenizer = keras_hub.tokenizers.GPT2Tokenizer(vocabulary=vocabulary, merges=merges)
    preprocessor = keras_hub.models.GPT2CausalLMPreprocessor(tokenizer, sequence_length=16)
    task = keras_hub.models.GPT2CausalLM(backbone, preprocessor=preprocessor)
    task.save_to_preset(str(folder))
    return task


def keras_hub_bert_preset(folder, task="classifier", num_classes=3, seed=0, **sizes):
    """A keras-hub BERT preset: a BertTextClassifier ("classifier") or the backbone and tokenizer alone (None)."""
    import keras_hub

    tokenizer = keras_hub.tokenizers.BertTokenizer(vocabulary=bert_vocabulary(), lowercase=True)
    sizes = {**BERT_SIZES, **sizes}
    backbone = keras_hub.models.BertBackbone(vocabulary_size=tokenizer.vocabulary_size(), dropout=0.0, **sizes)
    if task == "classifier":
        preprocessor = keras_hub.models.BertTextClassifierPreprocessor(tokenizer, sequence_length=16)
        model = keras_hub.models.BertTextClassifier(backbone, num_classes, preprocessor=preprocessor, dropout=0.0)
        randomise(model, seed)
        model.save_to_preset(str(folder))
        return model
    randomise(backbone, seed)
    backbone.save_to_preset(str(folder))
    tokenizer.save_to_preset(str(folder))
    return backbone


# --- float64 references ----------------------------------------------------------------


def _layer_norm(x, weight, bias, epsilon):
    mean = x.mean(-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + epsilon) * weight + bias


def _gelu(x, approximate):
    if approximate:
        return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))
    from math import erf

    return 0.5 * x * (1 + np.vectorize(erf)(x / np.sqrt(2)))


def _attention(q, k, v, heads, allowed):
    """q, k, v (B, T, d); allowed (B, T, T) bool -> (B, T, d)."""
    b, t, d = q.shape
    split = lambda x: x.reshape(b, t, heads, d // heads).transpose(0, 2, 1, 3)  # (B, h, T, k)
    q, k, v = split(q), split(k), split(v)
    scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(d // heads)
    scores = np.where(allowed[:, None], scores, -1e30)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    return (weights @ v).transpose(0, 2, 1, 3).reshape(b, t, d)


def gpt2_reference_logits(tensors, config, token_ids):
    """GPT2LMHeadModel's logits (B, T, V) in float64 from its tensors."""
    w = {k.removeprefix("transformer."): v.astype(np.float64) for k, v in tensors.items()}
    eps, heads = config["layer_norm_epsilon"], config["n_head"]
    approximate = config["activation_function"] == "gelu_new"
    b, t = token_ids.shape
    x = w["wte.weight"][token_ids] + w["wpe.weight"][np.arange(t)]
    causal = np.broadcast_to(np.tril(np.ones((t, t), bool)), (b, t, t))
    for i in range(config["n_layer"]):
        p = f"h.{i}."
        h = _layer_norm(x, w[p + "ln_1.weight"], w[p + "ln_1.bias"], eps)
        qkv = h @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]
        q, k, v = np.split(qkv, 3, axis=-1)
        x = x + _attention(q, k, v, heads, causal) @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        h = _layer_norm(x, w[p + "ln_2.weight"], w[p + "ln_2.bias"], eps)
        h = _gelu(h @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"], approximate)
        x = x + h @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
    x = _layer_norm(x, w["ln_f.weight"], w["ln_f.bias"], eps)
    return x @ w["wte.weight"].T


def bert_reference(tensors, config, token_ids, segment_ids, padding_mask):
    """BERT in float64 from its tensors: (sequence (B, T, d), pooled (B, d) or None, heads dict)."""
    w = {k.removeprefix("bert."): v.astype(np.float64) for k, v in tensors.items()}
    eps, heads = config["layer_norm_eps"], config["num_attention_heads"]
    approximate = config["hidden_act"] != "gelu"

    def linear(name, x):
        return x @ w[name + ".weight"].T + w[name + ".bias"]

    def norm(name, x):
        return _layer_norm(x, w[name + ".weight"], w[name + ".bias"], eps)

    b, t = token_ids.shape
    x = (
        w["embeddings.word_embeddings.weight"][token_ids]
        + w["embeddings.position_embeddings.weight"][np.arange(t)]
        + w["embeddings.token_type_embeddings.weight"][segment_ids]
    )
    x = norm("embeddings.LayerNorm", x)
    allowed = np.broadcast_to(padding_mask.astype(bool)[:, None, :], (b, t, t))
    for i in range(config["num_hidden_layers"]):
        p = f"encoder.layer.{i}."
        q, k, v = (linear(f"{p}attention.self.{part}", x) for part in ("query", "key", "value"))
        x = norm(f"{p}attention.output.LayerNorm", x + linear(f"{p}attention.output.dense", _attention(q, k, v, heads, allowed)))
        h = _gelu(linear(f"{p}intermediate.dense", x), approximate)
        x = norm(f"{p}output.LayerNorm", x + linear(f"{p}output.dense", h))
    pooled = np.tanh(linear("pooler.dense", x[:, 0])) if "pooler.dense.weight" in w else None
    out = {}
    if "cls.predictions.bias" in w:
        h = norm("cls.predictions.transform.LayerNorm", _gelu(linear("cls.predictions.transform.dense", x), approximate))
        out["masked_lm"] = h @ w["embeddings.word_embeddings.weight"].T + w["cls.predictions.bias"]  # (B, T, V)
    if "classifier.weight" in w:
        out["classifier"] = linear("classifier", pooled)
    return x, pooled, out


def write_stand_ins(folder="."):
    """Tiny random checkpoints under the real checkpoints' folder names."""
    folder = Path(folder)
    hf_gpt2_folder(folder / "gpt2", max_sequence_length=1024)
    hf_bert_folder(folder / "bert-base-uncased", "BertForMaskedLM", max_sequence_length=512)
    keras_hub_gpt2_preset(folder / "gpt2_base_en", max_sequence_length=1024)
    keras_hub_bert_preset(folder / "bert_base_en_uncased", task=None, max_sequence_length=512)
    chat_folder(folder / "Qwen2.5-0.5B-Instruct")
    return folder


def chat_folder(folder):
    """A tiny random Qwen2 checkpoint with Qwen's ChatML chat template, as an instruction-tuned one ships."""
    from tests.checkpoints.llama_checkpoints import hf_folder
    from zoo.tokenizers import CHATML

    folder = hf_folder(folder, "qwen2")
    settings = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    (folder / "tokenizer_config.json").write_text(json.dumps({**settings, "chat_template": CHATML}), encoding="utf-8")
    return folder


if __name__ == "__main__":
    import sys

    print(f"tiny random stand-ins written to {write_stand_ins(*sys.argv[1:2]).resolve()}")
