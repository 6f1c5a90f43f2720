"""Llama-family checkpoints: `LlamaBackbone` / `LlamaCausalLM` <->
transformers' Llama, Mistral, Qwen2 and Qwen3 (`*ForCausalLM`, `*Model`)
and keras-hub's `LlamaBackbone`, `Llama3Backbone`, `MistralBackbone`,
`QwenBackbone` and `Qwen3Backbone`.

Config in and out, the tensor-name table, the tokenizer (the folder's
`tokenizer.json` as a `zoo.tokenizers.HuggingFaceTokenizer`; keras-hub's
byte-pair tokenizers in a preset) and the keras-hub weight copy.

transformers' `q_proj`, `k_proj` and `v_proj` (out, in) weights are the
transposed column blocks [q | k | v] of the zoo's fused (d, h k + 2 g k)
kernel; the rotary layout is the same "rotate half" in all three, so no
row is permuted. keras-hub keeps (d, h, k) / (d, g, k) kernels and an
(h, k, d) output kernel, reshapes of the same matrices.

What the zoo's Llama does not compute is refused with one line: an
`o_proj` bias (Llama's `attention_bias`, Qwen3's), an MLP bias, rope
scaling other than Llama 3's, Qwen's sliding-window layers, an activation
other than SiLU. A Mistral `sliding_window` smaller than
`max_position_embeddings` becomes the zoo model's `max_sequence_length`:
`zoo.generate` keeps the context within it (sliding past it), so no
generated position attends beyond the window; a direct call on a longer
sequence is not windowed.
"""

import functools
import json

import numpy as np

from zoo.models.tensor_names import (
    CheckpointError,
    check_vocabulary,
    read_architecture,
    refuse_config_value,
    require_files,
    to_numpy,
    write_text,
)
from zoo.models.rotary_decoder import fields_from_huggingface, huggingface_fields, huggingface_tensor_names

NAME = "Llama-family"
MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3")
TASKS = ("causal_lm",)
DEFAULT_TASK = "causal_lm"
HEADS_WITH_WEIGHTS = ()  # the LM head (tied, or `lm_head`) belongs to the backbone
CLASS_PREFIXES = {"llama": "Llama", "mistral": "Mistral", "qwen2": "Qwen2", "qwen3": "Qwen3"}
ROPE_SCALING_KEYS = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")
KERAS_HUB_BACKBONES = (
    "keras_hub>LlamaBackbone",
    "keras_hub>Llama3Backbone",
    "keras_hub>MistralBackbone",
    "keras_hub>QwenBackbone",
    "keras_hub>Qwen3Backbone",
)
KERAS_HUB_TASKS = {
    "keras_hub>LlamaCausalLM": "causal_lm",
    "keras_hub>Llama3CausalLM": "causal_lm",
    "keras_hub>MistralCausalLM": "causal_lm",
    "keras_hub>QwenCausalLM": "causal_lm",
    "keras_hub>Qwen3CausalLM": "causal_lm",
}
KERAS_HUB_TOKENIZERS = {
    "keras_hub>Llama3Tokenizer": ("vocabulary.json", "merges.txt"),
    "keras_hub>QwenTokenizer": ("vocabulary.json", "merges.txt"),
    "keras_hub>Qwen3Tokenizer": ("vocabulary.json", "merges.txt"),
    "keras_hub>LlamaTokenizer": ("vocabulary.spm",),
    "keras_hub>MistralTokenizer": ("vocabulary.spm",),
}
# keras-hub's classes by the model_type the zoo model writes (see `model_type`).
KERAS_HUB_CLASSES = {
    "llama": ("Llama3Backbone", "Llama3CausalLM", "Llama3CausalLMPreprocessor", "Llama3Tokenizer"),
    "qwen2": ("QwenBackbone", "QwenCausalLM", "QwenCausalLMPreprocessor", "QwenTokenizer"),
    "qwen3": ("Qwen3Backbone", "Qwen3CausalLM", "Qwen3CausalLMPreprocessor", "Qwen3Tokenizer"),
}
# The special tokens keras-hub's tokenizer classes require in the vocabulary (they do not save their own
# choice: `from_preset` builds them with these).
KERAS_HUB_TOKENIZER_TOKENS = {
    "llama": ("<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>"),
    "qwen2": ("<|endoftext|>",),
    "qwen3": ("<|im_end|>", "<|endoftext|>"),
}
# keras-hub presets do not record the context length; the zoo model gets this one unless the preset has a window.
DEFAULT_CONTEXT = 2048


