"""Constrained decoding (`zoo.generation.constraints`): on random-weight
models, where nothing but the mask keeps the output valid, every seeded
sample follows its JSON schema, regex or choice list; the mask in the
compiled step is llguidance's own; a free row beside constrained ones
picks the tokens it picks alone; one compiled program serves every
grammar; each tokenizer kind reads its vocabulary as bytes; bad input is
refused in one line before decoding."""

import json
import re
import sys
from pathlib import Path

import jsonschema
import keras
import numpy as np
import pytest
from keras import ops

import zoo
from zoo.generation import Decoding, constraints, trace_count
from zoo.tokenizers import CharTokenizer, HuggingFaceTokenizer, WordTokenizer

llguidance = pytest.importorskip("llguidance")

SAVED = Path(__file__).resolve().parents[1] / "tokenizers" / "saved"
CHARS = '{}[]":,.-0123456789abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ_\n'

# Nested objects, an array, enums, an integer and a number, required fields;
# bounded so that its shortest completion fits the budget.
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 6},
        "kind": {"enum": ["cat", "dog", "fox"]},
        "age": {"type": "integer", "minimum": 0, "maximum": 30},
        "weight": {"type": "number", "minimum": 0, "maximum": 100},
        "owner": {
            "type": "object",
            "properties": {"id": {"type": "integer", "minimum": 1, "maximum": 999},
                           "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3}},
            "required": ["id", "tags"],
            "additionalProperties": False,
        },
    },
    "required": ["name", "kind", "age", "owner"],
    "additionalProperties": False,
}
REGEX = r"[A-Z][a-z]{1,6}-[0-9]{2,4}(\.[0-9])?"
CHOICES = ["yes", "no", "maybe so", "not at all"]
SAMPLES = 50


@pytest.fixture(scope="module")
def char_lm():
    keras.utils.set_random_seed(0)
    tokenizer = CharTokenizer.from_text(CHARS).with_special_tokens(["<|end|>"])
    return zoo.build("gpt-nano", "causal_lm", vocabulary_size=tokenizer.vocabulary_size(), tokenizer=tokenizer,
                     max_sequence_length=256)


def _end(lm):
    return lm.tokenizer.vocabulary.special_tokens.index("<|end|>") + len(lm.tokenizer.vocabulary.characters)


def _sampled(lm, budget, **constraint):
    """SAMPLES seeded samples at temperature 1: their new texts."""
    texts = zoo.generate(lm, ["x"] * SAMPLES, max_new_tokens=budget, sampler="temperature", temperature=1.0, seed=0,
                         stop_token_ids=[_end(lm)], **constraint)
    return [text[1:] for text in texts]


def test_every_sample_validates_against_a_nested_schema(char_lm):
    texts = _sampled(char_lm, 200, json_schema=SCHEMA)
    for text in texts:
        jsonschema.validate(json.loads(text), SCHEMA)
    assert len(set(texts)) > SAMPLES // 2  # sampled, not one forced text


def test_every_sample_matches_a_regex_and_a_choice(char_lm):
    for text in _sampled(char_lm, 24, regex=REGEX):
        assert re.fullmatch(REGEX, text), text
    chosen = _sampled(char_lm, 24, choices=CHOICES)
    assert set(chosen) <= set(CHOICES) and len(set(chosen)) > 1


def test_without_the_mask_the_random_model_is_not_valid(char_lm):
    """The goal's model needs the mask: free, its samples are not JSON."""
    texts = zoo.generate(char_lm, ["x"] * 8, max_new_tokens=40, sampler="temperature", seed=0)
    assert not any(_is_json(text[1:]) for text in texts)


def _is_json(text):
    try:
        json.loads(text)
        return True
    except ValueError:
        return False


