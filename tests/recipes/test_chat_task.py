"""Chat fine-tuning end to end on a CPU: a synthetic instruction task
(`recipes.make_chat_task`), a character model pretrained from scratch by
gpt_char, `zoo train sft` with ChatML's markers added to its tokenizer, and
the exact match of its greedy answers to held-out prompts, asked through a
`zoo serve` process with the official `openai` client
(`recipes.chat_exact_match`), before and after fine-tuning. The fast tests
check the task's files: disjoint splits, the same files for the same seed,
and conversations that fit the character model's context in ChatML.
"""

import json
import string

import pytest

from recipes import chat_exact_match, gpt_char, make_chat_task, sft
from tests.shared_data import needs
from zoo.data import CHATML, CHATML_TOKENS, CharTokenizer, read_chat

# The loop of docs/fine-tuning.md, "A chat task from scratch": gpt_char's
# default run, then sft with these flags (the context is gpt-baby's 64).
SFT_FLAGS = ["--sequence-length", "64", "--steps", "600", "--batch-size", "32", "--learning-rate", "5e-4",
             "--warmup-steps", "50", "--steps-per-epoch", "100", "--sample-length", "20",
             "--prompt", "Reverse: cat moon fig"]
BEFORE_AT_MOST, AFTER_AT_LEAST = 0.05, 0.90


def read(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_the_splits_are_disjoint_seeded_and_in_the_openai_shape(tmp_path):
    paths = make_chat_task.write_task(tmp_path / "a", train=300, validation=40, test=40, seed=3)
    again = make_chat_task.write_task(tmp_path / "b", train=300, validation=40, test=40, seed=3)
    other = make_chat_task.write_task(tmp_path / "c", train=300, validation=40, test=40, seed=4)
    splits = {name: read(path) for name, path in paths.items()}
    assert [len(splits[n]) for n in ("train", "validation", "test")] == [300, 40, 40]
    prompts = {name: [c["messages"][0]["content"] for c in split] for name, split in splits.items()}
    everything = sum(prompts.values(), [])
    assert len(set(everything)) == len(everything)  # no prompt twice, within or across splits
    assert all(paths[n].read_bytes() == again[n].read_bytes() for n in paths)
    assert paths["test"].read_bytes() != other["test"].read_bytes()
    for conversation in splits["test"]:
        user, assistant = conversation["messages"]
        words = user["content"].removeprefix("Reverse: ").split()
        assert (user["role"], assistant["role"]) == ("user", "assistant")
        assert assistant["content"].split() == words[::-1] and len(set(words)) == 3
    assert read_chat(paths["train"])[0] == splits["train"][0]["messages"]


def test_sort_answers_in_alphabetical_order(tmp_path):
    paths = make_chat_task.write_task(tmp_path, task="sort", train=20, validation=5, test=5, num_words=4)
    for conversation in read(paths["test"]):
        user, assistant = conversation["messages"]
        assert assistant["content"].split() == sorted(user["content"].removeprefix("Sort: ").split())


def test_too_many_conversations_for_the_words_is_one_line(capsys, tmp_path):
    assert make_chat_task.main(["--out", str(tmp_path), "--num-words", "2", "--train", "5000"]) == 2
    assert "expected at most" in capsys.readouterr().err


def test_every_conversation_fits_the_character_models_context(tmp_path):
    """In ChatML, with the markers one token each, the longest conversation
    fits gpt-baby's 64 positions, and its prompt leaves room for the answer."""
    from zoo.data.synthetic import CHAT_WORDS

    tokenizer = CharTokenizer.from_text(string.ascii_letters + ": \n").with_special_tokens(CHATML_TOKENS)
    tokenizer.chat_template = CHATML
    longest = sorted(CHAT_WORDS, key=len)[-3:]
    for instruction in ("Reverse", "Sort"):
        messages = [{"role": "user", "content": f"{instruction}: {' '.join(longest)}"},
                    {"role": "assistant", "content": " ".join(longest)}]
        assert len(tokenizer.apply_chat_template(messages, add_generation_prompt=False)) <= 64
        room = 64 - len(tokenizer.apply_chat_template(messages[:1]))
        assert room >= len(messages[1]["content"]) + 1  # the answer and <|im_end|>


@pytest.mark.integration
def test_sft_takes_a_character_model_a_recipe_trained_and_adds_chatml(tmp_path):
    """A gpt_char run has no chat template and no markers: sft appends
    ChatML's two markers to its tokenizer and embedding, renders with
    ChatML, and the saved model carries both."""
    import zoo

    text = tmp_path / "input.txt"
    text.write_text("The user asks, the assistant answers.\nReverse: ab\n\n" * 40, encoding="utf-8")
    gpt_char.main(["--data", str(text), "--output", str(tmp_path / "base"), "--preset", "nano", "--steps", "2",
                   "--steps-per-epoch", "2", "--batch-size", "4", "--eval-batches", "2", "--sample-length", "0",
                   "--jit-compile", "false"])
    pairs = [{"prompt": f"Reverse: {a}{b}", "completion": f"{b}{a}"} for a in "abRe" for b in "nsvr"]
    data = tmp_path / "chat.jsonl"
    data.write_text("".join(json.dumps(p) + "\n" for p in pairs), encoding="utf-8")
    sft.main(["--pretrained", str(tmp_path / "base"), "--data", str(data), "--output", str(tmp_path / "sft"),
              "--sequence-length", "32", "--steps", "2", "--batch-size", "4", "--steps-per-epoch", "2",
              "--eval-batches", "1", "--sample-length", "2", "--jit-compile", "false", "--prompt", "Reverse: ab"])
    base, tuned = (zoo.load(tmp_path / run / "model.keras") for run in ("base", "sft"))
    assert base.tokenizer.chat_template is None and base.tokenizer.special_tokens == []
    assert tuned.tokenizer.chat_template == CHATML and tuned.tokenizer.special_tokens == list(CHATML_TOKENS)
    assert tuned.vocabulary_size == base.vocabulary_size + 2
    assert tuned.tokenizer.get_vocabulary()[: base.vocabulary_size] == base.tokenizer.get_vocabulary()


def test_the_questions_are_the_turns_before_the_last_answer():
    talk = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
            {"role": "user", "content": "c"}, {"role": "assistant", "content": "d"}]
    assert chat_exact_match.questions([talk]) == [(talk[:3], "d")]
    assert chat_exact_match.exact_match([" d\n", "x"], [(talk[:3], "d"), (talk[:1], "b")]) == 0.5


