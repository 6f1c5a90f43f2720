"""GPT-2 checkpoints: `GPTBackbone` / `GPTCausalLM` <-> transformers'
`GPT2LMHeadModel` / `GPT2Model` and keras-hub's `GPT2Backbone` /
`GPT2CausalLM`.

Config in and out, the tensor-name table, the tokenizer (GPT-2's
byte-pair `vocab.json` + `merges.txt`, read by keras-hub's
`GPT2Tokenizer`) and the keras-hub weight copy. GPT-2's Conv1D `c_attn`
(in, out) weight is exactly the zoo's fused (d, 3d) [q | k | v] kernel;
keras-hub keeps separate (d, h, k) q, k, v kernels.
"""

import json

from zoo.models import keras_hub_layers
from zoo.models.tensor_names import (
    CheckpointError,
    TensorName,
    check_vocabulary,
    read_architecture,
    read_json,
    require_files,
    write_text,
)

NAME = "GPT-2"
MODEL_TYPES = ("gpt2",)
TASKS = ("causal_lm",)
DEFAULT_TASK = "causal_lm"
HEADS_WITH_WEIGHTS = ()  # the LM head is the tied token embedding
ARCHITECTURES = {"GPT2LMHeadModel": "causal_lm", "GPT2Model": None}
ACTIVATIONS = {"gelu_new": "gelu_approximate", "gelu_pytorch_tanh": "gelu_approximate", "gelu": "gelu", "relu": "relu"}
KERAS_HUB_BACKBONES = ("keras_hub>GPT2Backbone",)
KERAS_HUB_TASKS = {"keras_hub>GPT2CausalLM": "causal_lm"}
KERAS_HUB_TOKENIZERS = {"keras_hub>GPT2Tokenizer": ("vocabulary.json", "merges.txt")}
END_TOKEN = "<|endoftext|>"


def build_backbone(zoo_config, dtype=None):
    from zoo.models.gpt.model import GPTBackbone

    return GPTBackbone(**zoo_config, dtype=dtype)


def build_task(backbone, task, num_classes=None):
    from zoo.models.gpt.model import GPTCausalLM

    return GPTCausalLM(backbone) if task == "causal_lm" else backbone


# --- Hugging Face: config ------------------------------------------------------------------


def from_huggingface_config(config, config_file):
    """transformers' GPT-2 config -> (architecture, head, zoo config)."""
    architecture, get = read_architecture(config, config_file, ARCHITECTURES)

    for key, expected in (("add_cross_attention", False), ("scale_attn_by_inverse_layer_idx", False),
                          ("tie_word_embeddings", True), ("scale_attn_weights", True)):
        if bool(config.get(key, expected)) != expected:
            raise CheckpointError(f"{config_file}: {key}={config[key]} is not supported; expected {expected}.")
    activation = get("activation_function", "gelu_new")
    if activation not in ACTIVATIONS:
        raise CheckpointError(
            f"{config_file}: activation {activation!r} is not supported; expected one of {', '.join(ACTIVATIONS)}."
        )
    zoo_config = dict(
        vocabulary_size=get("vocab_size"),
        num_layers=get("n_layer"),
        num_heads=get("n_head"),
        hidden_dim=get("n_embd"),
        intermediate_dim=get("n_inner", 4 * get("n_embd")),
        max_sequence_length=get("n_positions"),
        dropout=float(get("resid_pdrop", 0.1)),
        norm_first=True,
        layer_norm_epsilon=float(get("layer_norm_epsilon", 1e-5)),
        activation=ACTIVATIONS[activation],
    )
    return architecture, ARCHITECTURES[architecture], zoo_config


def check_huggingface_export(backbone):
    config = backbone.get_config()
    if not config.get("use_bias", True) or not config.get("norm_first", True):
        raise ValueError("A GPT-2 checkpoint has biases and pre-LN blocks; this GPT has use_bias=False or norm_first=False.")
    if config["activation"] not in ("gelu_approximate", "gelu", "relu"):
        raise ValueError(f"activation {config['activation']!r} has no transformers name; expected a GELU or ReLU.")


def to_huggingface_config(model):
    backbone = getattr(model, "backbone", model)
    config = backbone.get_config()
    architecture, _ = huggingface_names(model)
    return {
        "architectures": [architecture],
        "model_type": "gpt2",
        "vocab_size": config["vocabulary_size"],
        "n_positions": config["max_sequence_length"],
        "n_ctx": config["max_sequence_length"],
        "n_embd": config["hidden_dim"],
        "n_layer": config["num_layers"],
        "n_head": config["num_heads"],
        "n_inner": config["intermediate_dim"],
        "activation_function": {"gelu_approximate": "gelu_new"}.get(config["activation"], config["activation"]),
        "resid_pdrop": config["dropout"],
        "embd_pdrop": config["dropout"],
        "attn_pdrop": config["dropout"],
        "layer_norm_epsilon": config["layer_norm_epsilon"],
        "initializer_range": config.get("initializer_range", 0.02),
        "scale_attn_weights": True,
        "tie_word_embeddings": True,
        "use_cache": True,
    }


