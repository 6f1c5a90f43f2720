"""What every zoo model shares: its constructor arguments are its config.

A zoo model is a functional Keras model (`keras.Model(inputs, outputs)`)
built inside `__init__`; `call` is the graph's (`ZooModel.call` only
fills in the optional inputs a caller left out). Saving stores the
constructor arguments, loading calls the constructor again, so the `.keras`
format round-trips with `safe_mode=True`.

Every zoo model may carry the tokenizer it was trained with, as keras-hub's
tasks carry their preprocessor: `tokenizer=` in any constructor, or
`model.tokenizer = tokenizer` later (and an encoder-decoder whose source
has its own vocabulary, `source_tokenizer=`). It is saved inside the `.keras` file
(its vocabulary as an asset) and comes back with the model, so that the
text-level functions (`zoo.generate` on text, `zoo.translate`,
`zoo.classify`, `zoo.embed`) need nothing else.

A quantized zoo model (`model.quantize("int8")`, see `ZooModel.quantize`)
records the dtype policy of each quantized layer in its config, by layer
path; loading builds the float model from the constructor arguments and
quantizes those layers again before the weights load, as it enables LoRA.
"""

import contextlib
import functools
import gc
import inspect
import re

import keras

from zoo.layers.token_embedding import eager_values, first_out_of_range
from zoo.models.sharding import get_layout_map

# Keras' weight quantization that needs no calibration data, and the layer types each one covers.
QUANTIZATION_MODES = ("int8", "int4", "float8")
_QUANTIZED_TYPES = {
    "int8": (keras.layers.Dense, keras.layers.EinsumDense, keras.layers.Embedding),
    "int4": (keras.layers.Dense, keras.layers.EinsumDense, keras.layers.Embedding),
    "float8": (keras.layers.Dense, keras.layers.EinsumDense),  # Keras has no float8 Embedding
}


