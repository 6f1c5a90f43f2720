"""Corpus BLEU for the translation recipe: sacrebleu's, not a hand-written one.

WordPiece detokenization leaves a space around every punctuation mark
("a man ' s t - shirt ."). sacrebleu's 13a tokenizer splits most punctuation
itself, but keeps apostrophes and hyphens inside words ("man's", "t-shirt"),
so those two are joined back before scoring; punctuation is attached to the
word before it (13a splits it off again, so that changes no score, only
sacrebleu's "forgot to detokenize?" warning). Scores are on lowercased text, as the Multi30k anchors.
"""

import re

_HYPHEN = re.compile(r"(\w) - (?=\w)")
_CLITIC = re.compile(r"(\w) ' (s|t|re|ve|ll|d|m)\b")
_PUNCTUATION = re.compile(r" ([.,!?;:])(?= |$)")


def detokenize(text):
    """Joins the word pieces' spaced-out hyphens, clitics and final
    punctuation: "a man ' s t - shirt , too ." -> "a man's t-shirt, too."."""
    text = _CLITIC.sub(r"\1'\2", _HYPHEN.sub(r"\1-", text))
    return _PUNCTUATION.sub(r"\1", text).strip()


def corpus_bleu(hypotheses, references, lowercase=True):
    """sacrebleu's corpus BLEU (13a tokenization) of detokenized hypotheses
    against one reference each. Returns a float in [0, 100]."""
    import sacrebleu

    hypotheses = [detokenize(h) for h in hypotheses]
    return float(sacrebleu.corpus_bleu(hypotheses, [list(references)], lowercase=lowercase).score)
