"""Tiny random Llama, Mistral, Qwen2 and Qwen3 checkpoints in Hugging Face's
format, built here (nothing downloads), and a float64 NumPy reference of
the architecture that reads their tensors directly.

Every weight is random (RMSNorm scales and biases included), so a tensor
put in the wrong place changes the logits. The weights are rounded to
float16 values: keras-hub's Mistral converter reads through float16, and
then reads them exactly.
"""

import functools
import json
import math
from pathlib import Path

import numpy as np

SIZES = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4)
CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "naïve café façade crème brûlée",
    "zwei hunde laufen über die straße",
    "東京 中文 tokens 🙂 and numbers 12345",
] * 5
SENTENCES = ["The cat sat on the mat.", "naïve café über straße", "日本語のテキスト 世界 🙂", "  spaces\tand\nnewlines  "]
BEGIN, END, EOT = "<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"
HEADER_START, HEADER_END = "<|start_header_id|>", "<|end_header_id|>"
QWEN_END, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
LLAMA3_SCALING = {
    "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
    "original_max_position_embeddings": 128,  # with head_dim 8 and theta 1e4: one frequency of each band
}

# name -> (model_type, config changes). Key/value-head ratios 1 (llama_mha), 2 and 4 = num_heads (mistral);
# rope scaling on and off; tied and untied heads; q/k/v biases (qwen2); q/k norms and an explicit head_dim (qwen3).
CASES = {
    "llama": ("llama", dict(num_key_value_heads=2, rope_theta=10000.0, rope_scaling=LLAMA3_SCALING,
                            tie_word_embeddings=True)),
    "llama_mha": ("llama", dict(num_key_value_heads=4, rope_theta=500000.0, tie_word_embeddings=False)),
    "mistral": ("mistral", dict(num_key_value_heads=1, tie_word_embeddings=False, sliding_window=16,
                                max_position_embeddings=64)),
    "qwen2": ("qwen2", dict(num_key_value_heads=2, rope_theta=1000000.0, tie_word_embeddings=True,
                            use_sliding_window=False, sliding_window=4096)),
    "qwen3": ("qwen3", dict(num_key_value_heads=2, head_dim=16, tie_word_embeddings=False, rms_norm_eps=1e-5,
                            use_sliding_window=False, sliding_window=None, attention_bias=False)),
}
# The epsilons are those keras-hub assumes: its Llama converter does not read rms_norm_eps (1e-6), and its
# Qwen3 query/key norms are fixed at 1e-5; transformers, the reference and the zoo read the config's.
ARCHITECTURES = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM",
                 "qwen3": "Qwen3ForCausalLM"}


# --- Tokenizers ------------------------------------------------------------------------------