class ZooModel(keras.Model):
    """Base class: records constructor arguments and rebuilds from them."""

    def __new__(cls, *args, **kwargs):
        model = super().__new__(cls, *args, **kwargs)
        # Keras wraps `quantize` on each instance (`Layer.__new__`) and checks the mode against all of
        # its own first, GPTQ and AWQ included: the zoo's modes are checked before that.
        keras_quantize = model.quantize

        @functools.wraps(keras_quantize)
        def quantize(mode=None, config=None, **kwargs):
            check_quantization_mode(mode if mode is not None else getattr(config, "mode", None))
            return keras_quantize(mode=mode, config=config, **kwargs)

        model.quantize = quantize
        return model

    def __init__(self, *args, tokenizer=None, source_tokenizer=None, **kwargs):
        super().__init__(*args, **kwargs)
        self._initialized = True
        # Checked against the model's vocabulary in `_record_config`, once the subclass has set its sizes.
        self._tokenizer, self._source_tokenizer = tokenizer, source_tokenizer

    @property
    def tokenizer(self):
        """The tokenizer the model carries, or None: a keras-hub tokenizer
        (`WordPieceTokenizer`, `BytePairTokenizer` and their subclasses) or
        `zoo.tokenizers.CharTokenizer` / `zoo.tokenizers.WordTokenizer`."""
        return getattr(self, "_tokenizer", None)

    @tokenizer.setter
    def tokenizer(self, tokenizer):
        if tokenizer is not None:
            check_tokenizer(tokenizer, self)
        self._tokenizer = tokenizer

    @property
    def source_tokenizer(self):
        """An encoder-decoder's tokenizer of the source, when it is not
        `tokenizer` (separate vocabularies); None otherwise."""
        return getattr(self, "_source_tokenizer", None)

    @source_tokenizer.setter
    def source_tokenizer(self, tokenizer):
        if tokenizer is not None:
            check_tokenizer(tokenizer, self, "source_tokenizer")
        self._source_tokenizer = tokenizer

    def __call__(self, inputs, *args, **kwargs):
        if isinstance(inputs, dict) and isinstance(self._inputs_struct, dict):
            self._check_input_names(inputs)
            inputs = self._with_optional_inputs(inputs)
        if isinstance(inputs, dict):
            self._check_values(inputs)
        return super().__call__(inputs, *args, **kwargs)

    def call(self, inputs, training=None, mask=None):
        # `training` must stay a named argument: Keras passes it (from `fit`,
        # `evaluate`, `predict` and `__call__`) only to a `call` whose
        # signature names it. `fit` on JAX calls `call` directly
        # (`stateless_call`), not `__call__`.
        return super().call(self._with_optional_inputs(inputs), training=training, mask=mask)

    def _with_optional_inputs(self, inputs):
        """A dict of inputs with each left-out optional input (the model's
        `optional_inputs`) set to None: Keras wants every key."""
        optional = getattr(self, "optional_inputs", ())
        if not optional or not isinstance(inputs, dict) or not isinstance(self._inputs_struct, dict):
            return inputs
        return {**{name: None for name in optional if name in self._inputs_struct}, **inputs}

    def __setattr__(self, name, value):
        # Subclasses assign their layers before the functional `__init__`
        # runs, which the torch backend's `torch.nn.Module.__setattr__`
        # refuses. The functional graph tracks every layer anyway, so until
        # `__init__` is done, route around it (what keras-hub's Backbone does).
        if keras.config.backend() == "torch" and (
            not hasattr(self, "_initialized") or isinstance(getattr(type(self), name, None), property)
        ):
            return object.__setattr__(self, name, value)
        return super().__setattr__(name, value)

    def _check_input_names(self, inputs):
        """A dict of inputs names every input the model takes but its
        optional ones, and no other."""
        expected = set(self._inputs_struct)
        optional = set(getattr(self, "optional_inputs", ()))  # inputs that may be left out
        missing, unexpected = sorted(expected - optional - set(inputs)), sorted(set(inputs) - expected)
        if missing or unexpected:
            raise ValueError(
                f"{type(self).__name__} takes the inputs {sorted(expected)}; "
                + (f"missing {missing}" if missing else "")
                + ("; " if missing and unexpected else "")
                + (f"unexpected {unexpected}" if unexpected else "")
                + "."
            )

    def fit(self, *args, **kwargs):
        self._build_optimizer()
        return super().fit(*args, **kwargs)

    def _build_optimizer(self):
        """The optimizer's variables, made for the trainable variables before
        `fit` traces its first step, as Keras does on JAX and under a
        TensorFlow distribution strategy. On TensorFlow without one, Keras
        leaves them to the first step, and a `tf.function` that creates
        variables while it traces is traced twice: building them first
        saves that second trace, about half of a small model's first `fit`
        (`benchmarks/training/first_fit.py`; with compiled metrics, whose variables
        Keras still makes in the trace, about a fifth)."""
        if keras.config.backend() != "tensorflow" or not self.built or self.optimizer is None or self.optimizer.built:
            return
        with self.distribute_strategy.scope():
            self.optimizer.build(self.trainable_variables)

    def predict(self, x, *args, **kwargs):
        self._check_arrays(x)
        return super().predict(x, *args, **kwargs)

    def evaluate(self, x=None, *args, **kwargs):
        self._check_arrays(x)
        return super().evaluate(x, *args, **kwargs)

    def _check_arrays(self, x):
        """`predict`'s and `evaluate`'s checks of a dict of arrays, before
        Keras traces the graph (on JAX without `__call__`): the input names,
        then the graph run on the arrays' shapes, once per shape, so that a
        static check (an input longer than the model's maximum sequence
        length) raises its own error. TensorFlow retraces a second shape with
        unknown lengths, where that check cannot run and the graph fails
        without saying why."""
        if not isinstance(x, dict) or not isinstance(self._inputs_struct, dict):
            return
        self._check_input_names(x)
        if not all(hasattr(value, "shape") and hasattr(value, "dtype") and len(value.shape) >= 1 for value in x.values()):
            return  # tf.data, generators and the like: Keras reads them itself
        try:
            dtypes = {name: keras.backend.standardize_dtype(value.dtype) for name, value in x.items()}
        except ValueError:
            return
        signature = tuple(sorted((name, tuple(value.shape[1:]), dtypes[name]) for name, value in x.items()))
        checked = self.__dict__.setdefault("_checked_array_shapes", set())
        if signature in checked:
            return
        specs = {name: keras.KerasTensor((None, *value.shape[1:]), dtype=dtypes[name]) for name, value in x.items()}
        try:
            self.compute_output_spec(self._with_optional_inputs(specs))
        except ValueError:
            raise
        except Exception:  # a layer that cannot run symbolically: Keras' own call checks what it can
            return
        checked.add(signature)

    def _check_values(self, inputs):
        """Eager checks of input values a model must refuse (an index out of
        range would be a silent NaN on some backends); none by default."""
        return None  # a body beyond the docstring, which TensorFlow's AutoGraph needs to convert it

    def _set_config(self, config, **derived):
        """A backbone's config (its family's `ModelConfig`): kept as
        `self.config`, echoed by `get_config`, each field an attribute
        (`self.num_layers`), then `derived` attributes (values computed from
        the fields, such as the head width `head_dim` when it is None)."""
        self.config = config
        for name, value in {**config.to_dict(), **derived}.items():
            setattr(self, name, value)
        self._record_config(**config.to_dict())

    def _record_config(self, **arguments):
        self._zoo_config = dict(arguments)
        for key in ("tokenizer", "source_tokenizer"):
            if getattr(self, key) is not None:
                check_tokenizer(getattr(self, key), self, key)

    def get_config(self):
        config = {"name": self.name, "trainable": self.trainable}
        for key, value in self._zoo_config.items():
            if isinstance(value, keras.Model):
                value = keras.saving.serialize_keras_object(value)
            config[key] = value
        if getattr(self, "_lora", None):
            config["lora"] = dict(self._lora)
        quantized = {path: layer.dtype_policy.name for path, layer in _own_leaf_layers(self) if _is_quantized(layer)}
        if quantized:
            config["quantization"] = quantized
        for key in ("tokenizer", "source_tokenizer"):  # the vocabularies travel as assets of the .keras file
            if getattr(self, key) is not None:
                config[key] = keras.saving.serialize_keras_object(getattr(self, key))
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        lora = config.pop("lora", None)
        quantization = config.pop("quantization", None)
        for key in ("tokenizer", "source_tokenizer"):
            if isinstance(config.get(key), dict):
                config[key] = deserialize_tokenizer(config[key])
        for key in cls._nested_models():
            if key in config and isinstance(config[key], dict):
                config[key] = keras.saving.deserialize_keras_object(config[key])
        model = cls(**config)
        for key in cls._nested_models():
            nested = getattr(model, key, None)
            if getattr(nested, "_lora", None):  # building this model on it may have set its layers trainable again
                nested._freeze_all_but_lora(tuple(nested._lora["target_names"]))
        if quantization:  # before the weights load, so the integer weights and their scales have somewhere to go
            model._quantize_layers(quantization)
        if lora:  # before the weights load, so the LoRA matrices have somewhere to go
            model.enable_lora(lora["rank"], tuple(lora["target_names"]))
        return model

    @classmethod
    def _nested_models(cls):
        return ("backbone",)

    def quantize(self, mode=None, config=None, filters=None, **kwargs):
        """Quantize the weights with Keras' quantization, in place.

        Every Dense and EinsumDense layer (attention projections,
        feed-forward, pooler, classifier, an untied output projection) is
        quantized, and under "int8" and "int4" the embeddings too,
        including the token table and so the tied output head (see
        `TokenEmbedding`). LayerNorms, position tables and biases stay in
        float. The model's config records the quantized layers, so a saved
        model reloads quantized (`zoo.load`, `keras.saving.load_model`).

        Args:
            mode: "int8" (weights as int8 with a scale per output unit,
                activations quantized per row on the fly: a quarter of the
                float32 bytes), "int4" (two weights a byte: about an eighth)
                or "float8" (Keras' float8 training of Dense layers: the
                weights stay in float, matmuls run in float8 with scales
                kept per layer; no smaller file). Optional when `config`
                names it.
            config: a `keras.quantizers.QuantizationConfig` (e.g.
                `Int4QuantizationConfig(block_size=128)` for int4 in groups).
            filters: only the layers whose name matches (a regex, a list of
                them, or a callable on the layer), as Keras'.

        Raises:
            ValueError: a mode other than "int8", "int4", "float8" (Keras'
                "gptq" and "awq" need calibration data), or a model that is
                already quantized.
        """
        quantized = [path for path, layer in _leaf_layers(self) if _is_quantized(layer)]
        if quantized:
            raise ValueError(
                f"{type(self).__name__} is already quantized ({quantized[0]} and others); "
                "expected a float model: load or build it again, then quantize."
            )
        types = _QUANTIZED_TYPES[mode]

        def selected(layer):  # only layers Keras can quantize in this mode: no warning for the others
            return isinstance(layer, types) and _matches(layer, filters)

        with _one_garbage_collection():
            super().quantize(mode, config=config, filters=selected, **kwargs)

    def _quantize_layers(self, policies):
        """Quantizes the layers at the given paths as their recorded dtype
        policies say (skipping those a nested model quantized already)."""
        layers = dict(_own_leaf_layers(self))
        for path in policies:
            if path not in layers:
                raise ValueError(
                    f"quantization: the config names the layer {path!r}, which this {type(self).__name__} does "
                    "not have; expected the config the model wrote when it was saved."
                )
        with _one_garbage_collection():
            for path, policy in policies.items():
                if not _is_quantized(layers[path]):
                    layers[path].dtype_policy = policy  # Keras quantizes a built layer given a quantized policy

    def enable_lora(self, rank, target_names=("query_key_value", "query", "key_value")):
        """Parameter-efficient fine-tuning with Keras' own LoRA (Hu et al. 2021).

        Freezes every layer of this model, then enables LoRA of the given rank
        on the projections named in `target_names` (`LORA_PROJECTIONS`):
        "query", "key", "value" (the attention's input projections),
        "output" (the attention's and the feed-forward network's output
        projections, the layers' shared name), "gate" and "intermediate"
        (the feed-forward network's other projections); "query_key_value"
        and "key_value" name the fused projections whole. The default is
        the query/key/value projections (the paper's choice); all six are
        PEFT's usual choice for Llama-style models. Only the low-rank A and
        B matrices train. A head put on top of the model afterwards trains
        as usual. The model's config records it, so a saved model reloads
        with LoRA enabled.

        Self-attention computes Q, K and V in one fused Dense layer (one
        matrix product, the layout the checkpoint maps read): a subset of
        them, say "query" and "value", is a LoRA of the fused kernel whose B
        matrix is held at zero on the other projections' columns (a Keras
        constraint, applied after each update), so the update B·A reaches
        only the chosen columns and the forward pass stays the same.

        Raises:
            ValueError: a name outside `LORA_PROJECTIONS`.
        """
        unknown = [name for name in target_names if name not in LORA_PROJECTIONS]
        if unknown:
            raise ValueError(
                f"LoRA target {unknown[0]!r}: expected names from {', '.join(LORA_PROJECTIONS)}"
            )
        self._lora = {"rank": int(rank), "target_names": list(target_names)}
        for dense, columns in self._lora_targets(target_names):
            dense.enable_lora(rank)
            if columns is not None:
                dense.lora_kernel_b.constraint = LoraColumns(columns, dense.lora_kernel_b.shape[-1])
        self._freeze_all_but_lora(target_names)

    def _lora_targets(self, target_names):
        """(Dense layer, columns) of each projection `target_names` selects:
        columns None for the whole layer, or the (start, stop) output
        column ranges of the chosen projections inside a fused kernel."""
        from zoo.layers import FeedForward, MultiHeadAttention

        wanted = set(target_names)
        for fused, parts in _FUSED_PROJECTIONS.items():
            if fused in wanted:
                wanted.update(parts)
        for layer in self._flatten_layers(include_self=False):
            if isinstance(layer, MultiHeadAttention):
                projections = _attention_projections(layer)
            elif isinstance(layer, FeedForward):
                projections = [(dense, [(dense.name, 0, None)]) for dense in layer._flatten_layers(include_self=False)]
            else:
                continue
            for dense, parts in projections:
                chosen = [(start, stop) for name, start, stop in parts if name in wanted]
                if not chosen or not hasattr(dense, "enable_lora"):
                    continue
                yield dense, (None if len(chosen) == len(parts) else chosen)

    def _freeze_all_but_lora(self, target_names):
        """Every layer frozen but the LoRA projections, of which only the
        low-rank A and B matrices train."""
        self.trainable = True
        for layer in self._flatten_layers(include_self=False):
            layer.trainable = False
        for dense, _ in self._lora_targets(target_names):
            dense.trainable = True
            for weight in (getattr(dense, "_kernel", None), dense.bias):
                if weight is not None:
                    weight.trainable = False

    @staticmethod
    def get_layout_map(device_mesh, model_parallel_dim_name="model", data_parallel_dim_name="batch"):
        """The `keras.distribution.LayoutMap` of model parallelism, as
        keras-hub's backbones have it: `zoo.models.sharding.get_layout_map`
        (every family names its layers alike, so one map serves all)."""
        return get_layout_map(device_mesh, model_parallel_dim_name, data_parallel_dim_name)

    @classmethod
    def argument_names(cls):
        """The constructor arguments a preset or an override may set: a
        backbone's config fields, or a task's named arguments."""
        if getattr(cls, "config_class", None) is not None:
            return cls.config_class.argument_names()
        parameters = inspect.signature(cls.__init__).parameters
        return tuple(name for name in parameters if name not in ("self", "kwargs", "name", "dtype"))


