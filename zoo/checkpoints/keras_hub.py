"""The keras-hub preset folder (`save_to_preset`), in and out, for every family.

A preset is `config.json` (the backbone's `registered_name` picks the
family), `model.weights.h5` (or shards named by `model.weights.json`),
`tokenizer.json` with `assets/tokenizer/...`, and optionally a task
(`task.json`, `task.weights.h5`). keras-hub itself loads the preset;
the family copies its weights into the zoo's layers. Every file is
checked before keras-hub reads any.
"""

import warnings

from zoo.checkpoints import registry
from zoo.models.tensor_names import (
    CheckpointError,
    check_vocabulary,
    fresh_head_warning,
    read_json,
    require_files,
    tokenizer_size,
)
from zoo.checkpoints.huggingface import resolve_task


def preset_path(folder):
    """`folder` as keras-hub's `from_preset` should get it: absolute, since
    keras-hub looks a name up among its own presets (and downloads it)
    before it looks for a folder (`gpt2_base_en/` here is a folder)."""
    return str(folder.absolute())


def read_tokenizer(folder):
    """keras-hub's tokenizer of a preset, its files checked first."""
    import keras_hub

    require_files(folder, "tokenizer.json", why="the preset's tokenizer (save_to_preset of a task with a preprocessor)")
    config = read_json(folder / "tokenizer.json")
    assets = folder / "assets" / "tokenizer"
    expected = registry.KERAS_HUB_TOKENIZERS.get(config.get("registered_name"))
    if expected is None:
        raise CheckpointError(
            f"{folder / 'tokenizer.json'}: a {config.get('registered_name')}; expected one of "
            f"{', '.join(registry.KERAS_HUB_TOKENIZERS)}."
        )
    require_files(assets, *expected, why="the tokenizer's vocabulary (keras-hub's save_to_preset writes it)")
    try:
        return keras_hub.tokenizers.Tokenizer.from_preset(preset_path(folder))
    except Exception as error:
        raise CheckpointError(f"{assets}: keras-hub could not load the tokenizer: {error}") from None


def load(folder, task="auto", num_classes=None, dtype=None):
    """A zoo model with the weights and tokenizer of a keras-hub preset (see `zoo.from_pretrained`)."""
    import h5py
    import keras_hub

    config = read_json(folder / "config.json")
    family = registry.for_keras_hub_backbone(config.get("registered_name"), folder / "config.json")
    weights_files = [folder / "model.weights.h5"]
    if (folder / "model.weights.json").is_file():  # sharded
        weights_files = [folder / f for f in read_json(folder / "model.weights.json").get("weight_map", {}).values()]
    task_config = read_json(folder / "task.json") if (folder / "task.json").is_file() else None
    head = registry.KERAS_HUB_TASKS.get(task_config.get("registered_name")) if task_config else None
    if head in family.HEADS_WITH_WEIGHTS:
        weights_files.append(folder / "task.weights.h5")
    for file in dict.fromkeys(weights_files):
        if not file.is_file():
            raise CheckpointError(f"{file}: does not exist; expected the preset's weights (save_to_preset).")
        try:
            with h5py.File(file, "r"):
                pass
        except OSError as error:
            raise CheckpointError(f"{file}: unreadable weights file, truncated or corrupted ({error}).") from None
    tokenizer = read_tokenizer(folder)

    task = resolve_task(family, task, head, folder)
    try:
        if head and head == task:
            hub_task_class = getattr(keras_hub.models, task_config["registered_name"].split(">")[1])
            hub_task = hub_task_class.from_preset(preset_path(folder), preprocessor=None)
            hub_backbone = hub_task.backbone
        else:
            hub_task = None
            hub_backbone = keras_hub.models.Backbone.from_preset(preset_path(folder))
    except Exception as error:  # keras-hub's own message, with the folder
        raise CheckpointError(f"{folder}: keras-hub could not load the preset: {type(error).__name__}: {error}") from None
    check_vocabulary(
        tokenizer.vocabulary_size(), hub_backbone.vocabulary_size, folder / "assets" / "tokenizer", weights_files[0]
    )
    backbone = family.from_keras_hub(hub_backbone, dtype=dtype)

    if task == "classifier":
        num_classes = num_classes or (hub_task.num_classes if hub_task is not None else None) or 2
    model = family.build_task(backbone, task, num_classes)
    if task in family.HEADS_WITH_WEIGHTS:
        if hub_task is None:
            fresh_head_warning(folder, task, f"the preset has no keras-hub {task} task")
        elif task == "classifier" and hub_task.num_classes != num_classes:
            fresh_head_warning(
                folder, task, f"the preset's classifier has {hub_task.num_classes} classes, not {num_classes}"
            )
        else:
            family.copy_keras_hub_head(model, hub_task, task, folder)
    # an encoder-decoder's tokenizer also says where its decoder starts: the family's own, with keras-hub's ids
    model_tokenizer = getattr(family, "model_tokenizer", None)
    model.tokenizer = model_tokenizer(tokenizer, hub_backbone) if model_tokenizer else tokenizer
    return model


def to_keras_hub(backbone):
    """The zoo backbone as the family's keras-hub backbone with the same weights; a
    ValueError naming what keras-hub cannot hold."""
    family = registry.for_model(backbone)
    refusals, _ = family.keras_hub_incompatibilities(backbone)
    if refusals:
        raise ValueError(f"Cannot convert this {type(backbone).__name__} to keras-hub: {'; '.join(refusals)}.")
    return family.to_keras_hub(backbone)


def export(model, folder, tokenizer):
    """Writes `model` as a keras-hub preset (see `zoo.export`)."""
    family = registry.for_model(model)
    backbone = getattr(model, "backbone", model)
    refusals, approximations = family.keras_hub_incompatibilities(backbone)
    if refusals:
        raise ValueError(f"Cannot write this model as a keras-hub preset: {'; '.join(refusals)}.")
    for note in approximations:
        warnings.warn(f"{folder}: {note}.", stacklevel=3)
    problem = family.tokenizer_problem(tokenizer, "keras-hub", backbone)
    hub_tokenizer = None
    if problem is None:
        check_vocabulary(tokenizer_size(tokenizer), backbone.vocabulary_size, "model.tokenizer", "the model")
        hub_tokenizer = family.keras_hub_tokenizer(tokenizer, backbone)
    hub_backbone = family.to_keras_hub(backbone)
    hub = family.keras_hub_task(model, hub_backbone, hub_tokenizer, folder)
    folder.mkdir(parents=True, exist_ok=True)
    if hub is not None:
        hub.save_to_preset(str(folder))
    else:
        hub_backbone.save_to_preset(str(folder))
        if hub_tokenizer is not None:
            hub_tokenizer.save_to_preset(str(folder))
    if problem is not None:
        warnings.warn(f"{folder}: tokenizer files not written: {problem}.", stacklevel=3)
