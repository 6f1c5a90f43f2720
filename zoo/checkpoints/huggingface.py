"""The Hugging Face `transformers` folder, in and out, for every family.

A folder is `config.json` (its `model_type` picks the family),
`model.safetensors` (or shards named by `model.safetensors.index.json`)
and the family's tokenizer files. `load` reads the config, opens every
weights file, reads the tokenizer and checks every tensor's name and
shape against the family's table before it assigns anything; `export`
writes the same table back.
"""

import json
import warnings

import numpy as np

from zoo.checkpoints import registry
from zoo.models.tensor_names import (
    CheckpointError,
    assign_tensors,
    check_vocabulary,
    fresh_head_warning,
    read_json,
    tensors_of,
    tokenizer_size,
    write_text,
)


def safetensors_files(folder):
    """The weights files of a folder: `model.safetensors`, or the shards of its index."""
    index = folder / "model.safetensors.index.json"
    if (folder / "model.safetensors").is_file():
        return [folder / "model.safetensors"]
    if index.is_file():
        weight_map = read_json(index).get("weight_map") or {}
        return sorted({folder / f for f in weight_map.values()})
    other = [n for n in ("pytorch_model.bin", "tf_model.h5", "flax_model.msgpack") if (folder / n).is_file()]
    hint = (
        f" (the folder has {other[0]}: save it again with `save_pretrained(..., safe_serialization=True)`)"
        if other
        else ""
    )
    raise CheckpointError(f"{folder / 'model.safetensors'}: does not exist; expected the weights in safetensors{hint}.")


class Tensors:
    """The tensors of one or several safetensors files, by name, read on demand."""

    def __init__(self, files):
        from safetensors import safe_open

        self.handles, self.where = [], {}
        for file in files:
            if not file.is_file():
                raise CheckpointError(f"{file}: does not exist; expected a weights shard named in the index.")
            try:
                handle = safe_open(str(file), framework="np")
                keys = list(handle.keys())
                shapes = {key: tuple(handle.get_slice(key).get_shape()) for key in keys}
            except Exception as error:  # safetensors' SafetensorError, OSError
                raise CheckpointError(f"{file}: unreadable safetensors file, truncated or corrupted ({error}).") from None
            self.handles.append(handle)
            for key in keys:
                self.where[key] = (file, handle, shapes[key])

    def names(self):
        return list(self.where)

    def shape(self, name):
        return self.where[name][2]

    def file(self, name):
        return self.where[name][0]

    def get(self, name):
        file, handle, _ = self.where[name]
        try:
            return handle.get_tensor(name)
        except Exception as error:
            raise CheckpointError(f"{file}: cannot read tensor {name!r}, truncated or corrupted ({error}).") from None


def resolve_task(family, task, head, where):
    """The task to build: "auto" is the checkpoint's head, else the family's default."""
    if task == "auto":
        return head or family.DEFAULT_TASK
    if task is not None and task not in family.TASKS:
        raise ValueError(
            f"task={task!r} does not fit {where}, a {family.NAME} checkpoint; expected one of "
            f"{', '.join(map(repr, family.TASKS))}, None (the backbone) or 'auto'."
        )
    return task


def load(folder, task="auto", num_classes=None, dtype=None):
    """A zoo model with the weights and tokenizer of a Hugging Face folder (see `zoo.from_pretrained`)."""
    config_file = folder / "config.json"
    config = read_json(config_file)
    family = registry.for_model_type(config.get("model_type"), config_file)
    zoo_config = family.from_huggingface_config(config, config_file)[2]
    files = safetensors_files(folder)
    tensors = Tensors(files)
    tokenizer = family.read_huggingface_tokenizer(folder, zoo_config["vocabulary_size"], files[0])
    # An encoder-decoder whose source has a tokenizer of its own (Marian's source.spm) reads it too.
    read_source = getattr(family, "read_huggingface_source_tokenizer", None)
    source_tokenizer = read_source and read_source(folder, zoo_config["source_vocabulary_size"], files[0])
    weights_file = files[0] if len(files) == 1 else folder / "model.safetensors.index.json"
    return build(family, config, config_file, tensors, weights_file, tokenizer, source_tokenizer, task, num_classes, dtype)


