"""Tiny random Gemma 3 text checkpoints (`gemma3_text`) in Hugging Face's
format, built here from their config (nothing downloads), and a float64
NumPy reference of transformers' `Gemma3ForCausalLM` that reads their
tensors directly.

Every weight is random (the (1 + w) norm weights included), so a tensor put
in the wrong place changes the logits. The weights are rounded to float16
values, so every reader reads them exactly.
"""

import functools
import json
import math
from pathlib import Path

import numpy as np

SIZES = dict(hidden_size=32, intermediate_size=48, num_attention_heads=4)
CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "naive cafe facade creme brulee",
    "zwei hunde laufen uber die strasse",
    "tokens and numbers 12345",
] * 5
PAD, EOS, BOS, UNK = "<pad>", "<eos>", "<bos>", "<unk>"
START_OF_TURN, END_OF_TURN = "<start_of_turn>", "<end_of_turn>"

# name -> config changes. "gemma3": transformers v4 keys, an explicit layer pattern with a window of 4, a head
# wider than d / h, one key/value head and a query_pre_attn_scalar that is not the head width; "gemma3_v5": v5's
# per-layer-type `rope_parameters` and the pattern from `sliding_window_pattern`, two key/value heads;
# "gemma3_pattern": the published models' shape (six layers, five local then one global, the bases 10,000 and
# 1,000,000, query_pre_attn_scalar = head_dim), the only one keras-hub's Gemma3Backbone computes.
CASES = {
    "gemma3": dict(num_hidden_layers=3, layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                   num_key_value_heads=1, head_dim=16, query_pre_attn_scalar=12, sliding_window=4,
                   rope_theta=1000000.0, rope_local_base_freq=10000.0),
    "gemma3_v5": dict(num_hidden_layers=2, sliding_window_pattern=2, num_key_value_heads=2, head_dim=8,
                      query_pre_attn_scalar=8, sliding_window=5,
                      rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 500000.0},
                                       "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}),
    "gemma3_pattern": dict(num_hidden_layers=6, num_key_value_heads=1, head_dim=16, query_pre_attn_scalar=16,
                           sliding_window=4, rope_theta=1000000.0, rope_local_base_freq=10000.0),
}


@functools.cache
def tokenizer_json():
    """A BPE tokenizer.json with Gemma's special tokens (<pad> 0, <eos> 1,
    <bos> 2, <unk> 3, the turn markers) and its post-processor, which adds
    <bos>."""
    from tokenizers import Tokenizer, decoders, models, normalizers, processors, trainers

    tokenizer = Tokenizer(models.BPE(unk_token=UNK))
    tokenizer.normalizer = normalizers.Replace(" ", "▁")
    tokenizer.decoder = decoders.Replace("▁", " ")
    specials = [PAD, EOS, BOS, UNK, START_OF_TURN, END_OF_TURN]
    trainer = trainers.BpeTrainer(vocab_size=200, special_tokens=specials, show_progress=False)
    tokenizer.train_from_iterator(CORPUS, trainer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, tokenizer.token_to_id(BOS))]
    )
    return tokenizer.to_str()


def tokenizer_size():
    from tokenizers import Tokenizer

    return Tokenizer.from_str(tokenizer_json()).get_vocab_size(with_added_tokens=True)


def write_tokenizer(folder):
    from tokenizers import Tokenizer

    (folder / "tokenizer.json").write_text(tokenizer_json(), encoding="utf-8")
    ids = Tokenizer.from_str(tokenizer_json()).token_to_id
    settings = {"bos_token": BOS, "eos_token": EOS, "pad_token": PAD, "unk_token": UNK}
    generation = {"bos_token_id": ids(BOS), "eos_token_id": [ids(EOS), ids(END_OF_TURN)], "pad_token_id": ids(PAD)}
    (folder / "tokenizer_config.json").write_text(json.dumps(settings), encoding="utf-8")
    (folder / "generation_config.json").write_text(json.dumps(generation), encoding="utf-8")


