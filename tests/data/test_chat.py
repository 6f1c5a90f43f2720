"""`zoo.data.chat_examples` and `read_chat`: conversations as token ids and the loss mask of fine-tuning.

The tokenizers are the tiny byte-level BPEs of the Llama-family test
checkpoints: Qwen's special tokens with ChatML, Llama 3's with Llama 3's
template. The mask is checked against a reference built independently of
the code under test: the rendered text cut at the assistant answers'
character spans (found by searching the text), each piece tokenized alone,
the pieces' ids concatenated (and checked to be the whole text's ids).
"""

import json

import numpy as np
import pytest

import zoo
from tests.checkpoints.llama_checkpoints import BEGIN, END, EOT, IM_END, QWEN_END, tokenizer_json
from zoo.data import DataError, chat_examples, read_chat
from zoo.tokenizers import CHATML, HuggingFaceTokenizer

# Meta's Llama 3 Instruct template, as its tokenizer_config.json has it.
LLAMA3 = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
    "message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)
TALK = [
    {"role": "system", "content": "You are brief."},
    {"role": "user", "content": "the quick brown fox?"},
    {"role": "assistant", "content": "jumps over the lazy dog"},
    {"role": "user", "content": "naïve café?"},
    {"role": "assistant", "content": "crème brûlée 🙂"},
]


@pytest.fixture(scope="module")
def qwen():
    return HuggingFaceTokenizer.from_file(tokenizer_json("qwen2"), eos_token=[IM_END, QWEN_END], pad_token=QWEN_END,
                                          chat_template=CHATML)


@pytest.fixture(scope="module")
def llama():
    return HuggingFaceTokenizer.from_file(tokenizer_json("llama"), bos_token=BEGIN, eos_token=[END, EOT],
                                          chat_template=LLAMA3)


def reference(tokenizer, text, answers, end):
    """(ids, mask) of `text`: each answer found in order, its span running
    through the next `end`; the pieces between span edges tokenized alone."""
    edges, position = [0], 0
    for answer in answers:
        start = text.index(answer, position)
        position = text.index(end, start) + len(end)
        edges += [start, position]
    edges.append(len(text))
    ids, mask = [], []
    for i, (a, b) in enumerate(zip(edges, edges[1:])):
        piece = tokenizer.tokenize_chat(text[a:b])[0] if b > a else []
        ids += piece
        mask += [i % 2] * len(piece)
    return ids, mask


def real(examples, row=0):
    n = int(examples.padding_mask[row].sum())
    return examples.token_ids[row, :n].tolist(), examples.loss_mask[row, :n].tolist()


def test_chatml_counts_the_answer_and_its_end_token_only(qwen):
    messages = TALK[:3]
    examples = chat_examples(qwen, [{"messages": messages}], 128)
    prompt = ("<|im_start|>system\nYou are brief.<|im_end|>\n<|im_start|>user\nthe quick brown fox?<|im_end|>\n"
              "<|im_start|>assistant\n")
    answer = qwen.tokenize_chat("jumps over the lazy dog")[0]
    expected_ids = qwen.tokenize_chat(prompt)[0] + answer + [qwen.token_to_id(IM_END)] + qwen.tokenize_chat("\n")[0]
    expected_mask = [0] * len(qwen.tokenize_chat(prompt)[0]) + [1] * (len(answer) + 1) + [0]
    assert real(examples) == (expected_ids, expected_mask)
    assert expected_ids == qwen.apply_chat_template(messages, add_generation_prompt=False)  # as zoo serve tokenizes
    assert examples.padding_mask[0, len(expected_ids):].sum() == 0 and examples.truncated == 0