def test_a_pydantic_model_and_a_json_object(char_lm):
    pydantic = pytest.importorskip("pydantic")

    class Pet(pydantic.BaseModel):
        model_config = pydantic.ConfigDict(extra="forbid")  # no other keys: a bounded output
        kind: str = pydantic.Field(max_length=4)
        legs: int = pydantic.Field(ge=0, le=8)

    for text in _sampled(char_lm, 60, json_schema=Pet)[:10]:
        Pet.model_validate_json(text)
    decoding = Decoding(char_lm, [char_lm.tokenizer("x").tolist()] * 8, 80, dict(sampler="temperature", seed=3),
                        stop_token_ids=[_end(char_lm)], constraints=constraints.grammar(json_object=True)).run()
    stopped = [row for row, reason in enumerate(decoding.finish_reasons) if reason == "stop"]
    assert stopped
    for row in stopped:
        ids = [t for t in decoding.new_tokens[row] if t != _end(char_lm)]
        assert isinstance(json.loads(char_lm.tokenizer.detokenize(ids)), dict)


def test_greedy_every_sampler_and_the_controls_keep_to_the_mask(char_lm):
    letters = [CHARS.index(c) for c in "xyz"]  # a large bias towards tokens the regex never allows
    settings = [dict(sampler="greedy"), dict(sampler="top_k", top_k=5), dict(sampler="top_p", top_p=0.5),
                dict(sampler="temperature", temperature=3.0, repetition_penalty=1.5, presence_penalty=1.0,
                     frequency_penalty=0.5, min_p=0.01, logit_bias={t: 50.0 for t in letters},
                     no_repeat_ngram_size=2)]
    for setting in settings:
        texts = zoo.generate(char_lm, ["ab", "c"], max_new_tokens=12, seed=1, regex=r"[0-9]{3}(, [0-9]{3})?",
                             stop_token_ids=[_end(char_lm)], **setting)
        for prompt, text in zip(["ab", "c"], texts):
            assert re.fullmatch(r"[0-9]{3}(, [0-9]{3})?", text[len(prompt):]), (setting, text)


def test_beam_search_is_refused_in_one_line(char_lm):
    with pytest.raises(ValueError, match="not taken by beam search") as error:
        zoo.generate(char_lm, "ab", max_new_tokens=4, sampler="beam", regex="[0-9]+")
    assert "\n" not in str(error.value)


def test_a_free_row_beside_constrained_ones_picks_its_own_tokens(char_lm):
    prompt = char_lm.tokenizer("ab").tolist()
    sampling = dict(sampler="top_k", top_k=8, seed=[5, 6, 7])
    constrained = Decoding(char_lm, [prompt] * 3, 30, sampling,
                           constraints=[constraints.grammar(regex="[a-z]{5}"), None,
                                        constraints.grammar(json_schema=SCHEMA)]).run()
    alone = Decoding(char_lm, [prompt], 30, dict(sampler="top_k", top_k=8, seed=6)).run()
    assert constrained.new_tokens[1] == alone.new_tokens[0]
    assert len(constrained.new_tokens[1]) == 30 and constrained.finish_reasons[1] == "length"
    assert re.fullmatch("[a-z]{5}", char_lm.tokenizer.detokenize(constrained.new_tokens[0]))
    assert constrained.finish_reasons[0] == "stop"  # the regex is whole: nothing more can follow


def test_one_compiled_program_serves_every_grammar(char_lm):
    prompt = char_lm.tokenizer("abc").tolist()
    run = lambda grammars: Decoding(char_lm, [prompt] * 2, 20, dict(sampler="top_k", top_k=4, seed=0),  # noqa: E731
                                    constraints=grammars).run()
    run([constraints.grammar(regex="[0-9]+"), None])
    before = trace_count()
    for grammars in ([None, constraints.grammar(choices=CHOICES)],
                     [constraints.grammar(json_schema=SCHEMA), constraints.grammar(regex="[a-z]+ [a-z]+")],
                     [constraints.grammar(grammar='start: "a" b\nb: "b"+'), constraints.grammar(json_object=True)]):
        run(grammars)
    assert trace_count() == before


