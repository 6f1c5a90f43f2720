"""What the families' weight maps share: the error, reading JSON files,
the tensor-name table and copying Keras variables. It sits beside the
families, below the checkpoint drivers, so that both import it and neither
imports the other.

A family's weight map (`zoo/models/gpt/weight_map.py`, `bert`, `llama`,
`gemma`) describes its checkpoints with a table of `TensorName`s, zoo variable <-> Hugging Face tensor; the
Hugging Face driver checks a folder against that table and assigns it
(`assign_tensors`), the export reads it back (`tensors_of`), so export
then import is the identity.
"""

import dataclasses
import json
import warnings

import numpy as np

from zoo.saving import ModelFileError


class CheckpointError(ModelFileError):
    """A checkpoint folder that cannot be loaded as it is; the message names the file."""


def read_json(path):
    """The JSON of `path`; a CheckpointError naming it when it is missing or not JSON."""
    if not path.is_file():
        raise CheckpointError(f"{path}: does not exist; expected a JSON file of the checkpoint.")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CheckpointError(f"{path}: not valid JSON ({error}).") from None


def tokenizer_settings(folder):
    """A checkpoint folder's tokenizer_config.json as a dict, {} without one."""
    path = folder / "tokenizer_config.json"
    return read_json(path) if path.is_file() else {}


def generation_settings(folder, keys):
    """The `keys` a checkpoint folder sets for generation, as transformers reads them: from
    generation_config.json alone when the folder has one, else from config.json."""
    path = folder / "generation_config.json"
    values = read_json(path if path.is_file() else folder / "config.json")
    return {key: values[key] for key in keys if values.get(key) is not None}


def special_token(settings, key, default):
    """The token tokenizer_config.json names for `key` (a str, or a dict with "content"), else `default`."""
    value = settings.get(key) or default
    return value.get("content", default) if isinstance(value, dict) else value


def config_reader(config, config_file, architecture):
    """`get(key, default)` over a transformers config.json: the value when
    it is set (not None), else `default`; a required key (no default)
    missing is one `CheckpointError` naming the file."""

    def get(key, default=KeyError):
        if key in config and config[key] is not None:
            return config[key]
        if default is KeyError:
            raise CheckpointError(f"{config_file}: no {key!r}; expected the transformers config of {architecture}.")
        return default

    return get


def read_architecture(config, config_file, known):
    """(architecture, `get`) of a transformers config.json: its first
    `architectures` entry (the first of `known` when it lists none),
    refused in one line unless it is one of `known`; `get` as
    `config_reader`'s."""
    known = tuple(known)
    architecture = (config.get("architectures") or [known[0]])[0]
    if architecture not in known:
        raise CheckpointError(
            f"{config_file}: architecture {architecture!r} is not supported for model_type "
            f"{config.get('model_type')!r}; expected one of {', '.join(known)}."
        )
    return architecture, config_reader(config, config_file, architecture)


def refuse_config_value(config, config_file, key, why):
    """The one-line CheckpointError for a config value the zoo does not compute."""
    raise CheckpointError(f"{config_file}: {key}={config[key]!r} is not supported; {why}.")


def require_files(folder, *names, why):
    """A CheckpointError naming the first of `names` missing from `folder`."""
    for name in names:
        if not (folder / name).is_file():
            raise CheckpointError(f"{folder / name}: does not exist; expected {why}.")


def check_vocabulary(tokenizer_size, vocabulary_size, tokenizer_file, weights_file):
    """A tokenizer may have fewer ids than the embedding has rows, never more."""
    if tokenizer_size > vocabulary_size:
        raise CheckpointError(
            f"{tokenizer_file}: the tokenizer has {tokenizer_size} tokens but the embedding table in "
            f"{weights_file} has {vocabulary_size} rows; expected at most {vocabulary_size} tokens."
        )


