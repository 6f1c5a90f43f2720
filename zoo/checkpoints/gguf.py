"""GGUF, the one-file format of llama.cpp, Ollama and LM Studio, in and out.

The driver goes through the Hugging Face layout the families already
write and read (`huggingface`): the export builds transformers' config,
tensors and tokenizer files, then renames and lays them out as llama.cpp's
own converter (`convert_hf_to_gguf.py`) does; the import reads a GGUF back
into transformers' config, tensors and tokenizer files, and builds the
model through the same checks as a Hugging Face folder.

    GPT-2 (model_type gpt2)             -> architecture "gpt2": fused `attn_qkv`, `position_embd`
    Llama, Mistral, SmolLM2, TinyLlama  -> "llama": `attn_q` / `attn_k` rows permuted for llama.cpp's rotary layout
    Qwen2 (q, k, v biases)              -> "qwen2"
    Qwen3 (q / k norms)                 -> "qwen3"
    Gemma 3 (gemma3_text)               -> "gemma3": norms as 1 + w, the sliding-window pattern per layer

The tokenizer travels as llama.cpp keeps it: a byte-level BPE as
`tokenizer.ggml.model` "gpt2" (tokens, token types, merges and `pre`, the
name of the pre-tokenizer's split pattern), SentencePiece's BPE with byte
fallback as "llama" (pieces, types and scores), with the special token ids,
`add_bos_token` and `tokenizer.chat_template`. Weights are written as
`outtype` ("f32", "f16", "bf16", "q8_0", "q4_0": norms, biases and 1-D
tensors stay f32, and a matrix whose rows do not split into 32-value
blocks falls back to f16, as llama.cpp's converter does) and read back
dequantized to float32 (any type `gguf.quants` dequantizes, K-quants
included). A model quantized by the zoo (Keras' int8 and int4) is read
dequantized, as it computes (`zoo.checkpoints.float_weights`), and
quantized again into `outtype`'s 32-value blocks.
"""

import math
import tempfile
from pathlib import Path

import numpy as np

from zoo.checkpoints import huggingface, registry
from zoo.files import atomic_path
from zoo.checkpoints.float_weights import float_weights
from zoo.checkpoints.gguf_vocabulary import (
    GGUFError,
    read_huggingface_vocabulary,
    write_huggingface_tokenizer_files,
    write_vocabulary,
)
from zoo.models.tensor_names import CheckpointError, check_vocabulary, tensors_of, tokenizer_size

OUTTYPES = ("f32", "f16", "bf16", "q8_0", "q4_0")
FILE_TYPES = {"f32": "ALL_F32", "f16": "MOSTLY_F16", "bf16": "MOSTLY_BF16", "q8_0": "MOSTLY_Q8_0", "q4_0": "MOSTLY_Q4_0"}
# transformers' model_type -> llama.cpp's architecture.
ARCHITECTURES = {"gpt2": "gpt2", "llama": "llama", "mistral": "llama", "qwen2": "qwen2", "qwen3": "qwen3",
                 "gemma3_text": "gemma3"}
# llama.cpp's architecture -> the transformers class the import reads it as.
HF_CLASSES = {"gpt2": "GPT2LMHeadModel", "llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM",
              "qwen3": "Qwen3ForCausalLM", "gemma3": "Gemma3ForCausalLM"}