def test_the_mask_is_llguidance_own_on_recorded_steps(char_lm):
    """`constraints.apply` (the compiled step's) against llguidance's NumPy
    reference, on the masks of a real decoding's steps."""
    from llguidance.numpy import apply_token_bitmask_inplace

    vocabulary = char_lm.vocabulary_size
    rows = Decoding(char_lm, [char_lm.tokenizer("ab").tolist()] * 2, 40, dict(sampler="temperature", seed=2),
                    constraints=[constraints.grammar(json_schema=SCHEMA), None])
    recorded = []
    original = rows.constraints.arrays
    rows.constraints.arrays = lambda: recorded.append(np.array(original()[0])) or original()
    rows.run()
    assert len(recorded) > 10
    rng = np.random.default_rng(0)
    for bitmask in recorded:
        logits = rng.normal(size=(2, vocabulary)).astype("float32")
        expected = logits.copy()
        apply_token_bitmask_inplace(expected[:1], bitmask[:1])  # row 0 constrained, row 1 free
        got = ops.convert_to_numpy(constraints.apply(ops.convert_to_tensor(logits), bitmask, np.array([True, False])))
        masked = np.isinf(expected)
        assert masked[0].any() and not masked[1].any()
        np.testing.assert_array_equal(got[masked], constraints.REMOVED)
        np.testing.assert_array_equal(got[~masked], logits[~masked])


def test_a_stop_token_only_where_the_grammar_accepts(char_lm):
    end = _end(char_lm)
    bias = {end: 40.0}  # the model would end at once
    texts = zoo.generate(char_lm, ["a"] * 6, max_new_tokens=20, sampler="temperature", seed=0, stop_token_ids=[end],
                         logit_bias=bias, regex="[a-z]{3,8}")
    assert all(re.fullmatch("[a-z]{3}", text[1:]) for text in texts)  # ended as soon as the regex accepts


def test_the_stream_is_the_generated_text(char_lm):
    options = dict(max_new_tokens=80, sampler="temperature", seed=4, stop_token_ids=[_end(char_lm)],
                   json_schema=SCHEMA)
    assert "".join(zoo.stream(char_lm, "q", **options)) == zoo.generate(char_lm, "q", **options)


def test_token_ids_take_one_constraint_a_row(char_lm):
    ids = [char_lm.tokenizer("ab").tolist(), char_lm.tokenizer("c").tolist()]
    out = zoo.generate(char_lm, ids, 16, sampler="temperature", seed=0, stop_token_ids=[_end(char_lm)],
                       choices=[["up", "down"], None])
    assert char_lm.tokenizer.detokenize([t for t in out.sequences[0] if t != _end(char_lm)]) in ("up", "down")


# --- Tokenizer kinds: the vocabulary as bytes -------------------------------------------


def _tiny_lm(tokenizer, size):
    keras.utils.set_random_seed(1)
    return zoo.build("gpt-nano", "causal_lm", vocabulary_size=size, tokenizer=tokenizer, max_sequence_length=64)


def _byte_level(model_type):
    from tests.checkpoints.llama_checkpoints import tokenizer_json

    tokenizer = HuggingFaceTokenizer(tokenizer_json(model_type))
    return tokenizer, tokenizer.vocabulary_size()


def _llama2_style():
    from tests.tokenizers.test_huggingface_tokenizer import _tokenizer

    tokenizer = _tokenizer("sentence_piece")
    return tokenizer, tokenizer.vocabulary_size()


def _trained_sentence_piece():
    from zoo.tokenizers import train_sentence_piece

    tokenizer = train_sentence_piece(["yes no maybe so not at all", "the cat danced 12 times", "a dog 345"] * 4, 60)
    return tokenizer, tokenizer.vocabulary_size()