def check_quantization_mode(mode):
    """Raises ValueError unless `mode` is one of QUANTIZATION_MODES."""
    if mode not in QUANTIZATION_MODES:
        why = " (Keras' GPTQ and AWQ need calibration data, which the zoo does not take)" if mode in ("gptq", "awq") else ""
        raise ValueError(
            f"quantize: mode={mode!r} is not supported{why}; expected one of {', '.join(map(repr, QUANTIZATION_MODES))}."
        )


def quantization_mode(model):
    """The quantization mode of a model's quantized layers ("int8", ...),
    or None for a float model."""
    for _, layer in _leaf_layers(model):
        if _is_quantized(layer):
            return layer.dtype_policy.quantization_mode
    return None


# What `ZooModel.enable_lora` targets: the projections by the zoo's layer names, and the fused layers whole.
LORA_PROJECTIONS = ("query", "key", "value", "output", "gate", "intermediate", "query_key_value", "key_value")
_FUSED_PROJECTIONS = {"query_key_value": ("query", "key", "value"), "key_value": ("key", "value")}


def _attention_projections(attention):
    """(Dense, [(projection, first column, end column)]) of a
    MultiHeadAttention: the fused [q | k | v] (self-attention) or [k | v]
    (cross-attention) kernel split into its projections' columns."""
    query_width = attention.num_heads * attention.head_dim
    key_width = attention.num_key_value_heads * attention.head_dim
    if attention.cross_attention:
        fused = [(attention.query_dense, [("query", 0, None)]),
                 (attention.key_value_dense, [("key", 0, key_width), ("value", key_width, 2 * key_width)])]
    else:
        fused = [(attention.query_key_value_dense, [
            ("query", 0, query_width),
            ("key", query_width, query_width + key_width),
            ("value", query_width + key_width, query_width + 2 * key_width),
        ])]
    return fused + [(attention.output_dense, [("output", 0, None)])]