# --- Hugging Face: tensor names ------------------------------------------------------------


def backbone_names(backbone, prefix="transformer."):
    p = prefix
    names = [
        TensorName(f"{p}wte.weight", backbone.embedding.token_embedding.embeddings),
        TensorName(f"{p}wpe.weight", backbone.embedding.position_embedding.position_embeddings),
    ]
    for i, block in enumerate(backbone.blocks):
        h = f"{p}h.{i}."
        attention, ff = block.self_attention, block.feed_forward
        names += [
            TensorName(h + "ln_1.weight", block.self_attention_add_norm.layer_norm.gamma),
            TensorName(h + "ln_1.bias", block.self_attention_add_norm.layer_norm.beta),
            TensorName(h + "attn.c_attn.weight", attention.query_key_value_dense.kernel),  # Conv1D (d, 3d)
            TensorName(h + "attn.c_attn.bias", attention.query_key_value_dense.bias),
            TensorName(h + "attn.c_proj.weight", attention.output_dense.kernel),
            TensorName(h + "attn.c_proj.bias", attention.output_dense.bias),
            TensorName(h + "ln_2.weight", block.feed_forward_add_norm.layer_norm.gamma),
            TensorName(h + "ln_2.bias", block.feed_forward_add_norm.layer_norm.beta),
            TensorName(h + "mlp.c_fc.weight", ff.intermediate_dense.kernel),
            TensorName(h + "mlp.c_fc.bias", ff.intermediate_dense.bias),
            TensorName(h + "mlp.c_proj.weight", ff.output_dense.kernel),
            TensorName(h + "mlp.c_proj.bias", ff.output_dense.bias),
        ]
    names += [
        TensorName(f"{p}ln_f.weight", backbone.final_norm.gamma),
        TensorName(f"{p}ln_f.bias", backbone.final_norm.beta),
    ]
    return names


def huggingface_names(model):
    """(architecture, table) of the export: `GPT2LMHeadModel` for a causal LM
    (the head is tied to `wte`, no tensor of its own), `GPT2Model` for a backbone."""
    from zoo.models.gpt.model import GPTCausalLM

    if isinstance(model, GPTCausalLM):
        return "GPT2LMHeadModel", backbone_names(model.backbone)
    return "GPT2Model", backbone_names(model, prefix="")


def _prefix(checkpoint_names):
    return "transformer." if any(n.startswith("transformer.") for n in checkpoint_names) else ""


def checkpoint_name(name):
    return name


def import_names(model, checkpoint_names, with_head):
    """The table in the checkpoint's own layout (the `gpt2` repository has no `transformer.` prefix)."""
    return backbone_names(getattr(model, "backbone", model), prefix=_prefix(checkpoint_names))


def ignorable(name):
    """The causal-mask buffers and the tied head copy transformers writes."""
    return name.endswith((".attn.bias", ".attn.masked_bias")) or name == "lm_head.weight"


def tied_copies(model, checkpoint_names):
    """(head, embedding): a head stored beside the embedding must be the same matrix."""
    return [("lm_head.weight", f"{_prefix(checkpoint_names)}wte.weight")]


# --- Hugging Face: tokenizer ---------------------------------------------------------------


def read_huggingface_tokenizer(folder, vocabulary_size, weights_file):
    import keras_hub

    require_files(folder, "vocab.json", "merges.txt", why="GPT-2's byte-pair vocabulary (vocab.json and merges.txt)")
    vocabulary = read_json(folder / "vocab.json")
    if not isinstance(vocabulary, dict) or END_TOKEN not in vocabulary:
        raise CheckpointError(f"{folder / 'vocab.json'}: expected a {{token: id}} object holding {END_TOKEN!r}.")
    merges = (folder / "merges.txt").read_text(encoding="utf-8").splitlines()
    merges = [m for m in merges if m.strip() and not m.startswith("#version")]
    if any(len(m.split(" ")) != 2 for m in merges):
        bad = next(m for m in merges if len(m.split(" ")) != 2)
        raise CheckpointError(f"{folder / 'merges.txt'}: line {bad!r} is not a merge; expected 'a b' per line.")
    check_vocabulary(max(vocabulary.values()) + 1, vocabulary_size, folder / "vocab.json", weights_file)
    return keras_hub.tokenizers.GPT2Tokenizer(vocabulary=vocabulary, merges=merges)


