"""Text in, text out: the models that carry a tokenizer, used on strings.

    lm = zoo.load("runs/gpt_char/model.keras")  # a GPTCausalLM with its CharTokenizer
    zoo.generate(lm, "ROMEO:", max_length=300, sampler="top_k", top_k=40, seed=0)  # str
    for piece in zoo.stream(lm, "ROMEO:", max_new_tokens=300):  # the same text, piece by piece
        print(piece, end="")
    zoo.translate(transformer, ["ein hund läuft .", "zwei männer"])  # list of str
    zoo.classify(classifier, ["a gripping film"]).probabilities  # (N, C)
    zoo.embed(encoder, ["a sentence", "another one"])  # (N, d)

A model carries its tokenizer as `model.tokenizer` (see `zoo.models.base`),
saved inside its `.keras` file. These functions tokenize, call the
token-id level (`zoo.generation`'s engine and the models themselves) and
decode, one module per job: `text_generation` (`generate`, `stream` and
`TextGeneration`, the one entry into decoding for text), `translation`,
`classification`, `embedding`; `tokens` is what they share. `generate`
takes text or token ids: on ids it returns the engine's `GenerationOutput`.

Shape letters: N sentences, B batch, W the model's window (its
`max_sequence_length`: the most positions it attends over), V vocabulary,
C classes, d width.
"""

from zoo.text.classification import Classification, classify
from zoo.text.embedding import embed
from zoo.text.text_generation import GeneratedText, TextGeneration, generate, stream
from zoo.text.translation import translate

__all__ = ["Classification", "GeneratedText", "TextGeneration", "classify", "embed", "generate", "stream", "translate"]
