"""Corpus BLEU for the translation recipe: sacrebleu's, not a hand-written one.

WordPiece detokenization leaves a space around every punctuation mark
("a man ' s t - shirt ."). sacrebleu's 13a tokenizer splits most punctuation
itself, but keeps apostrophes and hyphens inside words ("man's", "t-shirt"),
so those two are joined back before scoring; everything else is scored as
sacrebleu sees it. Scores are on lowercased text, as the Multi30k anchors.
"""

import re

_HYPHEN = re.compile(r"(\w) - (?=\w)")
_CLITIC = re.compile(r"(\w) ' (s|t|re|ve|ll|d|m)\b")


def detokenize(text):
    """Joins the word pieces' spaced-out hyphens and clitics:
    "a man ' s t - shirt ." -> "a man's t-shirt ."."""
    return _CLITIC.sub(r"\1'\2", _HYPHEN.sub(r"\1-", text)).strip()


def corpus_bleu(hypotheses, references, lowercase=True):
    """sacrebleu's corpus BLEU (13a tokenization) of detokenized hypotheses
    against one reference each. Returns a float in [0, 100]."""
    import sacrebleu

    hypotheses = [detokenize(h) for h in hypotheses]
    return float(sacrebleu.corpus_bleu(hypotheses, [list(references)], lowercase=lowercase).score)
