"""Gemma 3 text checkpoints: `Gemma3Backbone` / `Gemma3CausalLM` <->
transformers' `gemma3_text` (`Gemma3ForCausalLM`, `Gemma3TextModel`: the
270M and 1B models).

Config in and out, the tensor-name table and the tokenizer (the folder's
`tokenizer.json` as a `zoo.tokenizers.HuggingFaceTokenizer`). transformers'
`q_proj`, `k_proj` and `v_proj` (out, in) weights are the transposed
column blocks [q | k | v] of the zoo's fused kernel, and its four norms per
layer are the two `AddNorm`s' input and output norms; the (1 + w) scale is
stored as w in both.

What the zoo's Gemma 3 does not compute is refused with one line: logit
soft-capping (Gemma 2's), rope scaling (the multimodal models' global
layers), bidirectional attention (EmbeddingGemma), an untied head, an
activation other than the tanh GELU. The multimodal `gemma3` checkpoints
(4B and up) are not text models and are refused by their model_type.
keras-hub's Gemma 3 presets are not read or written.
"""

import functools

from zoo.models.tensor_names import CheckpointError, read_architecture, refuse_config_value
from zoo.models.llama.weight_map import checkpoint_name, module_prefix, read_huggingface_tokenizer, write_huggingface_tokenizer  # noqa: F401
from zoo.models.rotary_decoder import fields_from_huggingface, huggingface_fields, huggingface_tensor_names

NAME = "Gemma 3"
MODEL_TYPES = ("gemma3_text",)
TASKS = ("causal_lm",)
DEFAULT_TASK = "causal_lm"
HEADS_WITH_WEIGHTS = ()  # the LM head is the tied token embedding
ARCHITECTURES = ("Gemma3ForCausalLM", "Gemma3TextModel")
KERAS_HUB_BACKBONES = ()
KERAS_HUB_TASKS = {}
KERAS_HUB_TOKENIZERS = {}


def build_backbone(zoo_config, dtype=None):
    from zoo.models.gemma.model import Gemma3Backbone

    return Gemma3Backbone(**zoo_config, dtype=dtype)


def build_task(backbone, task, num_classes=None):
    from zoo.models.gemma.model import Gemma3CausalLM

    return Gemma3CausalLM(backbone) if task == "causal_lm" else backbone


# --- Hugging Face: config ------------------------------------------------------------------


def _rope_thetas(config, get, config_file):
    """(global rope_theta, local rope_theta): transformers' v4 keys or v5's per-layer-type `rope_parameters`."""
    parameters = config.get("rope_parameters") or {}
    full = parameters.get("full_attention", {})
    local = parameters.get("sliding_attention", {})
    scaling = config.get("rope_scaling") or (full if full.get("rope_type", "default") != "default" else None)
    if scaling and scaling.get("rope_type", scaling.get("type")) != "default":
        raise CheckpointError(
            f"{config_file}: rope_scaling {scaling!r} is not supported; expected None (the 270M and 1B text models)."
        )
    return (
        float(full.get("rope_theta", get("rope_theta", 1000000.0))),
        float(local.get("rope_theta", get("rope_local_base_freq", 10000.0))),
    )


def from_huggingface_config(config, config_file):
    """transformers' `gemma3_text` config -> (architecture, head, zoo config)."""
    architecture, get = read_architecture(config, config_file, ARCHITECTURES)
    refuse = functools.partial(refuse_config_value, config, config_file)

    activation = get("hidden_activation", get("hidden_act", "gelu_pytorch_tanh"))
    if activation not in ("gelu_pytorch_tanh", "gelu_new"):
        refuse("hidden_activation" if "hidden_activation" in config else "hidden_act", "expected 'gelu_pytorch_tanh' (GeGLU)")
    for key in ("final_logit_softcapping", "attn_logit_softcapping"):
        if get(key, None) is not None:
            refuse(key, "expected null: Gemma 3 has no logit soft-capping")
    if get("use_bidirectional_attention", False):
        refuse("use_bidirectional_attention", "expected causal attention (a language model)")
    if get("attention_bias", False):
        refuse("attention_bias", "expected no biases")
    if not get("tie_word_embeddings", True):
        refuse("tie_word_embeddings", "expected the head tied to the token embedding")
    rope_theta, local_rope_theta = _rope_thetas(config, get, config_file)
    zoo_config = fields_from_huggingface(get, head_dim=256, max_sequence_length=32768)
    layer_types = config.get("layer_types")
    if layer_types is None:
        from zoo.models.gemma.config import default_layer_types

        layer_types = default_layer_types(zoo_config["num_layers"], get("sliding_window_pattern", 6))
    zoo_config.update(
        rope_theta=rope_theta,
        local_rope_theta=local_rope_theta,
        sliding_window=get("sliding_window", 4096),
        layer_types=list(layer_types),
        query_pre_attention_scalar=get("query_pre_attn_scalar", 256),
    )
    return architecture, "causal_lm" if architecture.endswith("ForCausalLM") else None, zoo_config