def config(name, **changes):
    vocabulary_size = -(-tokenizer_size() // 16) * 16
    return {
        "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "vocab_size": vocabulary_size,
        **SIZES, "hidden_activation": "gelu_pytorch_tanh", "max_position_embeddings": 128, "rms_norm_eps": 1e-6,
        "attention_bias": False, "attention_dropout": 0.0, "final_logit_softcapping": None,
        "attn_logit_softcapping": None, "rope_scaling": None, "initializer_range": 0.02, "tie_word_embeddings": True,
        "bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0,
        **CASES[name], **changes,
    }


def layer_types(config):
    if config.get("layer_types"):
        return config["layer_types"]
    pattern = config.get("sliding_window_pattern", 6)
    return ["full_attention" if (i + 1) % pattern == 0 else "sliding_attention"
            for i in range(config["num_hidden_layers"])]


def rope_thetas(config):
    """(global, local) rotary bases, from the v4 keys or v5's `rope_parameters`."""
    parameters = config.get("rope_parameters")
    if parameters:
        return parameters["full_attention"]["rope_theta"], parameters["sliding_attention"]["rope_theta"]
    return config["rope_theta"], config["rope_local_base_freq"]


def tensors(config, seed=0):
    """{transformers name: float32 array} of a Gemma3ForCausalLM checkpoint, every weight random."""
    rng = np.random.default_rng(seed)

    def r(*shape):
        return rng.normal(0.0, 0.2, shape).astype(np.float16).astype(np.float32)

    d, ff, h = config["hidden_size"], config["intermediate_size"], config["num_attention_heads"]
    g, k = config["num_key_value_heads"], config["head_dim"]
    t = {"model.embed_tokens.weight": r(config["vocab_size"], d), "model.norm.weight": r(d)}
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        t.update({
            p + "self_attn.q_proj.weight": r(h * k, d), p + "self_attn.k_proj.weight": r(g * k, d),
            p + "self_attn.v_proj.weight": r(g * k, d), p + "self_attn.o_proj.weight": r(d, h * k),
            p + "self_attn.q_norm.weight": r(k), p + "self_attn.k_norm.weight": r(k),
            p + "mlp.gate_proj.weight": r(ff, d), p + "mlp.up_proj.weight": r(ff, d), p + "mlp.down_proj.weight": r(d, ff),
            p + "input_layernorm.weight": r(d), p + "post_attention_layernorm.weight": r(d),
            p + "pre_feedforward_layernorm.weight": r(d), p + "post_feedforward_layernorm.weight": r(d),
        })
    return t


def hf_folder(folder, name, seed=0, **changes):
    """A Hugging Face folder of case `name`: config.json, model.safetensors and the tokenizer files."""
    from safetensors.numpy import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    settings = config(name, **changes)
    save_file(tensors(settings, seed), str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(settings), encoding="utf-8")
    write_tokenizer(folder)
    return folder


# --- The float64 reference -------------------------------------------------------------------


def _rms_norm(x, weight, epsilon):
    """Gemma3RMSNorm: x / sqrt(mean(x^2) + eps) * (1 + w)."""
    return x / np.sqrt((x**2).mean(-1, keepdims=True) + epsilon) * (1.0 + weight)


def _rotate_half(x):
    first, second = np.split(x, 2, axis=-1)
    return np.concatenate([-second, first], axis=-1)


def _gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def reference_logits(tensors, config, token_ids):
    """Gemma3ForCausalLM's logits (B, T, V) in float64, as transformers computes them."""
    w = {name.removeprefix("model."): value.astype(np.float64) for name, value in tensors.items()}
    d, h, eps = config["hidden_size"], config["num_attention_heads"], config["rms_norm_eps"]
    g, k = config["num_key_value_heads"], config["head_dim"]
    b, t = token_ids.shape
    positions = np.arange(t)
    causal = positions[None, :] <= positions[:, None]  # (T, S)
    local = causal & (positions[:, None] - positions[None, :] < config["sliding_window"])
    global_theta, local_theta = rope_thetas(config)
    x = w["embed_tokens.weight"][token_ids] * math.sqrt(d)
    for i, kind in enumerate(layer_types(config)):
        p = f"layers.{i}."
        theta, allowed = (local_theta, local) if kind == "sliding_attention" else (global_theta, causal)
        angles = positions[:, None] * (1.0 / theta ** (np.arange(0, k, 2) / k))[None, :]  # (T, k/2)
        cos, sin = np.cos(np.concatenate([angles, angles], -1)), np.sin(np.concatenate([angles, angles], -1))

        def project(name, heads):
            y = hidden @ w[f"{p}self_attn.{name}_proj.weight"].T
            return y.reshape(b, t, heads, k).transpose(0, 2, 1, 3)  # (B, heads, T, k)

        hidden = _rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q = _rms_norm(project("q", h), w[p + "self_attn.q_norm.weight"], eps)
        key = _rms_norm(project("k", g), w[p + "self_attn.k_norm.weight"], eps)
        value = project("v", g)
        q, key = q * cos + _rotate_half(q) * sin, key * cos + _rotate_half(key) * sin
        key, value = np.repeat(key, h // g, axis=1), np.repeat(value, h // g, axis=1)  # (B, h, T, k)
        scores = q @ key.transpose(0, 1, 3, 2) * config["query_pre_attn_scalar"] ** -0.5
        scores = np.where(allowed, scores, -np.inf)
        weights = np.exp(scores - scores.max(-1, keepdims=True))
        weights /= weights.sum(-1, keepdims=True)
        out = (weights @ value).transpose(0, 2, 1, 3).reshape(b, t, h * k) @ w[p + "self_attn.o_proj.weight"].T
        x = x + _rms_norm(out, w[p + "post_attention_layernorm.weight"], eps)
        hidden = _rms_norm(x, w[p + "pre_feedforward_layernorm.weight"], eps)
        inner = _gelu_tanh(hidden @ w[p + "mlp.gate_proj.weight"].T) * (hidden @ w[p + "mlp.up_proj.weight"].T)
        x = x + _rms_norm(inner @ w[p + "mlp.down_proj.weight"].T, w[p + "post_feedforward_layernorm.weight"], eps)
    x = _rms_norm(x, w["norm.weight"], eps)
    return x @ w["embed_tokens.weight"].T
