"""`zoo.stream`: `zoo.generate`'s text, in pieces, as the tokens are chosen.

The pieces joined equal `zoo.generate`'s text for greedy and every seeded
sampler, inside the context window and past it, for GPT, Llama and the
encoder-decoder (a streamed translation is `zoo.translate` with one beam);
stop strings cut where `zoo.generate` cuts; a piece is never half a UTF-8
character nor the start of a stop string; leaving the stream stops the
computation.
"""

import keras
import pytest

import zoo
from zoo.tokenizers import CharTokenizer, WordTokenizer
from zoo.generation import compiled

TEXT = "ROMEO: But soft, what light through yonder window breaks?\nJULIET: Ay me!\n"
CONTEXT = 16
NEW_TOKENS = 40  # the first 10 inside the window of 16, the rest past it
SAMPLERS = [
    dict(),
    dict(sampler="temperature", temperature=1.3, seed=5),
    dict(sampler="top_k", top_k=6, seed=1),
    dict(sampler="top_p", top_p=0.8, temperature=0.9, seed=2),
]


# Gemma 3 with one local layer and one global: both caches, and a third of
# the compile time of the preset's six layers.
SIZES = {"gemma3-nano": dict(num_layers=2, layer_types=["sliding_attention", "full_attention"])}


@pytest.fixture(scope="module", params=["gpt-nano", "llama-nano", "gemma3-nano"])
def lm(request):
    keras.utils.set_random_seed(0)
    tokenizer = CharTokenizer.from_text(TEXT)
    return zoo.build(request.param, "causal_lm", vocabulary_size=tokenizer.vocabulary_size(),
                     max_sequence_length=CONTEXT, tokenizer=tokenizer, **SIZES.get(request.param, {}))


# Every sampler on GPT; greedy and one sampler on the other two families, whose
# caches plug into the same loop.
CASES = [("gpt-nano", options) for options in SAMPLERS] + [
    (name, options) for name in ("llama-nano", "gemma3-nano") for options in (SAMPLERS[0], SAMPLERS[3])
]


@pytest.mark.parametrize("lm, options", CASES, indirect=["lm"],
                         ids=[f"{name}-{options.get('sampler', 'greedy')}" for name, options in CASES])
def test_the_pieces_join_to_zoo_generates_text(lm, options):
    text = zoo.generate(lm, "ROMEO:", max_new_tokens=NEW_TOKENS, **options)
    pieces = list(zoo.stream(lm, "ROMEO:", max_new_tokens=NEW_TOKENS, **options))
    assert "".join(pieces) == text
    assert pieces[0] == "ROMEO:" and len(pieces) == 1 + NEW_TOKENS  # the prompt, then one character a token
    assert "".join(zoo.stream(lm, "ROMEO:", max_new_tokens=NEW_TOKENS, skip_prompt=True, **options)) == text[6:]


def test_the_same_seed_gives_the_same_stream_and_another_seed_another(lm):
    options = dict(max_new_tokens=30, sampler="temperature", temperature=2.0)
    first = "".join(zoo.stream(lm, "ROMEO:", seed=3, **options))
    assert first == "".join(zoo.stream(lm, "ROMEO:", seed=3, **options))
    assert first != "".join(zoo.stream(lm, "ROMEO:", seed=4, **options))


def test_max_length_counts_the_prompt_as_in_zoo_generate(lm):
    assert "".join(zoo.stream(lm, "ROMEO:", max_length=25)) == zoo.generate(lm, "ROMEO:", max_length=25)


def test_a_stop_string_cuts_the_text_where_zoo_generate_cuts_it(lm):
    options = dict(max_new_tokens=NEW_TOKENS, sampler="top_k", top_k=4, seed=7)
    free = zoo.generate(lm, "ROMEO:", **options)[6:]
    stop = free[4:6]
    cut = free.index(stop)
    text = zoo.generate(lm, "ROMEO:", stop=[stop, "never there"], **options)
    assert text == "ROMEO:" + free[:cut]
    pieces = list(zoo.stream(lm, "ROMEO:", stop=[stop, "never there"], **options))
    assert "".join(pieces) == text
    assert not any(stop in piece for piece in pieces)