def check_huggingface_export(backbone):
    """Every Gemma3Backbone has a transformers class."""


def to_huggingface_config(model):
    from zoo.models.llama.weight_map import special_ids
    from zoo.tokenizers import HuggingFaceTokenizer

    backbone = getattr(model, "backbone", model)
    config = backbone.get_config()
    hf_config = {
        "architectures": ["Gemma3ForCausalLM"],
        "model_type": "gemma3_text",
        **huggingface_fields(backbone),
        "hidden_activation": "gelu_pytorch_tanh",
        "rope_local_base_freq": config["local_rope_theta"],
        "rope_scaling": None,
        "sliding_window": config["sliding_window"],
        "layer_types": list(backbone.layer_types),
        "query_pre_attn_scalar": config["query_pre_attention_scalar"] or backbone.head_dim,
        "final_logit_softcapping": None,
        "attn_logit_softcapping": None,
        "attention_bias": False,
        "tie_word_embeddings": True,
        "use_cache": True,
        "torch_dtype": "float32",
    }
    tokenizer = getattr(model, "tokenizer", None)
    if isinstance(tokenizer, HuggingFaceTokenizer):
        hf_config.update(special_ids(tokenizer))
    return hf_config


# --- Hugging Face: tensor names ------------------------------------------------------------


def huggingface_names(model):
    """(architecture, table) of the export: `Gemma3ForCausalLM`, with transformers' `model.` prefix."""
    return "Gemma3ForCausalLM", huggingface_tensor_names(getattr(model, "backbone", model))


def import_names(model, checkpoint_names, with_head):
    """The table in the checkpoint's layout (`Gemma3TextModel` files have no `model.` prefix)."""
    return huggingface_tensor_names(getattr(model, "backbone", model), prefix=module_prefix(checkpoint_names))


def ignorable(name):
    """A tied head's copy (checked equal by `tied_copies`)."""
    return name == "lm_head.weight"


def tied_copies(model, checkpoint_names):
    """(copy, original) pairs that must be equal: `lm_head.weight` beside the embedding."""
    return [("lm_head.weight", f"{module_prefix(checkpoint_names)}embed_tokens.weight")]


# --- Hugging Face: tokenizer ---------------------------------------------------------------


def tokenizer_problem(tokenizer, format, backbone):
    """Why `tokenizer` cannot be written as the checkpoint's tokenizer in `format`; None when it can."""
    from zoo.tokenizers import HuggingFaceTokenizer

    if format == "keras-hub":
        return "keras-hub's Gemma 3 presets are not written by the zoo"
    if tokenizer is None:
        return "the model has no tokenizer (set model.tokenizer)"
    if not isinstance(tokenizer, HuggingFaceTokenizer):
        return f"model.tokenizer is a {type(tokenizer).__name__}; expected a zoo.tokenizers.HuggingFaceTokenizer"
    return None


# --- keras-hub -----------------------------------------------------------------------------


def keras_hub_incompatibilities(backbone):
    """keras-hub's Gemma3Backbone is not written by the zoo."""
    return ["the zoo writes Gemma 3 as a Hugging Face folder only (zoo.export(model, folder, format='huggingface'))"], []
