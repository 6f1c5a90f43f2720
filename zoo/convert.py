"""Weight mappings between zoo models, keras-hub models and Hugging Face tensors.

* `from_keras_hub(backbone)`: a keras-hub `GPT2Backbone` or `BertBackbone`
  -> the zoo backbone with the same weights; `to_keras_hub(backbone)` is
  the inverse.
* `huggingface_names(model)`: the table zoo variable <-> Hugging Face
  `transformers` tensor name of a GPT-2 or BERT model (backbone or task);
  `huggingface_tensors(model)` reads a model into a {name: array} dict with
  transformers' names and shapes, `assign_huggingface_tensors` writes one
  back. The same table serves both directions, so export then import is
  the identity.

keras-hub keeps separate (d, h, k) query, key and value kernels and
Hugging Face's BERT separate (d_out, d_in) query, key and value matrices;
the zoo fuses them into one (d, 3d) kernel, [q | k | v], which is exactly
GPT-2's Conv1D `c_attn` (in, out) weight. BERT's `nn.Linear` weights are
(out, in), the transpose of a Keras `Dense` kernel.

Folders, files, tokenizers and checks live in `zoo.pretrained`; this file
only maps arrays.
"""

import dataclasses

import numpy as np

from zoo.models import BertBackbone, BertClassifier, BertMaskedLM, GPTBackbone, GPTCausalLM


def _np(variable):
    return np.asarray(variable.numpy() if hasattr(variable, "numpy") else variable)


# --- keras-hub <-> zoo -----------------------------------------------------------


def _copy_dense(target, source):
    target.kernel.assign(_np(source.kernel).reshape(target.kernel.shape))
    target.bias.assign(_np(source.bias).reshape(target.bias.shape))


def _copy_norm(target, source):
    target.gamma.assign(_np(source.gamma))
    target.beta.assign(_np(source.beta))


def _copy_attention(target, source, d):
    """keras MultiHeadAttention (separate EinsumDense q, k, v, output) -> zoo's fused one."""
    kernels = [_np(layer.kernel).reshape(d, d) for layer in (source._query_dense, source._key_dense, source._value_dense)]
    biases = [_np(layer.bias).reshape(d) for layer in (source._query_dense, source._key_dense, source._value_dense)]
    target.query_key_value_dense.kernel.assign(np.concatenate(kernels, axis=1))  # (d, 3d)
    target.query_key_value_dense.bias.assign(np.concatenate(biases))
    target.output_dense.kernel.assign(_np(source._output_dense.kernel).reshape(d, d))
    target.output_dense.bias.assign(_np(source._output_dense.bias))


def _copy_attention_back(target, source, d):
    """zoo's fused attention -> keras MultiHeadAttention's (d, h, k) q, k, v and (h, k, d) output."""
    kernel = _np(source.query_key_value_dense.kernel)  # (d, 3d)
    bias = _np(source.query_key_value_dense.bias)  # (3d,)
    for i, layer in enumerate((target._query_dense, target._key_dense, target._value_dense)):
        layer.kernel.assign(kernel[:, i * d : (i + 1) * d].reshape(layer.kernel.shape))
        layer.bias.assign(bias[i * d : (i + 1) * d].reshape(layer.bias.shape))
    target._output_dense.kernel.assign(_np(source.output_dense.kernel).reshape(target._output_dense.kernel.shape))
    target._output_dense.bias.assign(_np(source.output_dense.bias))


def _copy_block(target, source, d):
    _copy_attention(target.self_attention, source._self_attention_layer, d)
    _copy_norm(target.self_attention_add_norm.norm, source._self_attention_layer_norm)
    _copy_dense(target.feed_forward.intermediate_dense, source._feedforward_intermediate_dense)
    _copy_dense(target.feed_forward.output_dense, source._feedforward_output_dense)
    _copy_norm(target.feed_forward_add_norm.norm, source._feedforward_layer_norm)


def _copy_block_back(target, source, d):
    _copy_attention_back(target._self_attention_layer, source.self_attention, d)
    _copy_norm(target._self_attention_layer_norm, source.self_attention_add_norm.norm)
    _copy_dense(target._feedforward_intermediate_dense, source.feed_forward.intermediate_dense)
    _copy_dense(target._feedforward_output_dense, source.feed_forward.output_dense)
    _copy_norm(target._feedforward_layer_norm, source.feed_forward_add_norm.norm)


def _copy_embeddings(target, source):
    target.embedding.token_embedding.embeddings.assign(_np(source.token_embedding.embeddings))
    target.embedding.position_embedding.position_embeddings.assign(
        _np(source.position_embedding.position_embeddings)
    )