@pytest.mark.parametrize("template", ["chatml", "llama3"])
def test_every_assistant_turn_counts_and_nothing_else(qwen, llama, template):
    tokenizer, end = (qwen, IM_END) if template == "chatml" else (llama, EOT)
    examples = chat_examples(tokenizer, [{"messages": TALK}], 256)
    text = tokenizer.render_chat(TALK, add_generation_prompt=False)
    ids, mask = reference(tokenizer, text, [m["content"] for m in TALK if m["role"] == "assistant"], end)
    assert real(examples) == (ids, mask)
    assert sum(mask) > 0 and ids[mask.index(1) - 1] != tokenizer.token_to_id(end)  # the answer, not the header
    if template == "llama3":
        assert ids[0] == tokenizer.start_token_id and mask[0] == 0  # the BOS the template writes


def test_train_on_prompt_counts_every_real_token(qwen):
    examples = chat_examples(qwen, [{"messages": TALK}, {"messages": TALK[:3]}], 256, train_on_prompt=True)
    np.testing.assert_array_equal(examples.loss_mask, examples.padding_mask)
    assert examples.padding_mask[1].sum() < examples.padding_mask[0].sum()


def test_a_prompt_completion_pair_is_a_user_turn_and_an_answer(qwen):
    pair = {"prompt": "the quick brown fox?", "completion": "jumps over the lazy dog"}
    messages = [{"role": "user", "content": pair["prompt"]}, {"role": "assistant", "content": pair["completion"]}]
    conversational = {"prompt": messages[:1], "completion": messages[1:]}
    a, b, c = (chat_examples(qwen, [x], 64) for x in (pair, {"messages": messages}, conversational))
    for other in (b, c):
        np.testing.assert_array_equal(a.token_ids, other.token_ids)
        np.testing.assert_array_equal(a.loss_mask, other.loss_mask)
    assert a.loss_mask.sum() == len(qwen.tokenize_chat(pair["completion"])[0]) + 1


def test_longer_conversations_are_cut_and_counted(qwen):
    full = chat_examples(qwen, [{"messages": TALK}, {"messages": TALK[:3]}, {"messages": TALK[1:3]}], 256)
    lengths = full.padding_mask.sum(axis=1)
    cut = int(lengths[1]) - 1  # the first two are longer, the third fits
    assert lengths[2] <= cut
    short = chat_examples(qwen, [{"messages": TALK}, {"messages": TALK[:3]}, {"messages": TALK[1:3]}], cut)
    assert short.truncated == 2 and len(short) == 3 and short.token_ids.shape == (3, cut)
    np.testing.assert_array_equal(short.token_ids, full.token_ids[:, :cut])
    np.testing.assert_array_equal(short.loss_mask, full.loss_mask[:, :cut])


def test_a_template_that_rewrites_earlier_turns_is_refused(qwen):
    counting = "{{ messages | length }}" + CHATML  # the text before every turn changes as turns are added
    with pytest.raises(ValueError, match="prefix by prefix"):
        chat_examples(qwen, [{"messages": TALK[:3]}], 64, chat_template=counting)


def test_an_explicit_template_renders_where_the_tokenizer_has_none(qwen):
    bare = HuggingFaceTokenizer.from_file(tokenizer_json("qwen2"), eos_token=[IM_END])
    with pytest.raises(ValueError, match="no chat template"):
        chat_examples(bare, [{"messages": TALK[:3]}], 64)
    np.testing.assert_array_equal(chat_examples(bare, [{"messages": TALK[:3]}], 64, chat_template=CHATML).loss_mask,
                                  chat_examples(qwen, [{"messages": TALK[:3]}], 64).loss_mask)
    characters = zoo.tokenizers.CharTokenizer(zoo.tokenizers.CharVocabulary("abc"))  # without ChatML's markers
    with pytest.raises(ValueError, match="no chat template"):
        chat_examples(characters, [{"messages": TALK[:3]}], 64)
    with pytest.raises(DataError, match=r"character '<' at position 0 .*with_special_tokens\(zoo.tokenizers.CHATML_TOKENS\)"):
        chat_examples(characters, [{"messages": TALK[:3]}], 64, chat_template=CHATML)


