"""`zoo train translate --pretrained`: a checkpoint's teacher-forcing
batches as transformers builds them (labels are the target tokenizer's ids
with its end token, the decoder input is the labels shifted right behind
`decoder_start_token_id`, padding is the checkpoint's pad id), the
refusals, and (integration) a tiny opus-mt folder fine-tuned until it
translates its pairs, reloaded, used by `zoo translate` and exported as a
checkpoint again."""

import json

import numpy as np
import pytest

from recipes import translate
from recipes.recipe import start
from tests.checkpoints import bart_checkpoints, marian_checkpoints, t5_checkpoints
from tests.recipes.same_seed import run_printing
from zoo.data import DataError

GERMAN, ENGLISH = marian_checkpoints.GERMAN[:8], marian_checkpoints.ENGLISH[:8]


def write_tsv(path, pairs):
    rows = ["de\ten"] + [f"{source}\t{target}" for source, target in pairs]
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pairs")
    pairs = list(zip(GERMAN, ENGLISH))
    return write_tsv(folder / "train.tsv", pairs * 64), write_tsv(folder / "val.tsv", pairs)


@pytest.fixture(scope="module")
def marian(tmp_path_factory):
    folder = tmp_path_factory.mktemp("opus-mt") / "opus-mt-de-en"
    marian_checkpoints.hf_folder(folder)
    return folder


def reference_target(family, folder, text):
    """transformers' `tokenizer(text_target=text)["input_ids"]`: the labels, end token included."""
    if family == "marian":
        return marian_checkpoints.reference_ids(folder, text, "target")
    return {"bart": bart_checkpoints, "t5": t5_checkpoints}[family].reference_ids(folder, text)


@pytest.mark.parametrize(
    "family, start_id, pad_id",
    [("marian", 88, 88), ("bart", 2, 1), ("t5", 0, 0)],  # decoder_start_token_id and pad_token_id of each folder
)
def test_batches_are_transformers_labels_shifted_right(family, start_id, pad_id, files, tmp_path):
    checkpoints = {"marian": marian_checkpoints, "bart": bart_checkpoints, "t5": t5_checkpoints}[family]
    folder = tmp_path / family
    checkpoints.hf_folder(folder)
    args = translate.parse(["--pretrained", str(folder), "--data", str(files[1]), "--validation", str(files[1]),
                            "--batch-size", "8", "--max-length", "40", "--no-mixed-precision"])
    start(args)
    data = translate.read_data(args)
    assert data["special"]["start"] == start_id and data["special"]["pad"] == pad_id
    inputs, labels = next(iter(data["val"]))
    labels, decoder = labels.numpy(), inputs["decoder_token_ids"].numpy()
    decoder_mask = inputs["decoder_padding_mask"].numpy().astype(bool)
    expected = {tuple(reference_target(family, folder, text)) for text in ENGLISH}
    seen = set()
    for row in range(len(labels)):
        length = int(decoder_mask[row].sum())
        seen.add(tuple(labels[row, :length]))
        assert decoder[row, 0] == start_id
        np.testing.assert_array_equal(decoder[row, 1:length], labels[row, : length - 1])
        assert (labels[row, length:] == pad_id).all() and (decoder[row, length:] == pad_id).all()
    assert seen == expected
    # The source is what zoo.translate feeds the encoder: the source tokenizer's ids, end token included.
    encoder_mask = inputs["encoder_padding_mask"].numpy().astype(bool)
    sources = {tuple(row[mask]) for row, mask in zip(inputs["encoder_token_ids"].numpy(), encoder_mask)}
    source_side = (lambda text: marian_checkpoints.reference_ids(folder, text, "source")) if family == "marian" else (
        lambda text: reference_target(family, folder, text))
    assert sources == {tuple(source_side(text)) for text in GERMAN}


@pytest.mark.parametrize(
    "flags, named",
    [
        (["--preset", "transformer-tiny"], "--preset"),
        (["--vocabulary-size", "300", "--num-layers", "2"], "--num-layers, --vocabulary-size"),
        (["--intermediate-dim", "512"], "--intermediate-dim"),
        (["--subword", "bpe"], "--subword"),
    ],
)
def test_what_the_checkpoint_fixes_is_refused_in_one_line(flags, named, marian, capsys):
    with pytest.raises(SystemExit) as stopped:
        translate.parse(["--pretrained", str(marian), *flags])
    assert stopped.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.endswith(f"error: {named}: with --pretrained the model and its vocabulary are the checkpoint's; "
                          f"leave {'them' if ',' in named else 'it'} out"), error