def tokenizer_problem(tokenizer, format, backbone):
    """Why `tokenizer` cannot be written (in either `format`) as GPT-2's tokenizer files; None when it can."""
    import keras_hub

    if tokenizer is None:
        return "the model has no tokenizer (set model.tokenizer)"
    if not isinstance(tokenizer, keras_hub.tokenizers.BytePairTokenizer):
        return f"model.tokenizer is a {type(tokenizer).__name__}; GPT-2 needs a byte-pair tokenizer"
    if END_TOKEN not in tokenizer.vocabulary:
        return f"the byte-pair vocabulary has no {END_TOKEN!r}, which GPT-2 tokenizers need"
    return None


def write_huggingface_tokenizer(tokenizer, folder, model):
    vocabulary = {token: int(i) for token, i in tokenizer.vocabulary.items()}
    write_text(folder / "vocab.json", json.dumps(vocabulary, ensure_ascii=False))
    write_text(folder / "merges.txt", "#version: 0.2\n" + "".join(f"{m}\n" for m in tokenizer.merges))
    settings = {
        "tokenizer_class": "GPT2Tokenizer",
        "model_max_length": getattr(model, "backbone", model).max_sequence_length,
        "bos_token": END_TOKEN,
        "eos_token": END_TOKEN,
        "unk_token": END_TOKEN,
        "add_prefix_space": bool(getattr(tokenizer, "add_prefix_space", False)),
    }
    write_text(folder / "tokenizer_config.json", json.dumps(settings, indent=2) + "\n")


# --- keras-hub -----------------------------------------------------------------------------


def from_keras_hub(backbone, dtype=None, **overrides):
    """keras-hub's `GPT2Backbone` -> the zoo `GPTBackbone` with the same weights."""
    from zoo.models.gpt.model import GPTBackbone

    model = GPTBackbone(
        **{
            **keras_hub_layers.block_sizes(backbone, dtype),
            "activation": "gelu_approximate",  # what keras-hub's GPT-2 computes
            "norm_first": True,
            "layer_norm_epsilon": 1e-5,
            **overrides,
        }
    )
    keras_hub_layers.copy_embeddings(model, backbone)
    for target, source in zip(model.blocks, backbone.transformer_layers):
        keras_hub_layers.copy_block(target, source, backbone.hidden_dim)
    keras_hub_layers.copy_layer_norm(model.final_norm, backbone.layer_norm)
    return model


def keras_hub_incompatibilities(backbone):
    """(refusals, approximations): what keras-hub's GPT2Backbone cannot hold, or computes slightly differently."""
    config = backbone.get_config()
    refusals = []
    if not config.get("use_bias", True):
        refusals.append("the model has no biases (use_bias=False); GPT-2 has biases")
    if not config.get("norm_first", True):
        refusals.append("the model is post-LN (norm_first=False); GPT-2 is pre-LN")
    more_refusals, approximations = keras_hub_layers.epsilon_and_gelu(config, expected_epsilon=1e-5)
    return refusals + more_refusals, approximations


def to_keras_hub(backbone):
    """The zoo `GPTBackbone` -> keras-hub's `GPT2Backbone` with the same weights."""
    import keras_hub

    config = backbone.get_config()
    hub = keras_hub.models.GPT2Backbone(**keras_hub_layers.hub_sizes(backbone))
    keras_hub_layers.copy_embeddings_back(hub, backbone)
    for target, source in zip(hub.transformer_layers, backbone.blocks):
        keras_hub_layers.copy_block_back(target, source, config["hidden_dim"])
    keras_hub_layers.copy_layer_norm(hub.layer_norm, backbone.final_norm)
    return hub


def copy_keras_hub_head(model, hub_task, task, where):
    """GPT2CausalLM's head is the tied embedding: nothing to copy."""


def keras_hub_tokenizer(tokenizer, backbone):
    """The model's byte-pair tokenizer as keras-hub's GPT2Tokenizer (same vocabulary and merges)."""
    import keras_hub

    if isinstance(tokenizer, keras_hub.tokenizers.GPT2Tokenizer):
        return tokenizer
    return keras_hub.tokenizers.GPT2Tokenizer(vocabulary=dict(tokenizer.vocabulary), merges=list(tokenizer.merges))


def keras_hub_task(model, hub_backbone, hub_tokenizer, folder):
    """keras-hub's GPT2CausalLM over `hub_backbone` for a causal LM; None for a backbone."""
    import keras_hub

    from zoo.models.gpt.model import GPTCausalLM

    if not isinstance(model, GPTCausalLM):
        return None
    preprocessor = hub_tokenizer and keras_hub.models.GPT2CausalLMPreprocessor(
        hub_tokenizer, sequence_length=hub_backbone.max_sequence_length
    )
    return keras_hub.models.GPT2CausalLM(hub_backbone, preprocessor=preprocessor)
