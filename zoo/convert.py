"""Weight mappings between zoo models, keras-hub models and Hugging Face tensors.

* `from_keras_hub(backbone)`: a keras-hub GPT-2, BERT or Llama-family
  backbone -> the zoo backbone with the same weights; `to_keras_hub` is
  the inverse.
* `huggingface_names(model)`: the table zoo variable <-> `transformers`
  tensor name of a model; `huggingface_tensors(model)` reads a model into
  a {name: array} dict with transformers' names and shapes,
  `assign_huggingface_tensors` writes one back.

The mappings live in `zoo.checkpoints`, one file per family; these are
their public names.
"""

from zoo.checkpoints import (
    TensorName,
    assign_huggingface_tensors,
    from_keras_hub,
    huggingface_names,
    huggingface_tensors,
    keras_hub_incompatibilities,
    to_keras_hub,
)

__all__ = [
    "TensorName",
    "assign_huggingface_tensors",
    "from_keras_hub",
    "huggingface_names",
    "huggingface_tensors",
    "keras_hub_incompatibilities",
    "to_keras_hub",
]