KINDS = {
    "byte-level BPE, Llama 3": lambda: _byte_level("llama"),
    "byte-level BPE, Qwen": lambda: _byte_level("qwen2"),
    "SentencePiece tokenizer.json, Llama 2": _llama2_style,
    "the zoo's SentencePiece": _trained_sentence_piece,
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_each_tokenizer_kind_keeps_to_the_choices_and_the_regex(kind):
    tokenizer, size = KINDS[kind]()
    lm = _tiny_lm(tokenizer, size)
    _check_kind(lm, "a", 16)


@pytest.mark.parametrize("name", ["gpt-char", "gpt-byte_pair", "marian-tiny", "t5-tiny"])
def test_each_saved_tokenizer_keeps_to_the_choices_and_the_regex(name):
    """The zoo's own (a CharTokenizer, keras-hub's byte-level BPE) and the
    SentencePiece targets of Marian and T5 (▁ and <0xNN> pieces)."""
    model = zoo.load(SAVED / f"{name}.keras")
    _check_kind(model, "the cat", 12)


def _check_kind(model, prompt, budget):
    encoder_decoder = type(model).__name__ == "EncoderDecoder"
    vocabulary = "".join(model.tokenizer.get_vocabulary())
    choices = [c for c in ["yes", "no", "cat", "the", "a dog"] if set(c) <= set(vocabulary + " ")]
    assert len(choices) >= 2
    letters = "".join(sorted(set(c for c in vocabulary if "a" <= c <= "z")))[:6]
    pattern = f"[{letters}]{{2,5}}"  # within Marian's window of 8
    for constraint, valid in ((dict(choices=choices), lambda text: text in choices),
                              (dict(regex=pattern), lambda text: re.fullmatch(pattern, text))):
        texts = zoo.generate(model, [prompt] * 6, max_new_tokens=budget, sampler="temperature", seed=0, **constraint)
        for text in texts:
            new = text if encoder_decoder else text[len(prompt):]
            assert valid(new), (constraint, text)


# --- Bad input, in one line -----------------------------------------------------------


@pytest.mark.parametrize("arguments, message", [
    (dict(json_schema="{not json"), "`json_schema` is not valid JSON"),
    (dict(json_schema={"type": "objekt"}), "`json_schema` is refused by llguidance: .*objekt"),
    (dict(json_schema=[1]), "must be a JSON schema"),
    (dict(regex="a(b"), "`regex` is refused by llguidance: .*unclosed group"),
    (dict(regex=3), "`regex` must be a non-empty str"),
    (dict(choices=[]), "`choices` must be a non-empty list"),
    (dict(choices="yes"), "`choices` must be a non-empty list"),
    (dict(grammar="start: foo"), "`grammar` is refused by llguidance: .*foo"),
    (dict(regex="a", choices=["a"]), "Give one constraint, not `regex` and `choices`"),
    (dict(json_object="yes"), "`json_object` must be True or False"),
])
def test_malformed_constraints_are_refused_in_one_line(arguments, message):
    with pytest.raises(ValueError, match=message) as error:
        constraints.grammar(**arguments)
    assert "\n" not in str(error.value)


def test_bad_rows_and_tokenizers_are_refused_before_decoding(char_lm, monkeypatch):
    with pytest.raises(ValueError, match="`regex` has 3 values for 2 rows"):
        constraints.grammars(2, regex=["a", "b", "c"])
    with pytest.raises(ValueError, match="`constraints` must be one grammar or 2"):
        Decoding(char_lm, [[1], [2]], 4, constraints=[None])
    words = WordTokenizer.from_texts(["a dog runs"])
    lm = zoo.build("gpt-nano", "causal_lm", vocabulary_size=words.vocabulary_size(), tokenizer=words)
    with pytest.raises(ValueError, match="a WordTokenizer does not give"):
        zoo.generate(lm, "a dog", max_new_tokens=4, regex="[a-z]+")
    bare = zoo.build("gpt-nano", "causal_lm", vocabulary_size=20)
    with pytest.raises(ValueError, match="carries no tokenizer"):
        zoo.generate(bare, [[1, 2]], 4, regex="[a-z]+")
    monkeypatch.setitem(sys.modules, "llguidance", None)
    with pytest.raises(ImportError, match=r"pip install 'zoo\[structured\]'"):
        constraints.grammar(regex="[a-z]+")


def test_a_grammar_the_vocabulary_cannot_spell_is_refused(char_lm):
    for regex in ("€[0-9]", "[0-9]€"):  # no token holds "€"
        with pytest.raises(ValueError, match="Row 0's constraint cannot") as error:
            zoo.generate(char_lm, "a", max_new_tokens=8, regex=regex)
        assert "\n" not in str(error.value)


# --- Constrained requests in slots (continuous batching) -----------------------------------------


def test_constrained_requests_in_slots_get_generates_tokens(char_lm):
    """Requests with grammars and a free one, joining the slots at different
    steps, each get the tokens `Decoding` gives it alone; every constrained
    output is valid, and a slot freed by a grammar's end takes the next."""
    from zoo.generation.slots import STOP, Slots

    end = _end(char_lm)
    prompts = [char_lm.tokenizer(text).tolist() for text in ("ab", "xyz", "c", "abc d")]
    grammars = [constraints.grammar(json_schema=SCHEMA), None, constraints.grammar(regex=REGEX),
                constraints.grammar(choices=CHOICES)]
    settings = [dict(sampler="top_k", top_k=8, seed=2), dict(sampler="top_p", top_p=0.9, seed=4), None,
                dict(sampler="temperature", temperature=1.5, seed=9)]
    budget = 120
    expected = [Decoding(char_lm, [p], budget, s, [end], constraints=None if g is None else [g]).run().new_tokens[0]
                for p, g, s in zip(prompts, grammars, settings)]
    slots = Slots(char_lm, max_batch=2, stop_token_ids=[end], prefill_chunk=2)
    joins = {0: 0, 1: 1, 3: 2, 4: 3}
    requests, step = [], 0
    while step <= max(joins) or slots.busy:
        if step in joins:
            i = joins[step]
            requests.append(slots.add(prompts[i], budget, settings[i], constraint=grammars[i]))
        slots.step()
        step += 1
    for request, want in zip(requests, expected):
        assert request.new_tokens == want and request.error is None
    texts = [char_lm.tokenizer.detokenize([t for t in r.new_tokens if t != end]) for r in requests]
    jsonschema.validate(json.loads(texts[0]), SCHEMA)
    assert re.fullmatch(REGEX, texts[2]) and texts[3] in CHOICES
    assert requests[0].finish_reason == STOP and not slots.constrained.any() and slots.in_use == 0


def test_one_slot_step_program_serves_every_grammar(char_lm):
    from zoo.generation.slots import Slots

    slots = Slots(char_lm, max_batch=2, stop_token_ids=[_end(char_lm)])
    prompt = char_lm.tokenizer("ab").tolist()

    def run(*grammars):
        for grammar in grammars:
            slots.add(prompt, 20, dict(sampler="top_k", top_k=4, seed=0), constraint=grammar)
        while slots.busy:
            slots.step()

    run(constraints.grammar(regex="[0-9]+"), None)
    before = trace_count()
    run(constraints.grammar(choices=CHOICES), constraints.grammar(json_schema=SCHEMA))
    run(None, constraints.grammar(regex="[a-z]+ [a-z]+"))
    assert trace_count() == before


def test_slots_refuse_a_grammar_before_it_takes_a_slot(char_lm):
    from zoo.generation.slots import Slots

    slots = Slots(char_lm, max_batch=1, stop_token_ids=[_end(char_lm)])
    with pytest.raises(ValueError, match="`constraint` must be a grammar"):
        slots.add([1, 2], 8, constraint={"regex": "a"})
    untokenized = Slots(zoo.build("gpt-nano", "causal_lm", vocabulary_size=64), max_batch=1)
    with pytest.raises(ValueError, match="carries no tokenizer") as error:
        untokenized.add([1, 2], 8, constraint=constraints.grammar(regex="[0-9]+"))
    assert "\n" not in str(error.value)
    assert not slots.busy and not untokenized.busy


def test_a_grammar_that_cannot_go_on_ends_its_request_alone(char_lm):
    """A grammar whose text no token continues stops its own request, with
    the reason, and frees its slot; the request beside it goes on."""
    from zoo.generation.slots import Slots

    prompt = char_lm.tokenizer("ab").tolist()
    slots = Slots(char_lm, max_batch=2)
    stuck = slots.add(prompt, 8, constraint=constraints.grammar(regex="[0-9]€"))  # no token holds "€"
    free = slots.add(prompt, 6)
    while slots.busy:
        slots.step()
    assert isinstance(stuck.error, ValueError) and "cannot be completed" in str(stuck.error)
    assert len(stuck.new_tokens) == 1 and stuck.finished and stuck.slot is None
    assert free.error is None and free.new_tokens == Decoding(char_lm, [prompt], 6).run().new_tokens[0]