def build_backbone(zoo_config, dtype=None):
    from zoo.models.llama.model import LlamaBackbone

    return LlamaBackbone(**zoo_config, dtype=dtype)


def build_task(backbone, task, num_classes=None):
    from zoo.models.llama.model import LlamaCausalLM

    return LlamaCausalLM(backbone) if task == "causal_lm" else backbone


def model_type(backbone):
    """The transformers model_type that computes what this backbone computes."""
    config = backbone.get_config()
    if config["query_key_norm"]:
        return "qwen3"
    return "qwen2" if config["attention_bias"] else "llama"


# --- Hugging Face: config ------------------------------------------------------------------


def _rope(config, config_file):
    """(rope_theta, rope_scaling) of a config, transformers' v4 keys or v5's `rope_parameters`."""
    parameters = config.get("rope_parameters") or {}
    theta = config.get("rope_theta", parameters.get("rope_theta", 10000.0))
    scaling = config.get("rope_scaling") or (parameters if parameters.get("rope_type", "default") != "default" else None)
    if scaling is None:
        return float(theta), None
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind == "default":
        return float(theta), None
    if kind != "llama3":
        raise CheckpointError(f"{config_file}: rope_scaling of type {kind!r} is not supported; expected None or 'llama3'.")
    missing = [key for key in ROPE_SCALING_KEYS if key not in scaling]
    if missing:
        raise CheckpointError(f"{config_file}: the llama3 rope_scaling has no {missing[0]!r}; expected {ROPE_SCALING_KEYS}.")
    return float(theta), {"rope_type": "llama3", **{key: scaling[key] for key in ROPE_SCALING_KEYS}}


def from_huggingface_config(config, config_file):
    """transformers' Llama / Mistral / Qwen2 / Qwen3 config -> (architecture, head, zoo config)."""
    kind = config["model_type"]
    prefix = CLASS_PREFIXES[kind]
    architecture, get = read_architecture(config, config_file, (f"{prefix}ForCausalLM", f"{prefix}Model"))
    refuse = functools.partial(refuse_config_value, config, config_file)

    if get("hidden_act", "silu") != "silu":
        refuse("hidden_act", "expected 'silu' (SwiGLU)")
    if get("mlp_bias", False):
        refuse("mlp_bias", "the zoo's SwiGLU has no biases")
    if kind in ("llama", "qwen3") and get("attention_bias", False):
        refuse("attention_bias", "it puts a bias on o_proj too, which the zoo's attention does not have")
    if kind in ("qwen2", "qwen3") and get("use_sliding_window", False):
        refuse("use_sliding_window", "expected full attention in every layer")
    rope_theta, rope_scaling = _rope(config, config_file)
    zoo_config = fields_from_huggingface(get, head_dim=128 if kind == "qwen3" else None)
    window = config.get("sliding_window") if kind == "mistral" else None
    if window and window < zoo_config["max_sequence_length"]:
        zoo_config["max_sequence_length"] = window  # no position may attend past the window
    zoo_config.update(
        rope_theta=rope_theta,
        rope_scaling=rope_scaling,
        tie_word_embeddings=bool(get("tie_word_embeddings", False)),
        attention_bias=kind == "qwen2",  # Qwen2's q, k and v projections always have biases
        query_key_norm=kind == "qwen3",
    )
    return architecture, "causal_lm" if architecture.endswith("ForCausalLM") else None, zoo_config


def check_huggingface_export(backbone):
    config = backbone.get_config()
    if config["query_key_norm"] and config["attention_bias"]:
        raise ValueError(
            "A model with both query_key_norm (Qwen3) and attention_bias (Qwen2's q, k, v biases) has no "
            "transformers class; expected at most one of them."
        )


