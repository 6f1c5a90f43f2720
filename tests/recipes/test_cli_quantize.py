"""`zoo sample / translate / classify / eval RUN --quantize MODE`: the
run's model is quantized in memory and used as `model.quantize(MODE)` would
give it, the run folder is left as it was, and a bad mode is one error line
before any file is read."""

import json
import string

import pytest

import zoo
from recipes import cli, gpt_char
from zoo.tokenizers import CharTokenizer, train_word_piece

SENTENCES = ["a gripping film", "a dull plot", "the acting is superb"]
TEXT = "Tester:\nA small text the test writes for itself, with enough characters.\n\nAll:\nAgain, again.\n\n" * 30


def write_run(folder, recipe, model, **args):
    folder.mkdir(parents=True)
    zoo.save(model, folder / "model.keras")
    (folder / "run.json").write_text(json.dumps({"recipe": recipe, "args": args, "finished": True}))
    return folder


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    (root / "input.txt").write_text(TEXT, encoding="utf-8")
    chars = CharTokenizer.from_text(TEXT + string.ascii_letters)
    # Large weights, so that the quantization error shows in the loss's printed digits.
    lm = zoo.build("gpt-nano", task="causal_lm", vocabulary_size=chars.vocabulary_size(), tokenizer=chars,
                   initializer_range=1.0)
    word_piece = train_word_piece(SENTENCES * 8, vocabulary_size=100)
    size = word_piece.vocabulary_size()
    classifier = zoo.build("bert-tiny", task="classifier", num_classes=2, vocabulary_size=size, tokenizer=word_piece)
    translator = zoo.build("transformer-tiny", vocabulary_size=size, source_vocabulary_size=size, tokenizer=word_piece)
    return {
        "gpt_char": write_run(root / "gpt_char", "gpt_char", lm, data=str(root / "input.txt"), batch_size=2,
                              eval_batches=2),
        "bert_classify": write_run(root / "bert_classify", "bert_classify", classifier),
        "translate": write_run(root / "translate", "translate", translator, beam_size=2, length_penalty=0.6),
    }


def quantized(run, mode):
    model = zoo.load(run / "model.keras", compile=False)
    model.quantize(mode)
    return model


def files_of(run):
    return {path.name: path.read_bytes() for path in run.iterdir()}


@pytest.mark.integration
def test_sample_quantized_is_the_quantized_models_sample_and_leaves_the_run_as_it_was(runs, capsys):
    run = runs["gpt_char"]
    before = files_of(run)
    assert cli.main(["sample", str(run), "All:", "--max-length", "20", "--seed", "3", "--quantize", "int8"]) == 0
    expected = zoo.generate(quantized(run, "int8"), "All:", max_length=20, sampler="temperature", temperature=0.8, seed=3)
    assert capsys.readouterr().out == expected + "\n"
    assert files_of(run) == before


@pytest.mark.integration
def test_eval_quantized_prints_the_quantized_models_loss(runs, capsys):
    run = runs["gpt_char"]
    assert cli.main(["eval", str(run), "--quantize", "int4"]) == 0
    loss = gpt_char.evaluate(run, model=quantized(run, "int4"))["val_loss"]
    float_loss = gpt_char.evaluate(run)["val_loss"]
    assert f"{loss:.4f}" != f"{float_loss:.4f}"
    assert capsys.readouterr().out.strip().splitlines()[-1] == f"val_loss={loss:.4f}"


@pytest.mark.integration
def test_translate_and_classify_quantized_are_the_quantized_models(runs, capsys):
    assert cli.main(["translate", str(runs["translate"]), *SENTENCES[:2], "--quantize", "int8"]) == 0
    expected = zoo.translate(quantized(runs["translate"], "int8"), SENTENCES[:2], num_beams=2, length_penalty=0.6)
    assert capsys.readouterr().out == "".join(f"{line}\n" for line in expected)
    assert cli.main(["classify", str(runs["bert_classify"]), *SENTENCES, "--quantize", "float8"]) == 0
    result = zoo.classify(quantized(runs["bert_classify"], "float8"), SENTENCES)
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split("\t")[1] for line in lines] == [f"{float(p.max()):.4f}" for p in result.probabilities]


@pytest.mark.parametrize("mode, why", [("int3", ""), ("gptq", r" \(Keras' GPTQ and AWQ need calibration data")])
@pytest.mark.parametrize("command", [["sample", "hi"], ["translate", "hallo"], ["classify", "good"], ["eval"]])
def test_a_bad_mode_is_one_error_line_before_the_run_is_read(command, mode, why, tmp_path, capsys):
    missing = tmp_path / "no_run"  # read first, it would be the error
    with pytest.raises(SystemExit) as exit_info:
        cli.main([command[0], str(missing), *command[1:], "--quantize", mode])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith(f"zoo {command[0]}: error: argument --quantize: mode='{mode}' is not supported")
    assert error.endswith("expected one of 'int8', 'int4', 'float8'.") and (not why or "calibration data" in error)
