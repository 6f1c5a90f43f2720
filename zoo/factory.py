"""`zoo.build`, `zoo.list_presets`, `zoo.describe` and `zoo.plot`."""

import difflib

from zoo import models  # noqa: F401  (registers the families)
from zoo.checkpoints import from_pretrained, is_checkpoint_folder
from zoo.families import FAMILIES
from zoo.families import get as get_family
from zoo.presets import PRESETS


def list_presets(family=None):
    """The preset names, optionally of one family (a name in `zoo.families.FAMILIES`: "gpt", "llama",
    "gemma", "bert", "transformer"); another name is a ValueError naming them."""
    if family is not None:
        get_family(family)
    return [name for name, p in PRESETS.items() if family is None or p["family"] == family]


def preset_info(name, **overrides):
    """A preset's family, description and constructor arguments, without
    building it: `{"name", "family", "description", "config"}` (a copy).
    An unknown name raises `ValueError` with the closest names.

    `overrides` (fields of the family's config: `num_heads=6`, ...) are
    applied and checked as `zoo.build` checks them, in a moment whatever
    the model's size: an unknown field, a size that is not a positive
    integer, a dropout rate outside [0, 1) or sizes that do not fit
    together (heads that do not divide the width) raise a `ValueError`
    that names them.
    """
    preset = _preset(name)
    config = preset["config"]
    if overrides:
        config = FAMILIES[preset["family"]].presets[name].config.replace(**overrides).arguments()
    return {"name": name, "family": preset["family"], "description": preset["description"],
            "config": dict(config)}


def _preset(name):
    if name not in PRESETS:
        close = difflib.get_close_matches(str(name), PRESETS, n=3, cutoff=0.3)
        hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
        raise ValueError(f"Unknown preset {name!r}.{hint} Available: {', '.join(PRESETS)}.")
    return PRESETS[name]


def build(name, task=None, **overrides):
    """Build a zoo model from a preset.

    Args:
        name: a preset name (`zoo.list_presets()`), or a GPT-2, BERT or
            Llama-family checkpoint folder, loaded by
            `zoo.from_pretrained(name, task, **overrides)`.
        task: None for the backbone, or the family's task: "causal_lm"
            (gpt); "masked_lm", "classifier", "sentence_encoder" (bert);
            "seq2seq" (transformer, the same model as None).
        **overrides: constructor arguments of the backbone (e.g.
            `num_layers=2`, `dropout=0.0`, `dtype="mixed_bfloat16"`) or of the
            task (`num_classes`, `pooling`, ...). Unknown names are an error.
            `tokenizer=` (and `source_tokenizer=`) attach tokenizers to the
            model returned (see `ZooModel.tokenizer`).

    Returns:
        A functional `keras.Model`.
    """
    if name not in PRESETS and is_checkpoint_folder(name):  # a keras-hub preset or Hugging Face folder
        return from_pretrained(name, task=task, **overrides)
    preset = _preset(name)
    tokenizers = {key: overrides.pop(key) for key in ("tokenizer", "source_tokenizer") if key in overrides}
    family = FAMILIES[preset["family"]]
    if task is not None and task not in family.tasks:
        known = ", ".join(map(repr, family.tasks))
        raise ValueError(f"Unknown task {task!r} for the {family.name} family of {name!r}; expected one of {known}.")
    spec = family.tasks[task] if task is not None else None
    task_class, task_arguments = (spec.model_class, spec.arguments) if spec else (None, ())
    overrides = family.backbone.config_class.current_names(overrides)
    allowed = set(family.backbone.argument_names()) | set(task_arguments) | {"dtype", "name"}
    unknown = sorted(set(overrides) - allowed)
    if unknown:
        raise ValueError(
            f"Unknown override(s) {unknown} for {name!r} ({family.name} family"
            f"{', task ' + repr(task) if task else ''}). Valid: {', '.join(sorted(allowed))}."
        )
    task_kwargs = {k: overrides.pop(k) for k in task_arguments if k in overrides}
    if "classifier_dropout" in task_kwargs:  # `dropout` itself belongs to the backbone
        task_kwargs["dropout"] = task_kwargs.pop("classifier_dropout")
    config = {**preset["config"], **overrides}
    backbone = family.backbone(**config)
    model = backbone if task_class is None else task_class(backbone, **task_kwargs)
    for key, tokenizer in tokenizers.items():
        setattr(model, key, tokenizer)
    return model


def describe(name, **overrides):
    """Family, sizes, parameter count and training FLOPs per token of a preset.

    FLOPs per token follow Kaplan et al. (2020) / nanoGPT: 6 x non-embedding
    parameters plus the attention term 12 x layers x context x width.
    The count is read off the weights' shapes; no weight is allocated, so a
    billion-parameter preset is described in about a second.
    """
    preset = _preset(name)
    model = _shapes_only(name, **overrides)
    config = {**preset["config"], **overrides}
    params = model.count_params()
    embedding = sum(
        int(w.shape[0]) * int(w.shape[1]) for w in model.weights if "embedding" in w.path and len(w.shape) == 2
    )
    layers, width, context = config["num_layers"], config["hidden_dim"], config["max_sequence_length"]
    non_embedding = params - embedding
    stacks = 2 if getattr(model, "is_encoder_decoder", False) else 1  # the encoder's and the decoder's
    flops = 6 * non_embedding + 12 * layers * context * width * stacks
    return {
        "name": name,
        "family": preset["family"],
        "description": preset["description"],
        "config": config,
        "parameters": params,
        "non_embedding_parameters": non_embedding,
        "training_flops_per_token": flops,
    }


def _shapes_only(name, **overrides):
    """The model of `build(name, **overrides)` with its weights' shapes and
    no values: in a Keras stateless scope the variables defer their
    initializers. Counting a billion parameters takes a second, not a minute
    and the memory; the model cannot run.

    Built on a thread of its own: Keras keeps the deferred variables in
    thread-local state, and a later stateless scope of the caller's thread
    would initialize them all; that state ends with this thread."""
    import threading

    import keras

    built = {}

    def build_shapes():
        try:
            with keras.StatelessScope(initialize_variables=False):
                built["model"] = build(name, **overrides)
        except BaseException as error:  # raised again on the caller's thread
            built["error"] = error

    thread = threading.Thread(target=build_shapes, name="zoo-shapes-only")
    thread.start()
    thread.join()
    if "error" in built:
        raise built["error"]
    return built["model"]


def plot(model_or_name, path, **kwargs):
    """Draw the functional graph with `keras.utils.plot_model` (needs pydot
    and graphviz). Returns the path."""
    import keras

    model = build(model_or_name) if isinstance(model_or_name, str) else model_or_name
    keras.utils.plot_model(model, to_file=str(path), show_shapes=True, expand_nested=False, **kwargs)
    return path
