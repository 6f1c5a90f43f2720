"""`zoo train sft`: chat fine-tuning of a tiny random Qwen2-layout checkpoint with a ChatML template.

The end-to-end run trains a few steps, then its run folder reloads with
the template, answers a chat request through `zoo serve`'s app, continues
text with `zoo sample` and scores again with `zoo eval`. Each bad chat file
is refused in one line naming the file and line, with exit status 2,
before any model is built and without touching the output folder.
"""

import contextlib
import io
import json

import numpy as np
import pytest

import zoo
from recipes import cli, sft
from tests.checkpoints import stand_ins
from tests.checkpoints.llama_checkpoints import hf_folder
from zoo.tokenizers import CHATML

WORDS = "the quick brown fox jumps over lazy dog naïve café façade crème".split()
FLAGS = ["--steps", "4", "--batch-size", "4", "--sequence-length", "64", "--steps-per-epoch", "2",
         "--learning-rate", "3e-3", "--warmup-steps", "0",
         "--eval-batches", "2", "--sample-length", "4", "--jit-compile", "false", "--prompt", "reverse: fox dog"]


def conversations(n, seed):
    """Reverse a few words: short instructions, answers of a few tokens."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        words = list(rng.choice(WORDS, size=int(rng.integers(2, 5))))
        if i % 3 == 0:
            rows.append({"prompt": "reverse: " + " ".join(words), "completion": " ".join(reversed(words))})
        else:
            rows.append({"messages": [{"role": "system", "content": "Answer briefly."},
                                      {"role": "user", "content": "reverse: " + " ".join(words)},
                                      {"role": "assistant", "content": " ".join(reversed(words))}]})
    rows.append({"messages": [{"role": "user", "content": " ".join(WORDS * 4)},  # longer than 64 tokens
                              {"role": "assistant", "content": "long"}]})
    return rows


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def chat_folder(tmp_path_factory):
    return stand_ins.chat_folder(tmp_path_factory.mktemp("qwen") / "qwen2-chat")


@pytest.fixture(scope="module")
def finetuned(chat_folder, tmp_path_factory):
    root = tmp_path_factory.mktemp("sft")
    data = write_jsonl(root / "chat.jsonl", conversations(23, 0))
    capture = {}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        capture["val_loss"] = sft.main(["--pretrained", str(chat_folder), "--data", str(data),
                                        "--output", str(root / "run"), *FLAGS])
    capture["printed"] = out.getvalue()
    return root / "run", capture


@pytest.mark.integration
def test_sft_trains_saves_its_template_and_prints_val_loss_last(finetuned, chat_folder):
    run, capture = finetuned
    printed = capture["printed"].strip().splitlines()
    assert printed[-2:] == [f"run folder: {run}", f"val_loss={capture['val_loss']:.4f}"]
    assert "1 of 24 conversations truncated to 64 tokens" in printed
    for name in ("model.keras", "history.csv", "curves.png", "samples.txt", "run.json"):
        assert (run / name).exists(), name
    record = json.loads((run / "run.json").read_text())
    assert record["recipe"] == "sft" and record["finished"] and record["results"]["truncated"] == 1
    before, after = record["results"]["val_loss_before"], capture["val_loss"]
    assert np.isfinite(before) and after < before
    tuned = zoo.load(run / "model.keras")
    assert tuned.tokenizer.chat_template == CHATML
    original = zoo.from_pretrained(chat_folder)
    assert any(not np.array_equal(a, b) for a, b in zip(original.get_weights(), tuned.get_weights()))
    ((name, value),) = sft.evaluate(run).items()  # zoo eval's figure is the one printed
    assert name == "val_loss" and value == pytest.approx(after, rel=1e-6)


@pytest.mark.integration
def test_the_run_chats_through_zoo_serve_and_samples_through_zoo_sample(finetuned, capsys):
    pytest.importorskip("openai")
    from tests.serve.conftest import Server

    run, _ = finetuned
    lm = zoo.load(run / "model.keras")
    messages = [{"role": "user", "content": "reverse: fox dog"}]
    ids = lm.tokenizer.apply_chat_template(messages)
    assert lm.tokenizer.render_chat(messages).endswith("<|im_start|>assistant\n")
    new = zoo.generate(lm, [ids], 6, stop_token_ids=lm.tokenizer.end_token_ids).sequences[0]
    expected = lm.tokenizer.detokenize([t for t in new if t not in lm.tokenizer.end_token_ids])
    server = Server(lm, name="sft")
    try:
        answer = server.client().chat.completions.create(model="sft", messages=messages, max_tokens=6, temperature=0)
    finally:
        server.stop()
    assert answer.choices[0].message.role == "assistant" and answer.choices[0].message.content == expected
    assert answer.usage.prompt_tokens == len(ids)
    assert cli.main(["sample", str(run), "reverse:", "--max-length", "8", "--seed", "0"]) == 0
    assert capsys.readouterr().out.startswith("reverse:")


# --- Refusals -----------------------------------------------------------------------------------


GOOD = {"messages": [{"role": "user", "content": "reverse: a b"}, {"role": "assistant", "content": "b a"}]}


@pytest.fixture
def no_model(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a model was built")

    monkeypatch.setattr(zoo, "from_pretrained", refuse)


@pytest.mark.parametrize("lines, expected", [
    ([json.dumps(GOOD), "{oops"], "chat.jsonl, line 2: not JSON"),
    ([json.dumps(GOOD), json.dumps({"messages": [{"role": "user"}]})],
     "chat.jsonl, line 2: message 1 has no `role` or no `content`"),
    ([json.dumps({"messages": [{"role": "bot", "content": "x"}]})],
     "chat.jsonl, line 1: message 1 has role 'bot'; expected one of system, user, assistant"),
    ([json.dumps(GOOD), "", json.dumps({"messages": [{"role": "user", "content": "hi"}]})],
     "chat.jsonl, line 3: no assistant turn"),
    (["", ""], "chat.jsonl: empty; expected one conversation a line"),
])
def test_a_bad_chat_file_is_one_line_and_exit_2_before_any_model(tmp_path, chat_folder, capsys, no_model, lines,
                                                                  expected):
    (tmp_path / "chat.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    run = tmp_path / "run"
    run.mkdir()
    (run / "notes.txt").write_text("kept")
    status = cli.main(["train", "sft", "--pretrained", str(chat_folder), "--data", str(tmp_path / "chat.jsonl"),
                       "--output", str(run), *FLAGS])
    error = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(error) == 1 and expected in error[0], error
    assert [p.name for p in run.iterdir()] == ["notes.txt"] and (run / "notes.txt").read_text() == "kept"


def test_a_checkpoint_without_a_template_needs_chat_template(tmp_path, capsys, no_model):
    bare = hf_folder(tmp_path / "qwen2", "qwen2")  # no chat_template in its tokenizer_config.json
    data = write_jsonl(tmp_path / "chat.jsonl", [GOOD] * 8)
    status = cli.main(["train", "sft", "--pretrained", str(bare), "--data", str(data),
                       "--output", str(tmp_path / "run"), *FLAGS])
    error = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(error) == 1
    assert f"{data}: chat data needs a chat template, and {bare} has none" in error[0]
    assert "expected --chat-template FILE, or --chat-template chatml" in error[0]
    assert not (tmp_path / "run").exists()
    status = cli.main(["train", "sft", "--pretrained", str(bare), "--data", str(data), "--chat-template",
                       str(tmp_path / "missing.jinja"), "--output", str(tmp_path / "run"), *FLAGS])
    assert status == 2 and "missing.jinja: does not exist" in capsys.readouterr().err


def test_repeated_data_flags_are_one_list_of_files():
    args = sft.parse(["--data", "a.jsonl", "--data=b.jsonl,c.jsonl", "--steps", "3"])
    assert args.data == "a.jsonl,b.jsonl,c.jsonl" and args.steps == 3
    with pytest.raises(SystemExit):
        sft.parse(["--steps", "3"])  # --data is required: no chat set is registered


def test_zoo_train_help_lists_sft(capsys):
    with pytest.raises(SystemExit):
        cli.main(["train", "-h"])
    assert "sft" in capsys.readouterr().out


@pytest.mark.integration
def test_a_short_context_sets_the_default_sequence_length_and_the_sample_fits_it(chat_folder, tmp_path):
    """Without --sequence-length, a checkpoint whose context is under 512 trains at its context;
    a --sample-length past the context ends the run with a shorter sample, not a traceback."""
    window = zoo.from_pretrained(chat_folder, task="causal_lm").backbone.max_sequence_length
    assert window < sft.LONGEST_DEFAULT
    data = write_jsonl(tmp_path / "chat.jsonl", conversations(11, 1))
    flags = [flag for flag in FLAGS]
    del flags[flags.index("--sequence-length"):flags.index("--sequence-length") + 2]
    flags[flags.index("--sample-length") + 1] = str(window + 10)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        sft.main(["--pretrained", str(chat_folder), "--data", str(data), "--output", str(tmp_path / "run"),
                  "--steps", "2", *flags[2:]])
    record = json.loads((tmp_path / "run" / "run.json").read_text())
    assert record["finished"] and record["args"]["sequence_length"] == window
    assert f"not --sample-length {window + 10}: the context is {window}" in out.getvalue()
    assert (tmp_path / "run" / "samples.txt").is_file()


def test_the_closing_sample_fits_the_context_or_is_skipped_with_a_line(chat_folder, capsys):
    model = zoo.from_pretrained(chat_folder, task="causal_lm")
    window = model.backbone.max_sequence_length
    ids = model.tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True)
    assert isinstance(sft.answer(model, "hi", window, seed=0), str)
    assert f"sample: {window - len(ids)} new tokens, not --sample-length {window}" in capsys.readouterr().out
    assert sft.answer(model, "word " * window, 4, seed=0) is None
    assert "sample skipped: --prompt renders as" in capsys.readouterr().out