HF_MODEL_TYPES = {"gpt2": "gpt2", "llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "gemma3": "gemma3_text"}

# GGUF tensor name <-> transformers' (without .weight / .bias), as llama.cpp's gguf-py tensor_mapping pairs them;
# {i} is the layer.
GPT2_NAMES = {
    "token_embd": "transformer.wte",
    "position_embd": "transformer.wpe",
    "blk.{i}.attn_norm": "transformer.h.{i}.ln_1",
    "blk.{i}.attn_qkv": "transformer.h.{i}.attn.c_attn",
    "blk.{i}.attn_output": "transformer.h.{i}.attn.c_proj",
    "blk.{i}.ffn_norm": "transformer.h.{i}.ln_2",
    "blk.{i}.ffn_up": "transformer.h.{i}.mlp.c_fc",
    "blk.{i}.ffn_down": "transformer.h.{i}.mlp.c_proj",
    "output_norm": "transformer.ln_f",
    "output": "lm_head",  # a copy of token_embd where a file has one (checked equal)
}
LLAMA_NAMES = {
    "token_embd": "model.embed_tokens",
    "blk.{i}.attn_norm": "model.layers.{i}.input_layernorm",
    "blk.{i}.attn_q": "model.layers.{i}.self_attn.q_proj",
    "blk.{i}.attn_k": "model.layers.{i}.self_attn.k_proj",
    "blk.{i}.attn_v": "model.layers.{i}.self_attn.v_proj",
    "blk.{i}.attn_output": "model.layers.{i}.self_attn.o_proj",
    "blk.{i}.attn_q_norm": "model.layers.{i}.self_attn.q_norm",
    "blk.{i}.attn_k_norm": "model.layers.{i}.self_attn.k_norm",
    "blk.{i}.ffn_norm": "model.layers.{i}.post_attention_layernorm",
    "blk.{i}.ffn_gate": "model.layers.{i}.mlp.gate_proj",
    "blk.{i}.ffn_up": "model.layers.{i}.mlp.up_proj",
    "blk.{i}.ffn_down": "model.layers.{i}.mlp.down_proj",
    "output_norm": "model.norm",
    "output": "lm_head",
}
GEMMA3_NAMES = {
    **{k: v for k, v in LLAMA_NAMES.items() if k != "output"},
    "blk.{i}.post_attention_norm": "model.layers.{i}.post_attention_layernorm",
    "blk.{i}.ffn_norm": "model.layers.{i}.pre_feedforward_layernorm",
    "blk.{i}.post_ffw_norm": "model.layers.{i}.post_feedforward_layernorm",
}
TENSOR_NAMES = {"gpt2": GPT2_NAMES, "llama": LLAMA_NAMES, "qwen2": LLAMA_NAMES, "qwen3": LLAMA_NAMES,
                "gemma3": GEMMA3_NAMES}
# GPT-2's Conv1D weights are (in, out); GGUF keeps every matrix as (out, in), as nn.Linear.
CONV1D = (".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight")



def require_gguf(error, what):
    """Refuses, in one line, when llama.cpp's `gguf` package is not installed."""
    import importlib.util

    if importlib.util.find_spec("gguf") is None:
        raise error(f"{what} needs llama.cpp's gguf package, which is not installed; expected the gguf extra: "
                    "pip install -e '.[gguf]'.")


# --- Export -------------------------------------------------------------------------------


def export(model, path, tokenizer, outtype="f16"):
    """Writes `model` as one GGUF file at `path` (see `zoo.export`). Every
    refusal comes before anything is written."""
    if outtype not in OUTTYPES:
        raise ValueError(f"outtype={outtype!r}; expected one of {', '.join(map(repr, OUTTYPES))}.")
    require_gguf(ValueError, "GGUF export")
    import gguf

    try:
        family = registry.for_model(model)
    except ValueError as error:
        raise ValueError(f"GGUF export: {error}") from None
    backbone = getattr(model, "backbone", model)
    family.check_huggingface_export(backbone)
    config = family.to_huggingface_config(model)
    kind = config.get("model_type")
    if kind not in ARCHITECTURES:
        raise ValueError(
            f"GGUF export: a {family.NAME} model (model_type {kind!r}) has no llama.cpp architecture here; "
            f"expected a GPT-2 or Llama-family model ({', '.join(ARCHITECTURES)})."
        )
    arch = ARCHITECTURES[kind]
    if arch == "gpt2" and config["activation_function"] != "gelu_new":
        raise ValueError(
            f"GGUF export: llama.cpp's gpt2 computes the tanh GELU, and this GPT's activation is "
            f"{config['activation_function']!r}; expected 'gelu_approximate'."
        )
    if arch == "gemma3" and config["query_pre_attn_scalar"] != config["head_dim"]:
        raise ValueError(
            f"GGUF export: llama.cpp's gemma3 scales attention by 1/sqrt(head_dim), and this model's "
            f"query_pre_attention_scalar is {config['query_pre_attn_scalar']}; expected the head width {config['head_dim']}."
        )
    problem = family.tokenizer_problem(tokenizer, "huggingface", backbone)
    if problem is not None:
        raise ValueError(f"GGUF export: a GGUF file carries its tokenizer, and {problem}.")
    check_vocabulary(tokenizer_size(tokenizer), backbone.vocabulary_size, "model.tokenizer", "the model")
    with tempfile.TemporaryDirectory() as scratch:
        family.write_huggingface_tokenizer(tokenizer, Path(scratch), model)
        vocabulary = read_huggingface_vocabulary(Path(scratch), config["vocab_size"])
    with float_weights(model):  # a quantized model's weights as it computes with them, in float32
        _, names = family.huggingface_names(model)
        tensors = gguf_tensors(arch, config, tensors_of(names))

    path = Path(path)
    with atomic_path(path) as temporary:
        writer = gguf.GGUFWriter(str(temporary), arch)
        writer.add_type(gguf.GGUFType.MODEL)
        writer.add_name(getattr(model, "name", None) or arch)
        write_hyperparameters(writer, arch, config)
        writer.add_file_type(getattr(gguf.LlamaFileType, FILE_TYPES[outtype]))
        writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
        write_vocabulary(writer, vocabulary)
        for name, value in tensors.items():
            data, qtype = encode(name, value, outtype)
            writer.add_tensor(name, data, raw_dtype=qtype)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
    return path


def write_hyperparameters(writer, arch, config):
    """The `{arch}.*` keys llama.cpp reads, from transformers' config (what convert_hf_to_gguf.py writes)."""
    if arch == "gpt2":
        writer.add_block_count(config["n_layer"])
        writer.add_context_length(config["n_positions"])
        writer.add_embedding_length(config["n_embd"])
        writer.add_feed_forward_length(config["n_inner"])
        writer.add_head_count(config["n_head"])
        writer.add_layer_norm_eps(config["layer_norm_epsilon"])
        return
    if arch == "gemma3":
        writer.add_rope_freq_base_swa(config["rope_local_base_freq"])
        writer.add_sliding_window(config["sliding_window"])
        writer.add_sliding_window_pattern([kind == "sliding_attention" for kind in config["layer_types"]])
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(config["num_attention_heads"])
    writer.add_head_count_kv(config["num_key_value_heads"])
    writer.add_rope_freq_base(config["rope_theta"])
    writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
    writer.add_vocab_size(config["vocab_size"])
    head_dim = config["head_dim"]
    writer.add_rope_dimension_count(head_dim)
    if head_dim != config["hidden_size"] // config["num_attention_heads"] or arch in ("qwen3", "gemma3"):
        writer.add_key_length(head_dim)
        writer.add_value_length(head_dim)


def llama3_rope_factors(scaling, theta, dim):
    """llama.cpp's `rope_freqs` for Llama 3's rope scaling: the divisor of each rotary frequency
    (convert_hf_to_gguf.py's LlamaModel.generate_extra_tensors)."""
    frequencies = 1.0 / (theta ** (np.arange(0, dim, 2, dtype=np.float32) / dim))
    factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
    context = scaling["original_max_position_embeddings"]
    factors = []
    for frequency in frequencies:
        wavelength = 2 * math.pi / frequency
        if wavelength < context / high:
            factors.append(1.0)
        elif wavelength > context / low:
            factors.append(factor)
        else:
            smooth = (context / wavelength - low) / (high - low)
            factors.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(factors, np.float32)


def permute_rows(weight, heads):
    """transformers' "rotate half" rows of a q / k projection -> llama.cpp's interleaved pairs
    (convert_hf_to_gguf.py's LlamaModel.permute)."""
    return weight.reshape(heads, 2, weight.shape[0] // heads // 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def unpermute_rows(weight, heads):
    """The inverse of `permute_rows`."""
    return weight.reshape(heads, weight.shape[0] // heads // 2, 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def name_table(arch, num_layers):
    """{transformers name: GGUF name} of every tensor the architecture may have."""
    table = {}
    for gguf_name, hf_name in TENSOR_NAMES[arch].items():
        layers = range(num_layers) if "{i}" in gguf_name else [None]
        for i in layers:
            for suffix in (".weight", ".bias"):
                table[hf_name.format(i=i) + suffix] = gguf_name.format(i=i) + suffix
    return table


def gguf_tensors(arch, config, tensors):
    """{transformers name: array} -> {GGUF name: array} in llama.cpp's layout."""
    num_layers = config["n_layer"] if arch == "gpt2" else config["num_hidden_layers"]
    table = name_table(arch, num_layers)
    out = {}
    for name, value in tensors.items():
        full = name if arch != "gpt2" or name.startswith("transformer.") else "transformer." + name
        if arch == "gpt2" and full.endswith(CONV1D):
            value = value.T
        if arch == "llama" and ".self_attn.q_proj." in full:
            value = permute_rows(value, config["num_attention_heads"])
        if arch == "llama" and ".self_attn.k_proj." in full:
            value = permute_rows(value, config["num_key_value_heads"])
        if arch == "gemma3" and full.endswith("norm.weight"):
            value = value + 1.0  # Gemma scales by (1 + w); llama.cpp's RMSNorm by w, as its converter writes
        out[table[full]] = np.ascontiguousarray(value, dtype=np.float32)
    scaling = config.get("rope_scaling")
    if scaling is not None:
        out["rope_freqs.weight"] = llama3_rope_factors(scaling, config["rope_theta"], config["head_dim"])
    return out


def encode(name, value, outtype):
    """(data, GGML type) of one tensor as llama.cpp's converter writes it: f32
    for 1-D tensors, norms, biases and the position table; the outtype
    otherwise, f16 where the rows do not split into the type's blocks."""
    import gguf

    kinds = {"f32": "F32", "f16": "F16", "bf16": "BF16", "q8_0": "Q8_0", "q4_0": "Q4_0"}
    qtype = getattr(gguf.GGMLQuantizationType, kinds[outtype])
    if value.ndim <= 1 or name.endswith("_norm.weight") or not name.endswith(".weight") or name.startswith("position_embd"):
        qtype = gguf.GGMLQuantizationType.F32
    try:
        return gguf.quants.quantize(value, qtype), qtype
    except gguf.QuantError:
        return gguf.quants.quantize(value, gguf.GGMLQuantizationType.F16), gguf.GGMLQuantizationType.F16


# --- Import -------------------------------------------------------------------------------


def is_gguf_file(path):
    """Whether `path` names a file ending in .gguf."""
    try:
        return str(path).lower().endswith(".gguf") and Path(path).is_file()
    except (TypeError, OSError):
        return False


class Tensors:
    """A GGUF file's tensors under transformers' names and shapes, dequantized
    to float32 and laid out back as transformers has them, on demand
    (`huggingface.build` reads them as a safetensors file's)."""

    def __init__(self, path, reader, arch, config):
        import gguf

        self.path, self.arch, self.config = path, arch, config
        self.by_name = {t.name: t for t in reader.tensors}
        num_layers = config["n_layer"] if arch == "gpt2" else config["num_hidden_layers"]
        table = {g: h for h, g in name_table(arch, num_layers).items()}
        self.where = {}
        unknown = [n for n in self.by_name if n not in table and n != "rope_freqs.weight"]
        if unknown:
            raise GGUFError(
                f"{path}: tensor {unknown[0]!r} is not one of llama.cpp's {arch} tensors the zoo reads; "
                f"expected a {arch} model without extra tensors."
            )
        for name, tensor in self.by_name.items():
            if name == "rope_freqs.weight":
                continue
            if not dequantizable(tensor.tensor_type):
                raise GGUFError(
                    f"{path}: tensor {name!r} is {tensor.tensor_type.name}, which gguf cannot dequantize; "
                    "expected f32, f16, bf16, Q8_0, Q4_0, Q4_K, Q6_K or another type gguf.quants reads."
                )
            shape = tuple(int(n) for n in reversed(tensor.shape))  # ggml's (ne0, ne1) is NumPy's (ne1, ne0)
            hf_name = table[name]
            if arch == "gpt2" and hf_name.endswith(CONV1D):
                shape = shape[::-1]
            self.where[hf_name] = (name, shape)

    def names(self):
        return list(self.where)

    def shape(self, name):
        return self.where[name][1]

    def file(self, name):
        """The file, and the tensor's GGUF name, for messages."""
        return f"{self.path} ({self.where[name][0]})"

    def get(self, name):
        import gguf

        gguf_name, shape = self.where[name]
        tensor = self.by_name[gguf_name]
        try:
            value = gguf.quants.dequantize(np.asarray(tensor.data), tensor.tensor_type).astype(np.float32)
        except Exception as error:
            raise GGUFError(f"{self.path}: cannot read tensor {gguf_name!r} ({error}).") from None
        value = value.reshape(tuple(int(n) for n in reversed(tensor.shape)))
        if self.arch == "gpt2" and name.endswith(CONV1D):
            value = value.T
        if self.arch == "llama" and ".self_attn.q_proj." in name:
            value = unpermute_rows(value, self.config["num_attention_heads"])
        if self.arch == "llama" and ".self_attn.k_proj." in name:
            value = unpermute_rows(value, self.config["num_key_value_heads"])
        if self.arch == "gemma3" and name.endswith("norm.weight"):
            value = value - 1.0
        return np.ascontiguousarray(value)


def dequantizable(qtype):
    """Whether gguf.quants reads this GGML type back to floats (a zero block is tried)."""
    import gguf

    block_size, type_size = gguf.GGML_QUANT_SIZES[qtype]
    try:
        gguf.quants.dequantize(np.zeros((1, type_size), np.uint8), qtype)
    except NotImplementedError:
        return False
    return True


def read_fields(reader):
    """{key: value} of a GGUF file's metadata (strings decoded, arrays as lists)."""
    fields = {}
    for key, field in reader.fields.items():
        if key.startswith("GGUF."):
            continue
        value = field.contents()
        fields[key] = value
    return fields


def open_reader(path):
    from gguf import GGUFReader

    try:
        return GGUFReader(str(path), "r")
    except Exception as error:  # a short or corrupted file fails while its header or tensor table is read
        raise GGUFError(f"{path}: unreadable GGUF file, truncated or corrupted ({type(error).__name__}: {error}).") from None


def huggingface_config(fields, reader, path):
    """transformers' config of the model a GGUF file holds, from its `{arch}.*` keys."""
    arch = fields.get("general.architecture")
    if arch not in HF_CLASSES:
        raise GGUFError(
            f"{path}: general.architecture is {arch!r}; expected one of {', '.join(map(repr, HF_CLASSES))}."
        )

    def get(key, default=KeyError):
        full = f"{arch}.{key}"
        if full not in fields:
            if default is KeyError:
                raise GGUFError(f"{path}: no {full!r}; expected llama.cpp's {arch} hyper-parameters.")
            return default
        return fields[full]

    embedding = next((t for t in reader.tensors if t.name == "token_embd.weight"), None)
    if embedding is None:
        raise GGUFError(f"{path}: no tensor 'token_embd.weight'; expected a complete {arch} model.")
    vocabulary_size = int(embedding.shape[1])
    if arch == "gpt2":
        return arch, {
            "architectures": [HF_CLASSES[arch]], "model_type": "gpt2", "vocab_size": vocabulary_size,
            "n_positions": get("context_length"), "n_ctx": get("context_length"), "n_embd": get("embedding_length"),
            "n_layer": get("block_count"), "n_head": get("attention.head_count"),
            "n_inner": get("feed_forward_length"), "activation_function": "gelu_new",
            "layer_norm_epsilon": decimal(get("attention.layer_norm_epsilon")),
            "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0,
        }
    scaling_type = get("rope.scaling.type", "none")
    if scaling_type not in ("none", None):
        raise GGUFError(f"{path}: {arch}.rope.scaling.type is {scaling_type!r}; expected none (or Llama 3's rope_freqs).")
    heads, width = get("attention.head_count"), get("embedding_length")
    head_dim = get("attention.key_length", width // heads)
    if get("attention.value_length", head_dim) != head_dim:
        raise GGUFError(f"{path}: {arch}.attention.value_length differs from key_length; expected one head width.")
    config = {
        "architectures": [HF_CLASSES[arch]], "model_type": HF_MODEL_TYPES[arch], "vocab_size": vocabulary_size,
        "hidden_size": width, "intermediate_size": get("feed_forward_length"),
        "num_hidden_layers": get("block_count"), "num_attention_heads": heads,
        "num_key_value_heads": get("attention.head_count_kv", heads), "head_dim": head_dim,
        "max_position_embeddings": get("context_length"), "rms_norm_eps": decimal(get("attention.layer_norm_rms_epsilon")),
        "rope_theta": decimal(get("rope.freq_base", 10000.0)), "hidden_act": "silu",
        "tie_word_embeddings": not any(t.name == "output.weight" for t in reader.tensors),
    }
    factors = next((t for t in reader.tensors if t.name == "rope_freqs.weight"), None)
    if factors is not None:
        config["rope_scaling"] = llama3_scaling(np.asarray(factors.data, np.float64), config["rope_theta"], head_dim, path)
    if arch == "qwen2":
        config.update(use_sliding_window=False)
    if arch == "gemma3":
        layers = config["num_hidden_layers"]
        pattern = get("attention.sliding_window_pattern", 6)
        local = list(pattern) if isinstance(pattern, list) else [(i + 1) % pattern != 0 for i in range(layers)]
        if f"{arch}.attention.sliding_window" not in fields:
            local = [False] * layers
        config.update(
            hidden_activation="gelu_pytorch_tanh", layer_types=["sliding_attention" if s else "full_attention" for s in local],
            sliding_window=get("attention.sliding_window", 4096), rope_local_base_freq=decimal(get("rope.freq_base_swa", 10000.0)),
            query_pre_attn_scalar=head_dim, tie_word_embeddings=True, final_logit_softcapping=None,
        )
        if get("final_logit_softcapping", None):
            raise GGUFError(f"{path}: gemma3.final_logit_softcapping is set; expected none, as Gemma 3.")
        del config["hidden_act"]
    return arch, config


def decimal(value):
    """A float32 metadata value as the shortest decimal that rounds to it (1e-06, not 9.99999997e-07)."""
    return float(str(np.float32(value)))


def llama3_scaling(factors, theta, dim, path):
    """Llama 3's rope_scaling that gives these `rope_freqs` (llama.cpp keeps
    only the per-frequency divisors): the factor is the largest divisor, the
    smooth band's divisors fix the band's ends, with low_freq_factor 1 (and
    high_freq_factor 4 where fewer than two frequencies lie in the band);
    checked by recomputing every divisor."""
    frequencies = 1.0 / (theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim))
    wavelengths = 2 * math.pi / frequencies
    factor = float(factors.max())
    if np.allclose(factors, 1.0):
        return None
    smooth = ~np.isclose(factors, 1.0, rtol=1e-6) & ~np.isclose(factors, factor, rtol=1e-6)
    s = (1 / factors[smooth] - 1 / factor) / (1 - 1 / factor)  # the band's interpolation weight per frequency
    if smooth.sum() >= 2:  # s = context / (wavelength (high - low)) - low / (high - low)
        a, b = np.linalg.lstsq(np.stack([1 / wavelengths[smooth], -np.ones(int(smooth.sum()))], 1), s, rcond=None)[0]
        low, high, context = 1.0, 1.0 + 1.0 / b, a / b
    elif smooth.sum() == 1:
        low, high = 1.0, 4.0
        context = float(wavelengths[smooth][0] * (3 * s[0] + 1))
    else:
        low, high = 1.0, 4.0
        kept, divided = wavelengths[np.isclose(factors, 1.0)], wavelengths[np.isclose(factors, factor)]
        bounds = (4 * kept.max() if len(kept) else 1.0, divided.min() if len(divided) else 4 * kept.max() * 2)
        context = math.sqrt(bounds[0] * bounds[1])
    context = round(context) if abs(context - round(context)) < 1e-3 else context
    scaling = {"rope_type": "llama3", "factor": factor, "low_freq_factor": low, "high_freq_factor": float(high),
               "original_max_position_embeddings": context}
    if not np.allclose(llama3_rope_factors(scaling, theta, dim), factors, rtol=1e-5):
        raise GGUFError(f"{path}: rope_freqs.weight is not Llama 3's rope scaling; expected llama3 frequency factors.")
    return scaling


def load(path, task="auto", num_classes=None, dtype=None):
    """A zoo model with the weights and tokenizer of a GGUF file (see `zoo.from_pretrained`)."""
    path = Path(path)
    require_gguf(GGUFError, str(path))
    reader = open_reader(path)
    fields = read_fields(reader)
    arch, config = huggingface_config(fields, reader, path)
    family = registry.for_model_type(config["model_type"], path)
    try:
        zoo_config = family.from_huggingface_config(config, path)[2]
    except CheckpointError as error:
        raise GGUFError(str(error)) from None
    tensors = Tensors(path, reader, arch, config)
    with tempfile.TemporaryDirectory() as scratch:
        write_huggingface_tokenizer_files(fields, Path(scratch), path)
        try:
            tokenizer = family.read_huggingface_tokenizer(Path(scratch), zoo_config["vocabulary_size"], path)
        except CheckpointError as error:
            raise GGUFError(f"{path}: its tokenizer: {str(error).split(': ', 1)[-1]}") from None
    return huggingface.build(family, config, path, tensors, path, tokenizer, task=task, num_classes=num_classes,
                             dtype=dtype, where=path)