@functools.cache
def tokenizer_json(model_type):
    """A byte-level BPE tokenizer.json: Llama 3's shape (BOS added by the
    post-processor, <|begin_of_text|>, <|end_of_text|>, <|eot_id|> and the
    header tokens) for
    Llama and Mistral, Qwen's (no BOS; <|endoftext|>, <|im_start|>,
    <|im_end|>) for Qwen2 / Qwen3."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=360, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator(CORPUS, trainer)
    byte_level = processors.ByteLevel(trim_offsets=False)
    if model_type in ("qwen2", "qwen3"):
        tokenizer.add_special_tokens([QWEN_END, IM_START, IM_END])
        tokenizer.post_processor = byte_level
    else:
        tokenizer.add_special_tokens([BEGIN, END, EOT, HEADER_START, HEADER_END])
        template = processors.TemplateProcessing(
            single=f"{BEGIN} $A", pair=f"{BEGIN} $A {BEGIN} $B", special_tokens=[(BEGIN, tokenizer.token_to_id(BEGIN))]
        )
        tokenizer.post_processor = processors.Sequence([byte_level, template])
    return tokenizer.to_str()


def tokenizer_size(model_type):
    from tokenizers import Tokenizer

    return Tokenizer.from_str(tokenizer_json(model_type)).get_vocab_size(with_added_tokens=True)


def write_tokenizer(folder, model_type):
    from tokenizers import Tokenizer

    (folder / "tokenizer.json").write_text(tokenizer_json(model_type), encoding="utf-8")
    ids = Tokenizer.from_str(tokenizer_json(model_type)).token_to_id
    if model_type in ("qwen2", "qwen3"):
        settings = {"bos_token": None, "eos_token": IM_END, "pad_token": QWEN_END}
        generation = {"eos_token_id": [ids(IM_END), ids(QWEN_END)], "pad_token_id": ids(QWEN_END)}
    else:
        settings = {"bos_token": BEGIN, "eos_token": END}
        generation = {"bos_token_id": ids(BEGIN), "eos_token_id": [ids(END), ids(EOT)]}
    (folder / "tokenizer_config.json").write_text(json.dumps(settings), encoding="utf-8")
    (folder / "generation_config.json").write_text(json.dumps(generation), encoding="utf-8")


# --- Config and tensors ----------------------------------------------------------------------


def config(name, **changes):
    model_type, case = CASES[name]
    vocabulary_size = -(-tokenizer_size(model_type) // 16) * 16  # padded rows, as Qwen's tables have
    return {
        "architectures": [ARCHITECTURES[model_type]], "model_type": model_type, "vocab_size": vocabulary_size,
        **SIZES, "hidden_act": "silu", "max_position_embeddings": 256, "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0, "rope_scaling": None, "attention_dropout": 0.0, "initializer_range": 0.02,
        **case, **changes,
    }


def tensors(config, seed=0):
    """{transformers name: float32 array} of a Llama-family checkpoint, every weight random."""
    rng = np.random.default_rng(seed)

    def r(*shape, mean=0.0):
        return rng.normal(mean, 0.2, shape).astype(np.float16).astype(np.float32)

    d, ff, h = config["hidden_size"], config["intermediate_size"], config["num_attention_heads"]
    g = config.get("num_key_value_heads") or h
    k = config.get("head_dim") or d // h
    kind = config["model_type"]
    t = {"model.embed_tokens.weight": r(config["vocab_size"], d), "model.norm.weight": r(d, mean=1.0)}
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        t.update({
            p + "self_attn.q_proj.weight": r(h * k, d), p + "self_attn.k_proj.weight": r(g * k, d),
            p + "self_attn.v_proj.weight": r(g * k, d), p + "self_attn.o_proj.weight": r(d, h * k),
            p + "mlp.gate_proj.weight": r(ff, d), p + "mlp.up_proj.weight": r(ff, d), p + "mlp.down_proj.weight": r(d, ff),
            p + "input_layernorm.weight": r(d, mean=1.0), p + "post_attention_layernorm.weight": r(d, mean=1.0),
        })
        if kind == "qwen2":
            t.update({p + "self_attn.q_proj.bias": r(h * k), p + "self_attn.k_proj.bias": r(g * k),
                      p + "self_attn.v_proj.bias": r(g * k)})
        if kind == "qwen3":
            t.update({p + "self_attn.q_norm.weight": r(k, mean=1.0), p + "self_attn.k_norm.weight": r(k, mean=1.0)})
    if not config.get("tie_word_embeddings"):
        t["lm_head.weight"] = r(config["vocab_size"], d)
    return t


def hf_folder(folder, name, seed=0, **changes):
    """A Hugging Face folder of case `name`: config.json, model.safetensors and the tokenizer files."""
    from safetensors.numpy import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    settings = config(name, **changes)
    save_file(tensors(settings, seed), str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(settings), encoding="utf-8")
    write_tokenizer(folder, settings["model_type"])
    return folder


# --- The float64 reference -------------------------------------------------------------------


def inverse_frequencies(config, k):
    """transformers' rotary frequencies (`_compute_default_rope_parameters`, `_compute_llama3_parameters`)."""
    inverse = 1.0 / config["rope_theta"] ** (np.arange(0, k, 2, dtype=np.float64) / k)
    scaling = config.get("rope_scaling")
    if not scaling:
        return inverse
    factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
    old_context = scaling["original_max_position_embeddings"]
    low_freq_wavelen, high_freq_wavelen = old_context / low, old_context / high
    wavelen = 2 * math.pi / inverse
    inv_freq_llama = np.where(wavelen > low_freq_wavelen, inverse / factor, inverse)
    smooth = (old_context / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * inv_freq_llama / factor + smooth * inv_freq_llama
    is_medium = ~(wavelen < high_freq_wavelen) & ~(wavelen > low_freq_wavelen)
    return np.where(is_medium, smoothed, inv_freq_llama)


def _rms_norm(x, weight, epsilon):
    return weight * x / np.sqrt((x**2).mean(-1, keepdims=True) + epsilon)


def _rotate_half(x):
    first, second = np.split(x, 2, axis=-1)
    return np.concatenate([-second, first], axis=-1)


def reference_logits(tensors, config, token_ids):
    """LlamaForCausalLM's (and Mistral's, Qwen2's, Qwen3's) logits (B, T, V) in float64, as transformers computes them."""
    w = {name.removeprefix("model."): value.astype(np.float64) for name, value in tensors.items()}
    d, h, eps = config["hidden_size"], config["num_attention_heads"], config["rms_norm_eps"]
    g = config.get("num_key_value_heads") or h
    k = config.get("head_dim") or d // h
    b, t = token_ids.shape
    angles = np.arange(t)[:, None] * inverse_frequencies(config, k)[None, :]  # (T, k/2)
    cos, sin = np.cos(np.concatenate([angles, angles], -1)), np.sin(np.concatenate([angles, angles], -1))  # (T, k)
    allowed = np.tril(np.ones((t, t), bool))
    x = w["embed_tokens.weight"][token_ids]
    for i in range(config["num_hidden_layers"]):
        p = f"layers.{i}."

        def project(name, heads):
            y = hidden @ w[f"{p}self_attn.{name}_proj.weight"].T
            if f"{p}self_attn.{name}_proj.bias" in w:
                y = y + w[f"{p}self_attn.{name}_proj.bias"]
            return y.reshape(b, t, heads, k).transpose(0, 2, 1, 3)  # (B, heads, T, k)

        hidden = _rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q, key, value = project("q", h), project("k", g), project("v", g)
        if p + "self_attn.q_norm.weight" in w:
            q = _rms_norm(q, w[p + "self_attn.q_norm.weight"], eps)
            key = _rms_norm(key, w[p + "self_attn.k_norm.weight"], eps)
        q, key = q * cos + _rotate_half(q) * sin, key * cos + _rotate_half(key) * sin
        key, value = np.repeat(key, h // g, axis=1), np.repeat(value, h // g, axis=1)  # repeat_kv: (B, h, T, k)
        scores = np.where(allowed, q @ key.transpose(0, 1, 3, 2) / np.sqrt(k), -np.inf)
        weights = np.exp(scores - scores.max(-1, keepdims=True))
        weights /= weights.sum(-1, keepdims=True)
        out = (weights @ value).transpose(0, 2, 1, 3).reshape(b, t, h * k)
        x = x + out @ w[p + "self_attn.o_proj.weight"].T
        hidden = _rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        gate = hidden @ w[p + "mlp.gate_proj.weight"].T
        x = x + (gate / (1 + np.exp(-gate)) * (hidden @ w[p + "mlp.up_proj.weight"].T)) @ w[p + "mlp.down_proj.weight"].T
    x = _rms_norm(x, w["norm.weight"], eps)
    head = w.get("lm_head.weight", w["embed_tokens.weight"])
    return x @ head.T