def to_huggingface_config(model):
    from zoo.tokenizers import HuggingFaceTokenizer

    backbone = getattr(model, "backbone", model)
    config = backbone.get_config()
    kind = model_type(backbone)
    hf_config = {
        "architectures": [f"{CLASS_PREFIXES[kind]}ForCausalLM"],
        "model_type": kind,
        **huggingface_fields(backbone),
        "hidden_act": "silu",
        "rope_scaling": config["rope_scaling"],
        "tie_word_embeddings": config["tie_word_embeddings"],
        "use_cache": True,
        "torch_dtype": "float32",
    }
    if kind == "llama":
        hf_config.update(attention_bias=False, mlp_bias=False)
    else:
        hf_config.update(use_sliding_window=False, sliding_window=None, max_window_layers=config["num_layers"])
        if kind == "qwen3":
            hf_config["attention_bias"] = False
    tokenizer = getattr(model, "tokenizer", None)
    if isinstance(tokenizer, HuggingFaceTokenizer):
        hf_config.update(special_ids(tokenizer))
    return hf_config


def special_ids(tokenizer):
    ends = list(tokenizer.end_token_ids)
    ids = {"bos_token_id": tokenizer.start_token_id, "eos_token_id": ends[0] if len(ends) == 1 else (ends or None)}
    if tokenizer.pad_token_id is not None:
        ids["pad_token_id"] = tokenizer.pad_token_id
    return ids


# --- Hugging Face: tensor names ------------------------------------------------------------


def huggingface_names(model):
    """(architecture, table) of the export: always `*ForCausalLM` (an untied
    head lives in the backbone), with transformers' `model.` prefix."""
    backbone = getattr(model, "backbone", model)
    return f"{CLASS_PREFIXES[model_type(backbone)]}ForCausalLM", huggingface_tensor_names(backbone)


def module_prefix(checkpoint_names):
    """transformers' "model." before the backbone's tensor names, where a checkpoint's names have it."""
    return "model." if any(n.startswith("model.") for n in checkpoint_names) else ""


def checkpoint_name(name):
    return name


def import_names(model, checkpoint_names, with_head):
    """The table in the checkpoint's layout (`*Model` files have no `model.` prefix)."""
    return huggingface_tensor_names(getattr(model, "backbone", model), prefix=module_prefix(checkpoint_names))


def ignorable(name):
    """Old checkpoints' rotary buffers, and a tied head's copy (checked equal by `tied_copies`)."""
    return name.endswith("rotary_emb.inv_freq") or name == "lm_head.weight"


def tied_copies(model, checkpoint_names):
    """(copy, original) pairs that must be equal: `lm_head.weight` beside a tied embedding."""
    if getattr(model, "backbone", model).lm_head is not None:
        return []
    return [("lm_head.weight", f"{module_prefix(checkpoint_names)}embed_tokens.weight")]


# --- Hugging Face: tokenizer ---------------------------------------------------------------


def read_huggingface_tokenizer(folder, vocabulary_size, weights_file):
    from zoo.data import DataError
    from zoo.tokenizers import HuggingFaceTokenizer

    require_files(folder, "tokenizer.json", why="the checkpoint's tokenizer (tokenizer.json)")
    try:
        tokenizer = HuggingFaceTokenizer.from_folder(folder)
    except (DataError, ValueError) as error:
        message = str(error)
        where = "" if str(folder) in message else f"{folder / 'tokenizer.json'}: "
        raise CheckpointError(f"{where}{message}") from None
    check_vocabulary(tokenizer.vocabulary_size(), vocabulary_size, folder / "tokenizer.json", weights_file)
    return tokenizer


def _is_byte_level_bpe(tokenizer_json):
    """Whether keras-hub's byte-pair tokenizer can hold this tokenizer.json: a BPE over GPT-2's byte alphabet."""
    pre = tokenizer_json.get("pre_tokenizer") or {}
    kinds = [p.get("type") for p in pre.get("pretokenizers", [pre])]
    return (tokenizer_json.get("model") or {}).get("type") == "BPE" and "ByteLevel" in kinds