def from_keras_hub(backbone, dtype=None, **overrides):
    """Convert a keras-hub backbone into the zoo model with the same weights.

    Args:
        backbone: a `keras_hub.models.GPT2Backbone` (-> `GPTBackbone`) or a
            `keras_hub.models.BertBackbone` (-> `BertBackbone`).
        dtype: the zoo model's dtype policy; the backbone's by default.
        **overrides: zoo constructor arguments that keras-hub does not
            record, e.g. `activation="gelu"` for a BERT whose checkpoint used
            the exact GELU, or `dropout`.

    Returns:
        The zoo backbone. Put a task on it as usual, e.g.
        `zoo.models.GPTCausalLM(from_keras_hub(hub_backbone))`.

    Example:
    ```python
    hub = keras_hub.models.GPT2Backbone.from_preset("gpt2_base_en")
    lm = zoo.models.GPTCausalLM(zoo.convert.from_keras_hub(hub))
    ```
    """
    kind = type(backbone).__name__
    if kind not in ("GPT2Backbone", "BertBackbone"):
        raise ValueError(f"from_keras_hub converts a keras-hub GPT2Backbone or BertBackbone; got {kind}.")
    dtype = dtype or backbone.dtype_policy.name
    shared = dict(
        vocabulary_size=backbone.vocabulary_size,
        num_layers=backbone.num_layers,
        num_heads=backbone.num_heads,
        hidden_dim=backbone.hidden_dim,
        intermediate_dim=backbone.intermediate_dim,
        max_sequence_length=backbone.max_sequence_length,
        dropout=backbone.dropout,
        activation="gelu_approximate",  # what keras-hub's GPT-2 and BERT compute
        dtype=dtype,
    )
    if kind == "GPT2Backbone":
        model = GPTBackbone(**{**shared, "norm_first": True, "layer_norm_epsilon": 1e-5, **overrides})
        _copy_embeddings(model, backbone)
        for target, source in zip(model.blocks, backbone.transformer_layers):
            _copy_block(target, source, backbone.hidden_dim)
        _copy_norm(model.final_norm, backbone.layer_norm)
        return model
    config = {**shared, "num_segments": backbone.num_segments, "layer_norm_epsilon": 1e-12, **overrides}
    model = BertBackbone(**config)
    _copy_embeddings(model, backbone)
    model.segment_embedding.embeddings.assign(_np(backbone.segment_embedding.embeddings))
    _copy_norm(model.embeddings_norm, backbone.embeddings_layer_norm)
    for target, source in zip(model.blocks, backbone.transformer_layers):
        _copy_block(target, source, backbone.hidden_dim)
    _copy_dense(model.pooler, backbone.pooled_dense)
    return model


def keras_hub_incompatibilities(backbone):
    """What a zoo backbone computes that keras-hub's GPT-2 / BERT cannot.

    Returns (refusals, approximations): lists of sentences. A refusal means
    the weights cannot be placed (no biases, post-LN GPT, another epsilon);
    an approximation means keras-hub computes slightly differently (its
    GELU is always the tanh approximation).
    """
    config = backbone._zoo_config
    refusals, approximations = [], []
    if isinstance(backbone, GPTBackbone):
        if not config.get("use_bias", True):
            refusals.append("the model has no biases (use_bias=False); GPT-2 has biases")
        if not config.get("norm_first", True):
            refusals.append("the model is post-LN (norm_first=False); GPT-2 is pre-LN")
        expected_epsilon = 1e-5
    else:
        expected_epsilon = 1e-12
    if not np.isclose(config["layer_norm_epsilon"], expected_epsilon, rtol=1e-3, atol=0):
        refusals.append(f"layer_norm_epsilon is {config['layer_norm_epsilon']}; keras-hub's is fixed at {expected_epsilon}")
    activation = config.get("activation")
    if activation == "gelu":
        approximations.append(
            "keras-hub computes the tanh-approximate GELU where this model uses the exact one "
            "(activations differ by < 1e-3)"
        )
    elif activation != "gelu_approximate":
        refusals.append(f"activation is {activation!r}; keras-hub's is the GELU")
    return refusals, approximations