def test_the_fine_tuning_defaults_and_what_is_given(marian):
    args = translate.parse(["--pretrained", str(marian)])
    assert (args.learning_rate, args.epochs, args.ema_momentum, args.beam_size, args.length_penalty) == (
        5e-5, 3, 0.0, None, None)
    assert args.preset is None and args.intermediate_dim is None
    args = translate.parse(["--pretrained", str(marian), "--learning-rate", "1e-3", "--beam-size", "2"])
    assert (args.learning_rate, args.beam_size, args.epochs) == (1e-3, 2, 3)
    scratch = translate.parse([])
    assert (scratch.preset, scratch.intermediate_dim, scratch.learning_rate, scratch.beam_size) == (
        "transformer-small", 512, 1e-3, 8)


def test_a_decoder_only_checkpoint_is_refused_before_the_folder(files, tmp_path):
    from tests.checkpoints.stand_ins import hf_gpt2_folder

    folder = tmp_path / "gpt2"
    hf_gpt2_folder(folder)
    output = tmp_path / "run"
    args = translate.parse(["--pretrained", str(folder), "--data", str(files[1]), "--validation", str(files[1]),
                            "--output", str(output), "--no-mixed-precision"])
    with pytest.raises(DataError, match=r"a GPTCausalLM; expected an encoder-decoder \(Marian, BART, T5"):
        translate.read_data(args)
    assert not output.exists()


def test_a_max_length_past_the_context_is_refused(marian, files):
    args = translate.parse(["--pretrained", str(marian), "--data", str(files[1]), "--validation", str(files[1]),
                            "--max-length", "65", "--no-mixed-precision"])
    with pytest.raises(DataError, match=r"--max-length 65: .*'s context is 64 tokens; expected at most that"):
        translate.read_data(args)


@pytest.mark.integration
def test_a_tiny_opus_mt_fine_tunes_reloads_and_translates(marian, files, tmp_path, capsys):
    import zoo
    from recipes import cli

    train, val = files
    before = zoo.translate(zoo.from_pretrained(str(marian)), GERMAN)
    assert sum(b == e for b, e in zip(before, ENGLISH)) == 0  # random weights translate nothing
    output = tmp_path / "run"
    bleu, lines = run_printing(translate.main, [
        "--pretrained", str(marian), "--data", str(train), "--validation", str(val), "--output", str(output),
        "--epochs", "8", "--batch-size", "8", "--learning-rate", "3e-3", "--warmup-steps", "20",
        "--jit-compile", "false", "--no-mixed-precision",  # float32: the checks below compare decodings
    ])
    assert f"translate: fine-tuning {marian}" in lines
    assert lines[-1] == f"val_bleu={bleu:.4f}" and bleu > 50, lines[-4:]
    history = (output / "history.csv").read_text().splitlines()
    losses = [float(row.split(",")[-1]) for row in history[1:]]  # val_loss is the last column
    assert losses[-1] < losses[0] / 2, losses
    # The run's model carries Marian's two tokenizers and its generation settings.
    model = zoo.load(output / "model.keras")
    assert type(model.source_tokenizer).__name__ == "MarianTokenizer"
    assert model.tokenizer.generation["bad_words_ids"] == [[88]]
    saved = [line.split("\t")[2] for line in (output / "translations.txt").read_text("utf-8").splitlines()]
    after = zoo.translate(model, GERMAN)
    assert after == saved and sum(a == e for a, e in zip(after, ENGLISH)) >= 5, after
    capsys.readouterr()
    assert cli.main(["translate", str(output), GERMAN[3]]) == 0
    assert capsys.readouterr().out.strip() == after[3]
    exported = tmp_path / "opus-mt-multi30k"
    assert cli.main(["export", str(output), str(exported), "--format", "huggingface"]) == 0
    assert zoo.translate(zoo.from_pretrained(str(exported)), GERMAN) == after
    run = json.loads((output / "run.json").read_text())
    assert run["preset"] == str(marian) and run["args"]["pretrained"] == str(marian)