# --- Reading chat files ----------------------------------------------------------------------------


def write(path, *lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


GOOD = json.dumps({"messages": TALK[:3]})


def test_read_chat_reads_both_shapes_from_several_files(tmp_path):
    a = write(tmp_path / "a.jsonl", GOOD, "", json.dumps({"prompt": "hi", "completion": "hello"}))
    b = write(tmp_path / "b.jsonl", GOOD)
    conversations = read_chat(f"{a},{b}")
    assert conversations == [TALK[:3], [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
                             TALK[:3]]


@pytest.mark.parametrize("line, expected", [
    ("{not json", r"bad\.jsonl, line 2: not JSON"),
    (json.dumps({"messages": [{"content": "hi"}]}), r"bad\.jsonl, line 2: message 1 has no `role`"),
    (json.dumps({"messages": [{"role": "user"}]}), r"bad\.jsonl, line 2: message 1 has no `role` or no `content`"),
    (json.dumps({"messages": [{"role": "robot", "content": "hi"}]}),
     r"bad\.jsonl, line 2: message 1 has role 'robot'; expected one of system, user, assistant"),
    (json.dumps({"messages": [{"role": "user", "content": "hi"}]}), r"bad\.jsonl, line 2: no assistant turn"),
    (json.dumps({"text": "hi"}), r"bad\.jsonl, line 2: expected \{\"messages\""),
])
def test_a_bad_line_is_named_with_its_file_and_number(tmp_path, line, expected):
    with pytest.raises(DataError, match=expected):
        read_chat(write(tmp_path / "bad.jsonl", GOOD, line))


def test_an_empty_or_missing_file_is_refused(tmp_path):
    with pytest.raises(DataError, match=r"empty\.jsonl: empty; expected one conversation a line"):
        read_chat(write(tmp_path / "empty.jsonl", "", ""))
    with pytest.raises(DataError, match="does not exist"):
        read_chat(tmp_path / "missing.jsonl")


# --- The loss ----------------------------------------------------------------------------------


def test_the_masked_loss_is_the_mean_cross_entropy_over_the_marked_tokens():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(3, 5, 7)) * 3
    labels = rng.integers(0, 7, size=(3, 5))
    mask = rng.integers(0, 2, size=(3, 5))
    log_p = logits - np.log(np.exp(logits).sum(-1, keepdims=True))  # float64
    nll = -np.take_along_axis(log_p, labels[..., None], -1)[..., 0]
    expected = (nll * mask).sum() / mask.sum()
    loss = zoo.training.MaskedSparseCrossentropy(pad_id=None)
    got = float(loss(labels, logits.astype("float32"), sample_weight=mask.astype("float32")))
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    assert abs(float(loss(labels, logits.astype("float32"))) - nll.mean()) < 1e-5  # no mask: every label


def test_a_conversation_scores_the_same_whatever_it_is_batched_with(qwen, tmp_path):
    from tests.checkpoints.llama_checkpoints import hf_folder

    lm = zoo.from_pretrained(hf_folder(tmp_path / "qwen", "qwen2"))
    alone = chat_examples(lm, [{"messages": TALK[:3]}], 48, chat_template=CHATML)
    batched = chat_examples(lm, [{"messages": TALK[:3]}, {"messages": TALK}], 96, chat_template=CHATML)
    n = int(alone.padding_mask[0].sum())
    assert batched.padding_mask[1].sum() > n  # the neighbour is longer: the first row is padded
    one = lm.predict_on_batch({"token_ids": alone.token_ids[:, :n], "padding_mask": alone.padding_mask[:, :n]})
    two = lm.predict_on_batch({"token_ids": batched.token_ids, "padding_mask": batched.padding_mask})
    np.testing.assert_allclose(np.asarray(two)[0, :n], np.asarray(one)[0], atol=1e-5)