@keras.saving.register_keras_serializable(package="zoo")
class LoraColumns(keras.constraints.Constraint):
    """Holds a LoRA B matrix (rank, units) at zero outside the given
    (start, stop) column ranges, so that the low-rank update of a fused
    kernel reaches only the chosen projections."""

    def __init__(self, columns, units):
        self.columns = [tuple(c) for c in columns]
        self.units = int(units)

    def __call__(self, w):
        import numpy as np

        mask = np.zeros((1, self.units), "float32")
        for start, stop in self.columns:
            mask[:, start:stop] = 1.0
        return w * keras.ops.cast(mask, w.dtype)

    def get_config(self):
        return {"columns": [list(c) for c in self.columns], "units": self.units}


@contextlib.contextmanager
def _one_garbage_collection():
    """Keras runs a full `gc.collect()` for each float weight a layer's
    quantization drops (seconds each in a large process); the objects that
    existed before are frozen meanwhile (`gc.freeze`, which those collections
    skip), and one collection follows."""
    if gc.get_freeze_count():  # someone else's frozen objects: leave them be
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.collect()


def _is_quantized(layer):
    return getattr(layer.dtype_policy, "quantization_mode", None) is not None


def _matches(layer, filters):
    if filters is None:
        return True
    if callable(filters):
        return bool(filters(layer))
    patterns = [filters] if isinstance(filters, str) else list(filters)
    return any(re.search(pattern, layer.name) for pattern in patterns)