def tokenizer_problem(tokenizer, format, backbone):
    """Why `tokenizer` cannot be written as the checkpoint's tokenizer in `format`; None when it can."""
    import keras_hub

    from zoo.tokenizers import HuggingFaceTokenizer

    if tokenizer is None:
        return "the model has no tokenizer (set model.tokenizer)"
    if format == "keras-hub" and isinstance(tokenizer, keras_hub.tokenizers.Tokenizer):
        return None  # a keras-hub preset's own tokenizer goes back as it is
    if not isinstance(tokenizer, HuggingFaceTokenizer):
        return f"model.tokenizer is a {type(tokenizer).__name__}; expected a zoo.tokenizers.HuggingFaceTokenizer"
    if format == "huggingface":
        return None
    if not _is_byte_level_bpe(tokenizer.tokenizer_json()):
        return "the tokenizer.json is not a byte-level BPE, the only kind keras-hub's Llama 3 and Qwen tokenizers hold"
    kind = model_type(backbone)
    vocabulary = set(tokenizer.get_vocabulary())
    missing = [t for t in KERAS_HUB_TOKENIZER_TOKENS[kind] if t not in vocabulary]
    if missing:
        return f"keras-hub's {KERAS_HUB_CLASSES[kind][3]} needs the special tokens {missing}, not in the vocabulary"
    return None


def write_huggingface_tokenizer(tokenizer, folder, model):
    """tokenizer.json as it came, and the special tokens in tokenizer_config.json and generation_config.json."""
    tokenizer.save_assets(folder)
    token = lambda i: None if i is None else tokenizer.id_to_token(i)  # noqa: E731
    settings = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": getattr(model, "backbone", model).max_sequence_length,
        "bos_token": token(tokenizer.start_token_id),
        "eos_token": token(tokenizer.end_token_id),
        "pad_token": token(tokenizer.pad_token_id),
    }
    if tokenizer.add_bos is not None:
        settings["add_bos_token"] = tokenizer.add_bos
    if tokenizer.chat_template is not None:
        settings["chat_template"] = tokenizer.chat_template
    write_text(folder / "tokenizer_config.json", json.dumps(settings, indent=2, ensure_ascii=False) + "\n")
    write_text(folder / "generation_config.json", json.dumps(special_ids(tokenizer), indent=2) + "\n")


# --- keras-hub -----------------------------------------------------------------------------


def _keras_hub_pairs(backbone, hub):
    """[(zoo variable, keras-hub variable, columns)]: the same matrices, reshaped;
    `columns` the block of the zoo's fused q | k | v the keras-hub variable is."""
    config = backbone.get_config()
    query_width = backbone.num_heads * backbone.head_dim  # h k
    key_width = backbone.num_key_value_heads * backbone.head_dim  # g k
    blocks = [(0, query_width), (query_width, query_width + key_width), (query_width + key_width, query_width + 2 * key_width)]
    pairs = [(backbone.embedding.embeddings, hub.token_embedding.embeddings, None)]
    if backbone.lm_head is not None:
        pairs.append((backbone.lm_head.kernel, hub.token_embedding.reverse_embeddings, None))  # both (d, V)
    for block, layer in zip(backbone.blocks, hub.transformer_layers):
        attention, hub_attention, ff = block.self_attention, layer._self_attention_layer, block.feed_forward
        projections = (hub_attention._query_dense, hub_attention._key_dense, hub_attention._value_dense)
        for columns, projection in zip(blocks, projections):
            pairs.append((attention.query_key_value_dense.kernel, projection.kernel, columns))  # (d, h, k) / (d, g, k)
            if config["attention_bias"]:
                pairs.append((attention.query_key_value_dense.bias, projection.bias, columns))  # (h, k) / (g, k)
        pairs.append((attention.output_dense.kernel, hub_attention._output_dense.kernel, None))  # (h, k, d)
        if config["query_key_norm"]:
            pairs += [
                (attention.query_norm.scale, hub_attention._query_dense_layer_norm.scale, None),
                (attention.key_norm.scale, hub_attention._key_dense_layer_norm.scale, None),
            ]
        pairs += [
            (block.self_attention_add_norm.layer_norm.scale, layer._self_attention_layernorm.scale, None),
            (block.feed_forward_add_norm.layer_norm.scale, layer._feedforward_layernorm.scale, None),
            (ff.gate_dense.kernel, layer._feedforward_gate_dense.kernel, None),
            (ff.intermediate_dense.kernel, layer._feedforward_intermediate_dense.kernel, None),
            (ff.output_dense.kernel, layer._feedforward_output_dense.kernel, None),
        ]
    pairs.append((backbone.final_norm.scale, hub.layer_norm.scale, None))
    return pairs