def test_a_piece_holds_back_what_may_begin_a_stop_string():
    from zoo.text.text_generation import TextRow

    tokenizer = CharTokenizer.from_text("abcd\n")
    row = TextRow(tokenizer, tokenizer("a").tolist(), 1, ("\n\n",), ())
    ids = lambda text: tokenizer(text).tolist()  # noqa: E731
    assert row.update(ids("b"), None) == "b"
    assert row.update(ids("b\n"), None) == ""  # "\n" may begin "\n\n"
    assert row.update(ids("b\nc"), None) == "\nc"  # it did not
    assert row.update(ids("b\nc\n\nd"), None) == "" and row.finish_reason == "stop" and row.text == "b\nc"


def test_a_piece_is_never_half_a_utf8_character():
    from tests.checkpoints.llama_checkpoints import tokenizer_json
    from zoo.tokenizers import HuggingFaceTokenizer
    from zoo.text.text_generation import TextRow

    tokenizer = HuggingFaceTokenizer(tokenizer_json("qwen2"))
    first, second = (tokenizer.token_to_id(byte) for byte in ("Ã", "©"))  # the two bytes of "é", byte-level
    prompt = tokenizer("caf").tolist()
    row = TextRow(tokenizer, prompt, len(prompt), (), ())
    assert row.update([first], None) == ""  # half of "é": held
    assert row.update([first, second], None) == "é"
    assert row.update([first, second, first], "length") == "\ufffd"  # the row ended inside a character


def test_a_streamed_translation_is_zoo_translate_with_one_beam():
    keras.utils.set_random_seed(2)
    tokenizer = WordTokenizer.from_texts(["a dog runs in the park", "ein hund läuft im park", "two men"])
    model = zoo.build("transformer-tiny", vocabulary_size=tokenizer.vocabulary_size(), tokenizer=tokenizer)
    for sentence in ["ein hund läuft", "zwei männer im"]:  # one length: one compiled program
        expected = zoo.translate(model, [sentence], num_beams=1)[0]
        assert "".join(zoo.stream(model, sentence)) == expected
    sampled = "".join(zoo.stream(model, "ein hund", sampler="top_k", top_k=3, seed=1, max_new_tokens=6))
    start, end = tokenizer.get_vocabulary().index("[START]"), tokenizer.get_vocabulary().index("[END]")
    source = tokenizer("ein hund").tolist()
    new = zoo.generate(model, [[start]], 6, sampler="top_k", top_k=3, seed=1, stop_token_ids=[end],
                                  source=[source]).sequences[0]
    new = new[:-1] if new and new[-1] == end else new
    assert sampled == (tokenizer.detokenize(new) if new else "")


def test_leaving_the_stream_stops_the_computation(lm, monkeypatch):
    calls = []
    raw = compiled.Compiled.raw
    monkeypatch.setattr(compiled.Compiled, "raw", lambda self, *arrays: calls.append(1) or raw(self, *arrays))
    stream = zoo.stream(lm, "ROMEO:", max_new_tokens=40)
    pieces = [next(stream) for _ in range(4)]  # the prompt, then three tokens
    assert len(pieces) == 4
    stream.close()
    assert len(calls) == 4  # the prefill and one compiled step per token, nothing after


def test_generate_and_stream_refuse_bad_arguments_in_one_line(lm):
    with pytest.raises(ValueError, match="zoo.stream takes one prompt, a str"):
        zoo.stream(lm, ["ROMEO:", "JULIET:"], max_new_tokens=4)
    with pytest.raises(ValueError, match="sampler='beam' cannot stream"):
        zoo.stream(lm, "ROMEO:", max_new_tokens=4, sampler="beam")
    with pytest.raises(ValueError, match="`stop` must be a str or a list of non-empty str"):
        zoo.generate(lm, "ROMEO:", max_new_tokens=4, stop=[""])
    with pytest.raises(ValueError, match="`stop` strings end a text prompt's continuation"):
        zoo.generate(lm, [[1, 2]], max_new_tokens=4, stop=["\n"])