def to_keras_hub(backbone):
    """A zoo `GPTBackbone` / `BertBackbone` -> keras-hub's `GPT2Backbone` /
    `BertBackbone` with the same weights (the inverse of `from_keras_hub`).

    Raises a ValueError when the zoo model has something keras-hub's models
    cannot hold (see `keras_hub_incompatibilities`).

    Example:
    ```python
    hub = zoo.convert.to_keras_hub(lm.backbone)
    keras_hub.models.GPT2CausalLM(hub).save_to_preset("my_gpt2")
    ```
    """
    import keras_hub

    refusals, _ = keras_hub_incompatibilities(backbone)
    if refusals:
        raise ValueError(f"Cannot convert this {type(backbone).__name__} to keras-hub: {'; '.join(refusals)}.")
    config = backbone._zoo_config
    shared = dict(
        vocabulary_size=config["vocabulary_size"],
        num_layers=config["num_layers"],
        num_heads=config["num_heads"],
        hidden_dim=config["hidden_dim"],
        intermediate_dim=config["intermediate_dim"],
        dropout=config["dropout"],
        max_sequence_length=config["max_sequence_length"],
        dtype=backbone.dtype_policy.name,
    )
    d = config["hidden_dim"]
    if isinstance(backbone, GPTBackbone):
        hub = keras_hub.models.GPT2Backbone(**shared)
        _copy_embeddings_back(hub, backbone)
        for target, source in zip(hub.transformer_layers, backbone.blocks):
            _copy_block_back(target, source, d)
        _copy_norm(hub.layer_norm, backbone.final_norm)
        return hub
    if isinstance(backbone, BertBackbone):
        hub = keras_hub.models.BertBackbone(num_segments=config["num_segments"], **shared)
        _copy_embeddings_back(hub, backbone)
        hub.segment_embedding.embeddings.assign(_np(backbone.segment_embedding.embeddings))
        _copy_norm(hub.embeddings_layer_norm, backbone.embeddings_norm)
        for target, source in zip(hub.transformer_layers, backbone.blocks):
            _copy_block_back(target, source, d)
        _copy_dense(hub.pooled_dense, backbone.pooler)
        return hub
    raise ValueError(f"to_keras_hub converts a zoo GPTBackbone or BertBackbone; got {type(backbone).__name__}.")


def _copy_embeddings_back(target, source):
    target.token_embedding.embeddings.assign(_np(source.embedding.token_embedding.embeddings))
    target.position_embedding.position_embeddings.assign(_np(source.embedding.position_embedding.position_embeddings))


# --- Hugging Face <-> zoo ----------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class TensorName:
    """One Hugging Face tensor and where it lives in a zoo model.

    `variable` is the zoo variable; `columns` a (start, stop) slice of its
    last axis when several HF tensors share one zoo variable (BERT's q, k, v
    in the fused kernel); `transpose` when the HF tensor is the transposed
    Keras kernel (`nn.Linear`'s (out, in)).
    """

    name: str
    variable: object
    columns: tuple = None
    transpose: bool = False

    def hf_shape(self):
        shape = list(self.variable.shape)
        if self.columns:
            shape[-1] = self.columns[1] - self.columns[0]
        return tuple(reversed(shape)) if self.transpose else tuple(shape)


