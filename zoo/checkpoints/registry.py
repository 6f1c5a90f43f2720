"""The families' weight maps, and which one a checkpoint or a model belongs to.

A family's weight map is the `weight_map` module of its folder
(`zoo/models/llama/weight_map.py`), and each has the same names:

* who it is: `NAME`, `MODEL_TYPES` (transformers' `model_type`s),
  `TASKS`, `DEFAULT_TASK`, `HEADS_WITH_WEIGHTS` (tasks whose head has
  weights of its own), `build_backbone(zoo_config,
  dtype)`, `build_task(backbone, task, num_classes)`;
* Hugging Face: `from_huggingface_config(config, config_file)` ->
  (architecture, head, zoo config), `check_huggingface_export(backbone)`,
  `to_huggingface_config(model)`, `huggingface_names(model)` (the export's
  table), `checkpoint_name(name)`, `import_names(model, checkpoint_names,
  with_head)` (the table in a checkpoint's own layout), `ignorable(name)`,
  `tied_copies(checkpoint_names)`, `read_huggingface_tokenizer(folder,
  vocabulary_size, weights_file)`, `tokenizer_problem(tokenizer)`,
  `write_huggingface_tokenizer(tokenizer, folder, model)`, and, for an
  encoder-decoder whose source has a tokenizer of its own (Marian's
  `source.spm`), `read_huggingface_source_tokenizer(folder,
  source_vocabulary_size, weights_file)`;
* keras-hub: `KERAS_HUB_BACKBONES`, `KERAS_HUB_TASKS`,
  `KERAS_HUB_TOKENIZERS` (registered names), `from_keras_hub(backbone,
  dtype, **overrides)`, `to_keras_hub(backbone)`,
  `keras_hub_incompatibilities(backbone)`, `copy_keras_hub_head(model,
  hub_task, task, where)`, `keras_hub_tokenizer(tokenizer)`,
  `keras_hub_task(model, hub_backbone, hub_tokenizer, folder)`, and, for
  an encoder-decoder whose tokenizer also says where the decoder starts,
  `model_tokenizer(hub_tokenizer, hub_backbone)` (the tokenizer the model
  carries, with keras-hub's ids).

A family names its module in its `zoo.families.Family` record
(`weight_map="zoo.models.llama.weight_map"`); `WEIGHT_MAPS` are the modules of
every registered family that has one. The drivers reach a family only
through this registry, and a family never imports the drivers.
"""

from zoo import families
from zoo import models  # noqa: F401  (registers the families)
from zoo.models.tensor_names import CheckpointError

WEIGHT_MAPS = tuple(f.weight_map_module() for f in families.FAMILIES.values() if f.weight_map is not None)

MODEL_TYPES = {model_type: family for family in WEIGHT_MAPS for model_type in family.MODEL_TYPES}
KERAS_HUB_BACKBONES = {name: family for family in WEIGHT_MAPS for name in family.KERAS_HUB_BACKBONES}
KERAS_HUB_TASKS = {name: task for family in WEIGHT_MAPS for name, task in family.KERAS_HUB_TASKS.items()}
KERAS_HUB_TOKENIZERS = {name: files for family in WEIGHT_MAPS for name, files in family.KERAS_HUB_TOKENIZERS.items()}


def for_model_type(model_type, config_file):
    """The family of a Hugging Face `model_type`; a CheckpointError naming `config_file` for another."""
    if model_type not in MODEL_TYPES:
        raise CheckpointError(
            f"{config_file}: model_type {model_type!r} is not supported; expected "
            f"{', '.join(map(repr, MODEL_TYPES))}."
        )
    return MODEL_TYPES[model_type]


def for_keras_hub_backbone(registered_name, config_file):
    """The family of a keras-hub backbone's `registered_name`."""
    if registered_name not in KERAS_HUB_BACKBONES:
        raise CheckpointError(
            f"{config_file}: a keras-hub preset of {registered_name}; expected one of {', '.join(KERAS_HUB_BACKBONES)}."
        )
    return KERAS_HUB_BACKBONES[registered_name]


def for_model(model):
    """The family of a zoo model (a backbone or a task on one); a ValueError for another model."""
    family = families.of_model(model)
    if family is not None and family.weight_map is not None:
        return family.weight_map_module()
    raise ValueError(
        f"Checkpoints exist for zoo GPT, BERT, Llama-family, Gemma 3, Marian, BART and T5 (encoder-decoder) models; "
        f"got a {type(model).__name__}."
    )