def tokenizer_size(tokenizer):
    """One more than the largest id of a keras-hub or zoo tokenizer."""
    if hasattr(tokenizer, "vocabulary") and isinstance(tokenizer.vocabulary, dict):
        return max(tokenizer.vocabulary.values()) + 1
    return tokenizer.vocabulary_size()


def fresh_head_warning(where, task, reason):
    warnings.warn(f"{where}: {reason}; the {task} head starts from fresh weights.", stacklevel=4)


def write_text(path, text):
    from zoo.files import write_text as write

    write(path, text)


def to_numpy(variable):
    return np.asarray(variable.numpy() if hasattr(variable, "numpy") else variable)


def copy_dense(target, source):
    """A Keras Dense (or EinsumDense) kernel and bias, reshaped to the target's shapes."""
    target.kernel.assign(to_numpy(source.kernel).reshape(target.kernel.shape))
    target.bias.assign(to_numpy(source.bias).reshape(target.bias.shape))


def copy_layer_norm(target, source):
    target.gamma.assign(to_numpy(source.gamma))
    target.beta.assign(to_numpy(source.beta))


# --- The tensor-name table ---------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class TensorName:
    """One Hugging Face tensor and where it lives in a zoo model.

    `variable` is the zoo variable; `columns` a (start, stop) slice of its
    last axis when several HF tensors share one zoo variable (q, k and v in
    the fused kernel); `transpose` when the HF tensor is the transposed
    Keras kernel (`nn.Linear`'s (out, in)); `shape` the HF tensor's shape
    when it is a reshape of the variable (Marian's (1, V) `final_logits_bias`
    over a (V,) bias).
    """

    name: str
    variable: object
    columns: tuple = None
    transpose: bool = False
    shape: tuple = None

    def hf_shape(self):
        if self.shape is not None:
            return tuple(self.shape)
        shape = list(self.variable.shape)
        if self.columns:
            shape[-1] = self.columns[1] - self.columns[0]
        return tuple(reversed(shape)) if self.transpose else tuple(shape)


def linear(name, dense, bias=True):
    """An `nn.Linear` (out, in) weight, and its bias, over a Keras Dense."""
    names = [TensorName(name + ".weight", dense.kernel, transpose=True)]
    return names + [TensorName(name + ".bias", dense.bias)] if bias else names


def fused_linear(names, dense, widths, bias=True):
    """Several `nn.Linear` weights (Q, K and V) that are column blocks of one fused Dense."""
    entries, start = [], 0
    for name, width in zip(names, widths):
        columns = (start, start + width)
        entries.append(TensorName(name + ".weight", dense.kernel, columns, transpose=True))
        if bias:
            entries.append(TensorName(name + ".bias", dense.bias, columns))
        start += width
    return entries


def tensors_of(names):
    """{name: float32 NumPy array} of a table, in the checkpoint's shapes."""
    tensors = {}
    for entry in names:
        value = to_numpy(entry.variable).astype(np.float32)
        if entry.columns:
            value = value[..., entry.columns[0] : entry.columns[1]]
        value = value.T if entry.transpose else value
        tensors[entry.name] = np.ascontiguousarray(value if entry.shape is None else value.reshape(entry.shape))
    return tensors


def assign_tensors(names, tensors):
    """Writes `tensors` {name: array} into the zoo variables of a table.
    Every name must be there with its checkpoint shape: the caller checks
    that first (naming the file); this only assigns."""
    values = {}
    for entry in names:
        array = np.asarray(tensors[entry.name], dtype=np.float32)
        array = array.T if entry.transpose else array
        if entry.shape is not None:
            array = array.reshape(entry.variable.shape)
        key = id(entry.variable)
        if entry.columns:
            if key not in values:
                values[key] = (entry.variable, np.zeros(entry.variable.shape, np.float32))
            values[key][1][..., entry.columns[0] : entry.columns[1]] = array
        else:
            values[key] = (entry.variable, array)
    for variable, value in values.values():
        variable.assign(value)
