"""Translation scores: sacrebleu's, not hand-written ones.

`translation_scores` gives the figures papers and the WMT tables report:
sacrebleu's default corpus BLEU (cased, 13a tokenization), the same on
lowercased text, and chrF. Hypotheses are expected detokenized, as a
SentencePiece-style tokenizer gives them back ("A man's T-shirt.").

WordPiece detokenization leaves a space around every punctuation mark
("a man ' s t - shirt ."); `detokenize` joins apostrophes and hyphens back
and attaches final punctuation, for translations from a WordPiece model.
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


def corpus_bleu(hypotheses, references, lowercase=False):
    """sacrebleu's corpus BLEU (13a tokenization) against one reference
    each: cased by default, as sacrebleu reports it. Returns a float in
    [0, 100]."""
    import sacrebleu

    return float(sacrebleu.corpus_bleu(list(hypotheses), [list(references)], lowercase=lowercase).score)


def corpus_chrf(hypotheses, references):
    """sacrebleu's corpus chrF (character 6-grams, beta 2). Returns a float
    in [0, 100]."""
    import sacrebleu

    return float(sacrebleu.corpus_chrf(list(hypotheses), [list(references)]).score)


def translation_scores(hypotheses, references):
    """The figures of a translated corpus, each rounded to two decimals as
    reported.

    Args:
        hypotheses: a list of str, detokenized translations.
        references: a list of str, one reference each.

    Returns:
        {"bleu": cased BLEU, "bleu_lowercase": BLEU on lowercased text,
        "chrf": chrF}.
    """
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} translations for {len(references)} references; expected one each.")
    return {
        "bleu": round(corpus_bleu(hypotheses, references), 2),
        "bleu_lowercase": round(corpus_bleu(hypotheses, references, lowercase=True), 2),
        "chrf": round(corpus_chrf(hypotheses, references), 2),
    }
