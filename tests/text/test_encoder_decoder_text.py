"""`zoo.generate` and `zoo.stream` on an encoder-decoder's text: the prompt
is the source, and the decoder runs as the checkpoint's
generation_config.json says (its decoder start, BART's forced `<s>`,
Marian's `<pad>` never chosen, the n-grams it forbids); greedy is
`zoo.translate` with one beam, and the stream is `zoo.generate` in
pieces. On tiny random Marian, BART and T5 folders."""

import keras
import numpy as np
import pytest

import zoo
from tests.checkpoints import bart_checkpoints, marian_checkpoints, t5_checkpoints

pytestmark = pytest.mark.integration  # decoding programs compiled for three checkpoints

FAMILIES = {"marian": marian_checkpoints, "bart": bart_checkpoints, "t5": t5_checkpoints}
SOURCES = ["Ein Mann fährt Fahrrad.", "Die Kinder spielen im Garten.", "Größe über Straße"]


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def model(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp("seq2seq") / request.param
    FAMILIES[request.param].hf_folder(folder)
    return zoo.from_pretrained(str(folder))


def test_greedy_text_is_the_one_beam_translation(model):
    """transformers' greedy search with the checkpoint's settings: zoo.translate's, whose last
    token a `forced_eos_token_id` makes `</s>` (one more token there), and whose forced `<s>`
    (BART) is a new token there and part of the decoder's prompt here."""
    settings = model.tokenizer.generation
    forced = sum(settings.get(key) is not None for key in ("forced_bos_token_id", "forced_eos_token_id"))
    for new in (3, 9):
        texts = zoo.generate(model, SOURCES, max_new_tokens=new)
        assert texts == zoo.translate(model, SOURCES, num_beams=1, max_length=new + forced)
    assert any(texts)


def test_sampled_text_follows_its_seed_and_streams(model):
    options = dict(max_new_tokens=8, sampler="top_k", top_k=20, temperature=1.5, seed=3)
    texts = zoo.generate(model, SOURCES, **options)
    assert texts == zoo.generate(model, SOURCES, **options)
    assert texts[1] == zoo.generate(model, SOURCES[1], **{**options, "seed": 4})  # row r draws with seed + r
    assert "".join(zoo.stream(model, SOURCES[0], **options)) == texts[0]


def test_the_checkpoints_suppressed_and_repeated_tokens_are_never_chosen(model):
    """With `</s>` made unlikely and every suppressed id made the likeliest, greedy decoding picks
    none of them, and no n-gram of `no_repeat_ngram_size` appears twice."""
    settings = model.tokenizer.generation
    suppressed = [ids[0] for ids in settings.get("bad_words_ids") or ()]
    if not suppressed and not settings.get("no_repeat_ngram_size"):
        pytest.skip("this checkpoint neither suppresses tokens nor forbids repeated n-grams")
    bias = getattr(model, "output_bias", None)
    if suppressed and bias is None:
        pytest.skip("no output bias to make the suppressed ids likely")
    original = keras.ops.convert_to_numpy(bias.bias) if bias is not None else None
    try:
        if bias is not None:
            boost = np.zeros_like(original)
            boost[suppressed] = 50.0
            boost[settings["eos_token_id"]] = -50.0
            bias.bias.assign(original + boost)
        out = zoo.generate(model, SOURCES, max_new_tokens=24, logprobs=0)
    finally:
        if bias is not None:
            bias.bias.assign(original)
    n = settings.get("no_repeat_ngram_size") or 0
    for row in out:
        assert not set(row.token_ids) & set(suppressed)
        if n:
            grams = [tuple(row.token_ids[i : i + n]) for i in range(len(row.token_ids) - n + 1)]
            assert len(grams) == len(set(grams)), row.token_ids


def test_beam_search_on_text_is_zoo_translates(model):
    with pytest.raises(ValueError, match="EncoderDecoder's text decodes greedily or samples; its beam search is"):
        zoo.generate(model, SOURCES, max_new_tokens=4, sampler="beam")


def test_zoo_sample_answers_with_an_encoder_decoder(tmp_path, capsys):
    from recipes import cli

    folder = tmp_path / "flan-t5-tiny"
    t5_checkpoints.hf_folder(folder)
    prompt = "summarize: Ein Mann fährt Fahrrad."
    assert cli.main(["sample", str(folder), prompt, "--seed", "1", "--max-length", "12"]) == 0
    expected = zoo.generate(zoo.from_pretrained(str(folder)), prompt, max_new_tokens=12, sampler="temperature",
                            temperature=0.8, seed=1)
    assert capsys.readouterr().out == expected + "\n" and expected
