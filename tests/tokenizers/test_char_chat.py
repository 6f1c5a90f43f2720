"""A character tokenizer that chats: ChatML's markers as special tokens of
their own (`CharTokenizer.with_special_tokens(CHATML_TOKENS)`), its
template saved with the model, the loss mask of a conversation, and a
causal LM trained from scratch grown to embed the markers
(`recipes.lm_data.with_special_tokens`).

The references are built apart from the code under test: ChatML written
with Python's string formatting, the ids read off the text one character
or marker at a time, and the answer spans found by searching the text.
"""

import keras
import numpy as np
import pytest

import zoo
from zoo.data import DataError, chat_examples
from zoo.tokenizers import CHATML, CHATML_TOKENS, CharTokenizer, CharVocabulary

START, END = CHATML_TOKENS
ALPHABET = "abcdefghijklmnopqrstuvwxyz ,.:?!\n"
TALK = [
    {"role": "system", "content": "be brief."},
    {"role": "user", "content": "reverse: cat moon fig"},
    {"role": "assistant", "content": "fig moon cat"},
    {"role": "user", "content": "and now?"},
    {"role": "assistant", "content": "done!"},
]


@pytest.fixture()
def tokenizer():
    tokenizer = CharTokenizer.from_text(ALPHABET).with_special_tokens(CHATML_TOKENS)
    tokenizer.chat_template = CHATML
    return tokenizer


def chatml(messages, add_generation_prompt=False):
    text = "".join(f"{START}{m['role']}\n{m['content']}{END}\n" for m in messages)
    return text + (f"{START}assistant\n" if add_generation_prompt else "")


def reference_ids(text):
    """(ids, (start, end) of each) of `text`: a marker is one id after the
    alphabet's, any other character its index in the sorted alphabet."""
    characters, ids, spans, i = sorted(ALPHABET), [], [], 0
    while i < len(text):
        marker = next((m for m in CHATML_TOKENS if text.startswith(m, i)), None)
        if marker:
            ids.append(len(characters) + CHATML_TOKENS.index(marker))
            spans.append((i, i + len(marker)))
            i += len(marker)
        else:
            ids.append(characters.index(text[i]))
            spans.append((i, i + 1))
            i += 1
    return ids, spans


def test_the_markers_are_one_id_each_after_the_characters(tokenizer):
    text = chatml(TALK)
    ids, spans = reference_ids(text)
    assert tokenizer.tokenize_chat(text) == (ids, spans)
    assert tokenizer.tokenize(text).tolist() == ids
    assert tokenizer.vocabulary_size() == len(set(ALPHABET)) + 2
    assert tokenizer.end_token_ids == (tokenizer.token_to_id(END),) == (len(set(ALPHABET)) + 1,)
    # The characters keep the ids they had without the markers.
    plain = CharTokenizer.from_text(ALPHABET)
    assert tokenizer.tokenize("fig moon cat").tolist() == plain.tokenize("fig moon cat").tolist()


def test_round_trip_keeps_the_markers_and_detokenize_leaves_them_out(tokenizer):
    text = chatml(TALK, add_generation_prompt=True)
    ids = tokenizer.tokenize(text)
    assert tokenizer.vocabulary.decode(ids) == text
    assert tokenizer.detokenize(ids) == text.replace(START, "").replace(END, "")
    assert tokenizer.apply_chat_template(TALK[:2]) == reference_ids(chatml(TALK[:2], True))[0]


def test_a_character_outside_the_vocabulary_is_named_with_its_position(tokenizer):
    text = f"{START}user\nhi{END}<"
    with pytest.raises(DataError, match=f"character '<' at position {len(text) - 1} "):
        tokenizer.tokenize(text)


def test_the_special_tokens_and_template_survive_saving_and_reloading(tokenizer, tmp_path):
    tokenizer.vocabulary.save(tmp_path / "chars.json")
    assert CharVocabulary.load(tmp_path / "chars.json").special_tokens == list(CHATML_TOKENS)
    lm = zoo.build("gpt-nano", "causal_lm", vocabulary_size=tokenizer.vocabulary_size(), tokenizer=tokenizer)
    lm.save(tmp_path / "lm.keras")
    loaded = zoo.load(tmp_path / "lm.keras").tokenizer
    assert loaded.chat_template == CHATML
    assert loaded.special_tokens == list(CHATML_TOKENS)
    assert loaded.apply_chat_template(TALK) == tokenizer.apply_chat_template(TALK)
    # A vocabulary saved without special tokens reads as before.
    CharVocabulary(sorted(ALPHABET)).save(tmp_path / "plain.json")
    assert CharVocabulary.load(tmp_path / "plain.json").special_tokens == []


def test_the_loss_mask_is_the_answers_and_their_end_markers(tokenizer):
    examples = chat_examples(tokenizer, [{"messages": TALK}], 200)
    text = chatml(TALK)
    ids, spans = reference_ids(text)
    answers, position = [], 0
    for answer in ("fig moon cat", "done!"):
        start = text.index(f"{START}assistant\n", position) + len(f"{START}assistant\n")
        position = text.index(END, start) + len(END)
        answers.append((start, position))
    mask = [int(any(s < b and e > a for a, b in answers)) for s, e in spans]
    n = len(ids)
    assert examples.token_ids[0, :n].tolist() == ids and not examples.token_ids[0, n:].any()
    assert examples.loss_mask[0].tolist() == mask + [0] * (200 - n)
    assert sum(mask) == len("fig moon cat") + 1 + len("done!") + 1


def test_a_character_model_grows_rows_for_the_markers_and_keeps_its_logits():
    from recipes.lm_data import with_special_tokens

    plain = CharTokenizer.from_text(ALPHABET)
    ids = plain.tokenize("reverse: cat moon fig").reshape(1, -1)
    for preset in ("gpt-nano", "llama-nano"):
        keras.utils.set_random_seed(0)
        lm = zoo.build(preset, "causal_lm", vocabulary_size=plain.vocabulary_size(), tokenizer=plain)
        grown = with_special_tokens(lm, CHATML_TOKENS)
        assert grown.vocabulary_size == plain.vocabulary_size() + 2
        assert grown.tokenizer.special_tokens == list(CHATML_TOKENS)
        before = keras.ops.convert_to_numpy(lm({"token_ids": ids}))
        after = keras.ops.convert_to_numpy(grown({"token_ids": ids}))
        np.testing.assert_allclose(after[..., : plain.vocabulary_size()], before, rtol=1e-5, atol=1e-5)
        markers = np.array([[plain.vocabulary_size()], [plain.vocabulary_size() + 1]])
        start, end = keras.ops.convert_to_numpy(grown({"token_ids": markers}))
        assert not np.allclose(start, end, atol=1e-3)  # the two markers read apart
        assert with_special_tokens(grown, CHATML_TOKENS) is grown


def test_generation_on_text_stops_at_the_end_marker(tokenizer):
    keras.utils.set_random_seed(0)
    lm = zoo.build("gpt-nano", "causal_lm", vocabulary_size=tokenizer.vocabulary_size(), tokenizer=tokenizer)
    end = tokenizer.end_token_id
    out = zoo.generate(lm, "cat", max_length=20, logit_bias={end: 100.0})
    assert out == "cat"