def _hub_config(hub):
    """keras-hub backbone -> the zoo config, or a ValueError for what the zoo's Llama does not compute."""
    kind = type(hub).__name__
    config = dict(
        vocabulary_size=hub.vocabulary_size,
        num_layers=hub.num_layers,
        num_heads=hub.num_query_heads,
        hidden_dim=hub.hidden_dim,
        intermediate_dim=hub.intermediate_dim,
        num_key_value_heads=hub.num_key_value_heads,
        max_sequence_length=DEFAULT_CONTEXT,
        rope_theta=float(hub.rope_max_wavelength),
        rms_norm_epsilon=float(hub.layer_norm_epsilon),
        tie_word_embeddings=bool(getattr(hub, "tie_word_embeddings", False)),
        dropout=float(hub.dropout),
    )
    position_scaling = getattr(hub, "rope_position_scaling_factor", getattr(hub, "rope_scaling_factor", 1.0))
    if position_scaling != 1.0:
        raise ValueError(f"{kind}: rope position scaling {position_scaling} is not supported; expected 1.0.")
    if getattr(hub, "rope_frequency_adjustment_factor", None) is not None:
        config["rope_scaling"] = {
            "rope_type": "llama3",
            "factor": hub.rope_frequency_adjustment_factor,
            "low_freq_factor": hub.rope_low_freq_factor,
            "high_freq_factor": hub.rope_high_freq_factor,
            "original_max_position_embeddings": hub.rope_pretraining_sequence_length,
        }
    if kind == "MistralBackbone":
        config["max_sequence_length"] = hub.sliding_window or DEFAULT_CONTEXT  # keras-hub attends within it
    if kind in ("MistralBackbone", "Qwen3Backbone") and hub.head_dim not in (None, hub.hidden_dim // hub.num_query_heads):
        config["head_dim"] = hub.head_dim
    if kind == "QwenBackbone":
        if hub.use_sliding_window_attention:
            raise ValueError("QwenBackbone: use_sliding_window_attention=True is not supported; expected full attention.")
        config["attention_bias"] = True
    if kind == "Qwen3Backbone":
        config["query_key_norm"] = True
        config["max_sequence_length"] = hub.sliding_window_size or DEFAULT_CONTEXT
    return config


def from_keras_hub(backbone, dtype=None, **overrides):
    """A keras-hub Llama / Llama 3 / Mistral / Qwen / Qwen3 backbone -> the zoo `LlamaBackbone` with the same weights."""
    from zoo.models.llama.model import LlamaBackbone

    model = LlamaBackbone(**{**_hub_config(backbone), "dtype": dtype or backbone.dtype_policy.name, **overrides})
    values = {}
    for variable, hub_variable, columns in _keras_hub_pairs(model, backbone):
        if columns is None:
            variable.assign(to_numpy(hub_variable).reshape(variable.shape))
            continue
        value = values.setdefault(id(variable), (variable, np.zeros(variable.shape, np.float32)))[1]
        value[..., columns[0] : columns[1]] = to_numpy(hub_variable).reshape(value[..., columns[0] : columns[1]].shape)
    for variable, value in values.values():
        variable.assign(value)
    return model


def keras_hub_incompatibilities(backbone):
    """(refusals, approximations): what keras-hub's Llama 3, Qwen and Qwen3 backbones cannot hold."""
    config = backbone.get_config()
    kind = model_type(backbone)
    refusals = []
    if config["query_key_norm"] and config["attention_bias"]:
        refusals.append("the model has both query_key_norm and attention_bias; no keras-hub backbone has both")
    if kind in ("llama", "qwen2") and backbone.head_dim != backbone.hidden_dim // backbone.num_heads:
        refusals.append(
            f"head_dim is {backbone.head_dim}, not hidden_dim / num_heads; keras-hub's {KERAS_HUB_CLASSES[kind][0]} "
            "has no head_dim"
        )
    if kind == "llama" and config["tie_word_embeddings"]:
        refusals.append(
            "the model ties its head to the token embedding, and keras-hub's Llama3Backbone does not save "
            "tie_word_embeddings (from_preset would rebuild it untied)"
        )
    if kind != "llama" and config["rope_scaling"] is not None:
        refusals.append(f"keras-hub's {KERAS_HUB_CLASSES[kind][0]} has no llama3 rope_scaling")
    return refusals, []


def to_keras_hub(backbone):
    """The zoo `LlamaBackbone` -> keras-hub's `Llama3Backbone`, `QwenBackbone` or `Qwen3Backbone`."""
    import keras_hub

    config = backbone.get_config()
    kind = model_type(backbone)
    arguments = dict(
        vocabulary_size=config["vocabulary_size"],
        num_layers=config["num_layers"],
        num_query_heads=config["num_heads"],
        num_key_value_heads=config["num_key_value_heads"],
        hidden_dim=config["hidden_dim"],
        intermediate_dim=config["intermediate_dim"],
        rope_max_wavelength=config["rope_theta"],
        layer_norm_epsilon=config["rms_norm_epsilon"],  # keras-hub's name for it
        dropout=config["dropout"],
        tie_word_embeddings=config["tie_word_embeddings"],
        dtype=backbone.dtype_policy.name,
    )
    scaling = config["rope_scaling"]
    if kind == "llama" and scaling is not None:
        arguments.update(
            rope_frequency_adjustment_factor=scaling["factor"],
            rope_low_freq_factor=scaling["low_freq_factor"],
            rope_high_freq_factor=scaling["high_freq_factor"],
            rope_pretraining_sequence_length=scaling["original_max_position_embeddings"],
        )
    if kind == "qwen3":
        arguments.update(head_dim=backbone.head_dim, sliding_window_size=None)
    hub = getattr(keras_hub.models, KERAS_HUB_CLASSES[kind][0])(**arguments)
    for variable, hub_variable, columns in _keras_hub_pairs(backbone, hub):
        value = to_numpy(variable)
        if columns is not None:
            value = value[..., columns[0] : columns[1]]
        hub_variable.assign(value.reshape(hub_variable.shape))
    return hub


def copy_keras_hub_head(model, hub_task, task, where):
    """keras-hub's causal LMs have no head weights beyond the backbone's."""


def keras_hub_tokenizer(tokenizer, backbone):
    """The model's tokenizer as keras-hub's: a keras-hub tokenizer as it is; a
    byte-level BPE tokenizer.json as keras-hub's Llama 3 / Qwen / Qwen3
    tokenizer with the same vocabulary, merges and special tokens.

    keras-hub's byte-pair tokenizer splits words with GPT-2's pattern, so the
    ids equal the tokenizer.json's where its pre-tokenizer is GPT-2's too
    (Llama 3's and Qwen's patterns also split digits); keras-hub's tokenizer
    adds no BOS (its preprocessor does).
    """
    import keras_hub

    if isinstance(tokenizer, keras_hub.tokenizers.Tokenizer):
        return tokenizer
    kind = model_type(backbone)
    data = tokenizer.tokenizer_json()
    vocabulary = dict(data["model"]["vocab"])
    merges = [m if isinstance(m, str) else " ".join(m) for m in data["model"]["merges"]]
    specials = [t["content"] for t in data.get("added_tokens", []) if t.get("special")]
    for added in data.get("added_tokens", []):
        vocabulary[added["content"]] = added["id"]
    cls = getattr(keras_hub.tokenizers, KERAS_HUB_CLASSES[kind][3])
    if kind == "llama":  # its special tokens are fixed (see KERAS_HUB_TOKENIZER_TOKENS)
        return cls(vocabulary=vocabulary, merges=merges)
    return cls(vocabulary=vocabulary, merges=merges, unsplittable_tokens=specials)


def keras_hub_task(model, hub_backbone, hub_tokenizer, folder):
    """keras-hub's Llama3CausalLM / QwenCausalLM / Qwen3CausalLM over `hub_backbone`; None for a backbone."""
    import keras_hub

    from zoo.models.llama.model import LlamaCausalLM

    if not isinstance(model, LlamaCausalLM):
        return None
    _, task_class, preprocessor_class, _ = KERAS_HUB_CLASSES[model_type(model.backbone)]
    preprocessor = hub_tokenizer and getattr(keras_hub.models, preprocessor_class)(
        hub_tokenizer, sequence_length=model.backbone.max_sequence_length
    )
    return getattr(keras_hub.models, task_class)(hub_backbone, preprocessor=preprocessor)
