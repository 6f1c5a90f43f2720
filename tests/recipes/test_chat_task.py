"""Chat fine-tuning end to end on a CPU: a synthetic instruction task
(`recipes.make_chat_task`), a character model pretrained from scratch by
gpt_char, `zoo train sft` with ChatML's markers added to its tokenizer, and
the exact match of its greedy answers to held-out prompts, asked through a
`zoo serve` process with the official `openai` client
(`recipes.chat_exact_match`), before and after fine-tuning. The fast tests
check the task's files: disjoint splits, the same files for the same seed,
and conversations that fit the character model's context in ChatML.
"""

import importlib
import json
import re
import shlex
import string
from pathlib import Path

import pytest

from recipes import chat_exact_match, cli, gpt_char, make_chat_task, sft
from tests.shared_data import needs
from zoo.data import read_chat
from zoo.tokenizers import CHATML, CHATML_TOKENS, CharTokenizer

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "fine-tuning.md"
BEFORE_AT_MOST, AFTER_AT_LEAST = 0.05, 0.90


def guide_loop():
    """The commands of docs/fine-tuning.md's chat loop (the ```bash block
    that makes the task), each an argv, continuation lines joined."""
    blocks = re.findall(r"```bash\n(.*?)```", GUIDE.read_text(encoding="utf-8"), re.S)
    (block,) = [b for b in blocks if "recipes.make_chat_task" in b]
    lines = block.replace("\\\n", " ").splitlines()
    return [shlex.split(line, comments=True) for line in lines if line.strip()]


def run_command(argv, capsys):
    """One command of the guide as a user types it, `zoo ...` or
    `python -m recipes.NAME ...`, in this process; its standard output."""
    if argv[0] == "zoo":
        status = cli.main(argv[1:])
    else:
        assert argv[:2] == ["python", "-m"], argv
        status = importlib.import_module(argv[2]).main(argv[3:])
    assert status in (0, None), f"{shlex.join(argv)} exited with {status}"
    return capsys.readouterr().out


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


def test_the_guide_loop_is_the_task_the_base_run_sft_and_two_scores():
    commands = guide_loop()
    assert [argv[:3] for argv in commands] == [
        ["python", "-m", "recipes.make_chat_task"], ["zoo", "train", "gpt_char"],
        ["python", "-m", "recipes.chat_exact_match"], ["zoo", "train", "sft"],
        ["python", "-m", "recipes.chat_exact_match"]]


@pytest.mark.slow
@needs("tinyshakespeare")
def test_the_guide_chat_loop_learns_the_task(tmp_path, monkeypatch, capsys):
    """The loop of docs/fine-tuning.md, command for command, in a fresh
    folder: before fine-tuning the pretrained model answers (almost)
    nothing right; after `zoo train sft`, nearly every held-out prompt,
    asked through `zoo serve` with the `openai` client."""
    monkeypatch.chdir(tmp_path)
    scores = []
    for argv in guide_loop():
        out = run_command(argv, capsys)
        scores += [float(x) for x in re.findall(r"^exact_match=([\d.]+)$", out, re.M)]
    before, after = scores
    with capsys.disabled():
        print(f"\nexact match on the test prompts: {before:.3f} before sft, {after:.3f} after")
    assert before <= BEFORE_AT_MOST, f"exact match {before:.3f} before fine-tuning"
    assert after >= AFTER_AT_LEAST, f"exact match {after:.3f} after fine-tuning"
