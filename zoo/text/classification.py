"""Classification: `zoo.classify`, sentences in, labels and
probabilities out, through a `BertClassifier` that carries its tokenizer.

Shape letters: N sentences, C classes.
"""

import dataclasses

import numpy as np

from zoo.models import BertClassifier
from zoo.text.tokens import bert_outputs


@dataclasses.dataclass(frozen=True)
class Classification:
    """What `classify` returns.

    Attributes:
        labels: N predicted classes: ints, or the names given.
        probabilities: (N, num_classes) float32, the softmax of the logits.
    """

    labels: list
    probabilities: np.ndarray


def classify(model, sentences, label_names=None, batch_size=32):
    """Classify sentences with a `BertClassifier` that carries its tokenizer.

    Each sentence is packed as the bert_classify recipe trains:
    `[CLS] tokens [SEP]`, cut to the model's window, segment ids 0,
    padded with `[PAD]` (id 0) behind a padding mask; a sentence pair
    `(text, pair)` as `[CLS] text [SEP] pair [SEP]`, segment ids 0 then 1,
    the longer of the two cut first.

    Args:
        model: a `BertClassifier` carrying a WordPiece tokenizer.
        sentences: a list of str, or of (text, pair) tuples of str.
        label_names: optional names of the classes, in class order; by
            default the model's own (`model.label_names`, saved with it).
        batch_size: sentences per forward pass.

    Returns:
        A `Classification`: `labels` and `probabilities` (N, num_classes).

    Example:

    ```python
    import zoo
    from zoo.tokenizers import train_word_piece

    tokenizer = train_word_piece(["a gripping film", "a dull film"], vocabulary_size=50)
    classifier = zoo.build("bert-tiny", "classifier", vocabulary_size=tokenizer.vocabulary_size(), tokenizer=tokenizer)
    result = zoo.classify(classifier, ["a gripping film", "dull"], label_names=["negative", "positive"])
    result.labels  # two of "negative" and "positive" (the model is untrained)
    ```
    """
    if not isinstance(model, BertClassifier):
        raise ValueError(f"zoo.classify needs a BertClassifier; got a {type(model).__name__}.")
    if label_names is None:
        label_names = getattr(model, "label_names", None)
    if label_names is not None and len(label_names) != model.num_classes:
        raise ValueError(
            f"`label_names` has {len(label_names)} names but the model has {model.num_classes} classes."
        )
    logits = bert_outputs(model, sentences, batch_size, "zoo.classify", pairs=True).astype("float64")
    logits -= logits.max(axis=-1, keepdims=True)
    probabilities = np.exp(logits)
    probabilities /= probabilities.sum(axis=-1, keepdims=True)
    classes = probabilities.argmax(axis=-1).tolist()
    labels = [label_names[c] for c in classes] if label_names is not None else classes
    return Classification(labels, probabilities.astype("float32"))