@pytest.mark.slow
@needs("tinyshakespeare")
def test_a_model_pretrained_from_scratch_learns_the_chat_task(tmp_path):
    """The whole loop: before fine-tuning the pretrained model answers
    (almost) nothing right; after 600 sft steps, nearly every held-out
    prompt (docs/fine-tuning.md has the figures and the time)."""
    task, base, tuned = tmp_path / "task", tmp_path / "base", tmp_path / "sft"
    assert make_chat_task.main(["--out", str(task)]) == 0
    gpt_char.main(["--output", str(base)])
    before, answers, _ = chat_exact_match.score(task / "test.jsonl",
                                                chat_exact_match.with_chatml(base, tmp_path))
    sft.main(["--pretrained", str(base), "--data", str(task / "train.jsonl"),
              "--validation", str(task / "validation.jsonl"), "--output", str(tuned), *SFT_FLAGS])
    after, answers, pairs = chat_exact_match.score(task / "test.jsonl", tuned)
    wrong = [(m[-1]["content"], a) for a, (m, e) in zip(answers, pairs) if a.strip() != e][:5]
    print(f"exact match on {len(pairs)} test prompts: {before:.3f} before sft, {after:.3f} after")
    assert before <= BEFORE_AT_MOST, f"exact match {before:.3f} before fine-tuning"
    assert after >= AFTER_AT_LEAST, f"exact match {after:.3f} after fine-tuning; e.g. {wrong}"