def _leaf_layers(layer, prefix="", into_models=True):
    """(path, layer) of every layer without sublayers under `layer`, the
    path joining the names from it down ("block_0/attention/query")."""
    for sublayer in layer._flatten_layers(include_self=False, recursive=False):
        path = prefix + sublayer.name
        if not into_models and isinstance(sublayer, ZooModel):
            continue
        children = list(sublayer._flatten_layers(include_self=False, recursive=False))
        if children:
            yield from _leaf_layers(sublayer, path + "/", into_models)
        else:
            yield path, sublayer


def _own_leaf_layers(model):
    """`_leaf_layers` without those of nested zoo models (a task's
    backbone records its own)."""
    return _leaf_layers(model, into_models=False)


def deserialize_tokenizer(config):
    """A tokenizer from its serialized config; keras-hub is imported only
    when the config names one of its classes (it registers them)."""
    if str(config.get("module", "")).startswith("keras_hub") or str(config.get("registered_name", "")).startswith(
        "keras_hub>"
    ):
        import keras_hub  # noqa: F401
    return keras.saving.deserialize_keras_object(config)


def check_tokenizer(tokenizer, model=None, name="tokenizer"):
    """Raises unless `tokenizer` has a tokenizer's surface and (when both
    are known) no more token ids than `model` embeds (its source
    vocabulary for `name="source_tokenizer"`)."""
    methods = ("tokenize", "detokenize", "vocabulary_size")
    missing = [method for method in methods if not callable(getattr(tokenizer, method, None))]
    if missing or not isinstance(tokenizer, keras.layers.Layer):
        raise TypeError(
            f"{name}: expected a keras-hub tokenizer (e.g. keras_hub.tokenizers.WordPieceTokenizer) or "
            f"zoo.tokenizers.CharTokenizer / WordTokenizer / HuggingFaceTokenizer, a Keras layer with tokenize, "
            f"detokenize and vocabulary_size; got {type(tokenizer).__name__}."
        )
    if name == "source_tokenizer" and not hasattr(model, "source_vocabulary_size"):
        raise ValueError(f"source_tokenizer: a {type(model).__name__} has no source; only an encoder-decoder has one.")
    try:
        size = int(tokenizer.vocabulary_size())
    except Exception:  # no vocabulary yet: it comes with the assets when a file loads
        return
    embedded = _embedded_vocabulary_size(model, "source_vocabulary_size" if name == "source_tokenizer" else "vocabulary_size")
    if embedded is not None and size > embedded:
        raise ValueError(
            f"{name}: it has {size} token ids but {type(model).__name__} embeds only {embedded}; "
            "expected the tokenizer the model was trained with."
        )


def _embedded_vocabulary_size(model, attribute="vocabulary_size"):
    for owner in (model, getattr(model, "backbone", None)):
        size = getattr(owner, attribute, None)
        if isinstance(size, int):
            return size
    return None


def gpt_initializer(stddev=0.02):
    return keras.initializers.RandomNormal(stddev=stddev)


def check_index_range(inputs, name, high, what):
    """Raises if the eager input `name` holds a value outside [0, high).
    Symbolic or traced values are skipped (the data pipeline checks them)."""
    values = eager_values(inputs[name]) if name in inputs else None
    if values is None or values.dtype.kind not in "iu" or not values.size:
        return
    bad = first_out_of_range(values, high)
    if bad is not None:
        raise ValueError(f"{name}: {what} {bad} is out of range; expected values in [0, {high}).")