def _gpt2_names(backbone, prefix="transformer."):
    p = prefix
    names = [
        TensorName(f"{p}wte.weight", backbone.embedding.token_embedding.embeddings),
        TensorName(f"{p}wpe.weight", backbone.embedding.position_embedding.position_embeddings),
    ]
    for i, block in enumerate(backbone.blocks):
        h = f"{p}h.{i}."
        attention, ff = block.self_attention, block.feed_forward
        names += [
            TensorName(h + "ln_1.weight", block.self_attention_add_norm.norm.gamma),
            TensorName(h + "ln_1.bias", block.self_attention_add_norm.norm.beta),
            TensorName(h + "attn.c_attn.weight", attention.query_key_value_dense.kernel),  # Conv1D (d, 3d)
            TensorName(h + "attn.c_attn.bias", attention.query_key_value_dense.bias),
            TensorName(h + "attn.c_proj.weight", attention.output_dense.kernel),
            TensorName(h + "attn.c_proj.bias", attention.output_dense.bias),
            TensorName(h + "ln_2.weight", block.feed_forward_add_norm.norm.gamma),
            TensorName(h + "ln_2.bias", block.feed_forward_add_norm.norm.beta),
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


def _linear(name, dense):
    return [TensorName(name + ".weight", dense.kernel, transpose=True), TensorName(name + ".bias", dense.bias)]


def _norm(name, norm):
    return [TensorName(name + ".weight", norm.gamma), TensorName(name + ".bias", norm.beta)]


def _bert_names(backbone, prefix="", pooler=True):
    p = prefix
    d = backbone.hidden_dim
    names = [
        TensorName(f"{p}embeddings.word_embeddings.weight", backbone.embedding.token_embedding.embeddings),
        TensorName(f"{p}embeddings.position_embeddings.weight", backbone.embedding.position_embedding.position_embeddings),
        TensorName(f"{p}embeddings.token_type_embeddings.weight", backbone.segment_embedding.embeddings),
        *_norm(f"{p}embeddings.LayerNorm", backbone.embeddings_norm),
    ]
    for i, block in enumerate(backbone.blocks):
        layer = f"{p}encoder.layer.{i}."
        qkv = block.self_attention.query_key_value_dense
        for j, part in enumerate(("query", "key", "value")):
            columns = (j * d, (j + 1) * d)
            names += [
                TensorName(f"{layer}attention.self.{part}.weight", qkv.kernel, columns, transpose=True),
                TensorName(f"{layer}attention.self.{part}.bias", qkv.bias, columns),
            ]
        names += [
            *_linear(f"{layer}attention.output.dense", block.self_attention.output_dense),
            *_norm(f"{layer}attention.output.LayerNorm", block.self_attention_add_norm.norm),
            *_linear(f"{layer}intermediate.dense", block.feed_forward.intermediate_dense),
            *_linear(f"{layer}output.dense", block.feed_forward.output_dense),
            *_norm(f"{layer}output.LayerNorm", block.feed_forward_add_norm.norm),
        ]
    if pooler:
        names += _linear(f"{p}pooler.dense", backbone.pooler)
    return names


def huggingface_names(model):
    """The Hugging Face tensor names of a zoo GPT-2 / BERT model.

    Args:
        model: a `GPTBackbone` or `GPTCausalLM` (-> `GPT2LMHeadModel`'s
            names; the LM head is tied to `wte`, so it has no tensor of its
            own), a `BertBackbone` (-> `BertModel`), `BertMaskedLM`
            (-> `BertForMaskedLM`, no pooler), or `BertClassifier`
            (-> `BertForSequenceClassification`).

    Returns:
        (architecture, [TensorName, ...]): the transformers class name and
        the table, in checkpoint order.
    """
    if isinstance(model, GPTCausalLM):
        return "GPT2LMHeadModel", _gpt2_names(model.backbone)
    if isinstance(model, GPTBackbone):
        return "GPT2Model", _gpt2_names(model, prefix="")
    if isinstance(model, BertBackbone):
        return "BertModel", _bert_names(model)
    if isinstance(model, BertMaskedLM):
        head = [
            *_linear("cls.predictions.transform.dense", model.transform.dense),
            *_norm("cls.predictions.transform.LayerNorm", model.transform.norm),
            TensorName("cls.predictions.bias", model.output_bias.bias),
        ]
        return "BertForMaskedLM", _bert_names(model.backbone, "bert.", pooler=False) + head
    if isinstance(model, BertClassifier):
        return "BertForSequenceClassification", _bert_names(model.backbone, "bert.") + _linear(
            "classifier", model.classifier
        )
    raise ValueError(
        "Hugging Face names exist for zoo GPT and BERT models (GPTBackbone, GPTCausalLM, BertBackbone, "
        f"BertMaskedLM, BertClassifier); got {type(model).__name__}."
    )


def huggingface_tensors(model):
    """{transformers tensor name: float32 NumPy array} of a zoo GPT-2 / BERT
    model (see `huggingface_names`), in transformers' shapes."""
    _, names = huggingface_names(model)
    tensors = {}
    for entry in names:
        value = _np(entry.variable).astype(np.float32)
        if entry.columns:
            value = value[..., entry.columns[0] : entry.columns[1]]
        tensors[entry.name] = np.ascontiguousarray(value.T if entry.transpose else value)
    return tensors


def assign_huggingface_tensors(names, tensors):
    """Writes `tensors` {name: array} into the zoo variables of `names`
    (a `huggingface_names` table). Every name must be present with its
    transformers shape; the caller checks that first (`zoo.pretrained`
    names the file), this only assigns."""
    values = {}
    for entry in names:
        array = np.asarray(tensors[entry.name], dtype=np.float32)
        array = array.T if entry.transpose else array
        key = id(entry.variable)
        if entry.columns:
            if key not in values:
                values[key] = (entry.variable, np.zeros(entry.variable.shape, np.float32))
            values[key][1][..., entry.columns[0] : entry.columns[1]] = array
        else:
            values[key] = (entry.variable, array)
    for variable, value in values.values():
        variable.assign(value)