def build(family, config, config_file, tensors, weights_file, tokenizer, source_tokenizer=None, task="auto",
          num_classes=None, dtype=None, where=None):
    """The zoo model of a transformers `config` with `tensors` (transformers'
    names and shapes: `Tensors` or another source with its `names`, `shape`,
    `file` and `get`), every name and shape checked before anything is
    assigned; the errors name `weights_file`. The GGUF driver builds through
    this too, with `where` (the checkpoint's name in messages) its file."""
    architecture, head, zoo_config = family.from_huggingface_config(config, config_file)
    renamed = {family.checkpoint_name(name): name for name in tensors.names()}  # {table name: file name}
    where = where or config_file.parent

    task = resolve_task(family, task, head, where)
    if task == "classifier":
        checkpoint_classes = family.checkpoint_classes(config) if head == "classifier" else None
        num_classes = num_classes or checkpoint_classes or 2
    model = family.build_task(family.build_backbone(zoo_config, dtype), task, num_classes)
    mapped_head = task in family.HEADS_WITH_WEIGHTS and head == task
    if mapped_head:
        problem = family.head_problem(model, task, lambda name: tensors.shape(renamed[name]) if name in renamed else None)
        if problem:
            fresh_head_warning(where, task, problem)
            mapped_head = False
    elif task in family.HEADS_WITH_WEIGHTS:
        fresh_head_warning(where, task, f"the checkpoint is a {architecture} without a {task} head")
    names = family.import_names(model, renamed, with_head=mapped_head)

    # Check everything before assigning anything.
    wanted = {entry.name for entry in names}
    missing = [n for n in wanted if n not in renamed]
    if missing:
        raise CheckpointError(
            f"{weights_file}: {len(missing)} tensor(s) of {architecture} missing, e.g. {sorted(missing)[:3]}; "
            "expected a complete checkpoint."
        )
    for entry in names:
        found = tensors.shape(renamed[entry.name])
        if tuple(found) != entry.hf_shape():
            raise CheckpointError(
                f"{tensors.file(renamed[entry.name])}: tensor {renamed[entry.name]!r} has shape {tuple(found)}; "
                f"expected {entry.hf_shape()} from {config_file.name}."
            )
    unexpected = [n for n in renamed if n not in wanted and not family.ignorable(n)]
    if unexpected:
        raise CheckpointError(
            f"{weights_file}: {len(unexpected)} tensor(s) that {architecture} does not have, e.g. "
            f"{sorted(unexpected)[:3]}; expected a {architecture} checkpoint."
        )
    values = {entry.name: tensors.get(renamed[entry.name]) for entry in names}
    for copy, original in family.tied_copies(model, renamed):
        if copy in renamed and original in values and not (
            tensors.shape(renamed[copy]) == tensors.shape(renamed[original])
            and np.array_equal(tensors.get(renamed[copy]), values[original])
        ):
            raise CheckpointError(
                f"{tensors.file(renamed[copy])}: {copy!r} differs from {original!r}; the zoo ties the output "
                f"layer to the token embedding, as this {family.NAME} checkpoint's config says."
            )
    assign_tensors(names, values)
    model.tokenizer = tokenizer
    if source_tokenizer is not None:
        model.source_tokenizer = source_tokenizer
    return model


def export(model, folder, tokenizer):
    """Writes `model` as a Hugging Face folder (see `zoo.export`)."""
    from safetensors.numpy import save_file

    from zoo.files import atomic_path

    family = registry.for_model(model)
    backbone = getattr(model, "backbone", model)
    family.check_huggingface_export(backbone)
    hf_config = family.to_huggingface_config(model)
    _, names = family.huggingface_names(model)
    tensors = tensors_of(names)
    problem = family.tokenizer_problem(tokenizer, "huggingface", backbone)
    if problem is None:
        check_vocabulary(tokenizer_size(tokenizer), backbone.vocabulary_size, "model.tokenizer", "the model")
    folder.mkdir(parents=True, exist_ok=True)
    write_text(folder / "config.json", json.dumps(hf_config, indent=2) + "\n")
    with atomic_path(folder / "model.safetensors") as temporary:
        save_file(tensors, str(temporary), metadata={"format": "pt"})  # transformers reads "pt" checkpoints
    if problem is not None:
        warnings.warn(f"{folder}: tokenizer files not written: {problem}.", stacklevel=3)
        return
    family.write_huggingface_tokenizer(tokenizer, folder, model)
