"""Sentence embeddings: `zoo.embed`, through a `BertSentenceEncoder` that
carries its tokenizer.

Shape letters: N sentences, d width.
"""

from zoo.models import BertSentenceEncoder
from zoo.text.tokens import bert_outputs


def embed(model, sentences, batch_size=32):
    """Sentence embeddings from a `BertSentenceEncoder` that carries its
    tokenizer, packed as `classify` packs them.

    Args:
        model: a `BertSentenceEncoder`.
        sentences: a list of str.
        batch_size: sentences per forward pass.

    Returns:
        (N, d) float32 NumPy array (unit vectors if the encoder normalizes).

    Example:

    ```python
    import zoo
    from zoo.tokenizers import train_word_piece

    tokenizer = train_word_piece(["a dog runs", "a dog is running"], vocabulary_size=50)
    encoder = zoo.build("bert-tiny", "sentence_encoder", vocabulary_size=tokenizer.vocabulary_size(), tokenizer=tokenizer)
    vectors = zoo.embed(encoder, ["a dog runs", "a dog is running"])  # (2, 32)
    float(vectors[0] @ vectors[1])  # their cosine similarity
    ```
    """
    if not isinstance(model, BertSentenceEncoder):
        raise ValueError(f"zoo.embed needs a BertSentenceEncoder; got a {type(model).__name__}.")
    return bert_outputs(model, sentences, batch_size, "zoo.embed").astype("float32")
