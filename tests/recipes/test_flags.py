"""A recipe's or a `zoo` command's numbers are checked when the flags are
parsed: a value out of range is one line naming the flag, the value and
what was expected, exit status 2, before Keras loads and before the run
folder exists; so are size overrides that do not fit the preset's other
sizes. Every numeric flag of every recipe has such a check."""

import argparse
import math

import pytest

import zoo
from recipes import cli
from recipes.flags import COUNT, FRACTION, NON_NEGATIVE, PORT, POSITIVE, POSITIVE_INT, RATE, SEED, Number
from recipes.run_folder import read_history


@pytest.mark.parametrize(
    "kind, good, bad, expected",
    [
        (POSITIVE_INT, {"1": 1, "2000": 2000}, ["0", "-5", "2.5", "ten", ""], "a whole number >= 1"),
        (COUNT, {"0": 0, "7": 7}, ["-1", "0.5"], "a whole number >= 0"),
        (POSITIVE, {"1e-3": 1e-3, "3": 3.0}, ["0", "-1", "nan", "inf", "-inf", "x"], "a number > 0"),
        (NON_NEGATIVE, {"0": 0.0, "0.1": 0.1}, ["-0.1", "nan"], "a number >= 0"),
        (RATE, {"0": 0.0, "0.999": 0.999}, ["1", "1.5", "-0.1", "nan"], "a number in [0, 1)"),
        (FRACTION, {"0": 0.0, "1": 1.0}, ["1.01", "-1e-9"], "a number in [0, 1]"),
        (SEED, {"0": 0, "4294967295": 2**32 - 1}, ["-1", "4294967296"], "a whole number in [0, 4294967295]"),
        (PORT, {"0": 0, "65535": 65535}, ["-1", "70000"], "a whole number in [0, 65535]"),
        (Number(float, above=0, below=1), {"0.5": 0.5}, ["0", "1"], "a number in (0, 1)"),
        (Number(float), {"-1.5": -1.5}, ["nan", "inf"], "a number"),
        (Number(int, maximum=3), {"3": 3, "-2": -2}, ["4"], "a whole number <= 3"),
        (Number(float, below=2), {"1.5": 1.5}, ["2"], "a number < 2"),
    ],
)
def test_a_number_type_keeps_its_range_and_names_it(kind, good, bad, expected):
    for text, value in good.items():
        assert kind(text) == value and type(kind(text)) is kind.kind
    for text in bad:
        with pytest.raises(argparse.ArgumentTypeError) as error:
            kind(text)
        assert str(error.value) == f"{text}: expected {expected}"


def recipe_parsers():
    """{recipe name: its module's argparse parser}."""
    return {name: cli.recipe_module(name).make_parser() for name in cli.RECIPES}


def test_every_numeric_flag_of_every_recipe_checks_its_range():
    checked = 0
    for name, parser in recipe_parsers().items():
        for action in parser._actions:
            flag = action.option_strings[0]
            assert action.type not in (int, float), f"zoo train {name} {flag}: unchecked {action.type.__name__}"
            checked += isinstance(action.type, Number)
            if isinstance(action.type, Number) and action.default is not None:  # every default passes its own check
                assert action.type.within(action.default), (name, action.dest, action.default)
    assert checked >= 60  # 6 recipes, 10 to 20 numeric flags each


@pytest.mark.parametrize(
    "recipe, argv, line",
    [
        ("gpt_char", ["--steps", "-5"], "argument --steps: -5: expected a whole number >= 1"),
        ("gpt_char", ["--batch-size", "0"], "argument --batch-size: 0: expected a whole number >= 1"),
        ("gpt_char", ["--learning-rate", "-1"], "argument --learning-rate: -1: expected a number > 0"),
        ("gpt_char", ["--dropout", "1.5"], "argument --dropout: 1.5: expected a number in [0, 1)"),
        ("gpt_char", ["--steps-per-epoch", "0"], "argument --steps-per-epoch: 0: expected a whole number >= 1"),
        ("gpt_char", ["--sample-length", "-1"], "argument --sample-length: -1: expected a whole number >= 0"),
        ("gpt_char", ["--num-heads", "5"],
         "--num-heads 5 on gpt-baby: hidden_dim=128 must be divisible by num_heads=5 "
         "(each head is hidden_dim / num_heads wide)."),
        ("gpt_char", ["--preset", "llama-baby", "--hidden-dim", "100"],
         "--hidden-dim 100 on llama-baby: The head width 25 must be even: rotary positions turn pairs of its dimensions."),
        ("gpt_char", ["--preset", "llama-baby", "--num-heads", "3"],
         "--num-heads 3 on llama-baby: hidden_dim=128 must be divisible by num_heads=3 "
         "(each head is hidden_dim / num_heads wide), or pass `head_dim`."),
        ("translate", ["--epochs", "0"], "argument --epochs: 0: expected a whole number >= 1"),
        ("translate", ["--beam-size", "0"], "argument --beam-size: 0: expected a whole number >= 1"),
        ("translate", ["--label-smoothing", "1"], "argument --label-smoothing: 1: expected a number in [0, 1)"),
        ("translate", ["--ema-momentum", "1"], "argument --ema-momentum: 1: expected a number in [0, 1)"),
        ("translate", ["--time-budget", "0"], "argument --time-budget: 0: expected a number > 0"),
        ("translate", ["--num-heads", "3"], "--intermediate-dim 512 --num-heads 3 on transformer-small: "
                                            "hidden_dim=256 must be divisible by num_heads=3"),
        ("bert_pretrain", ["--warmup-fraction", "1.5"],
         "argument --warmup-fraction: 1.5: expected a number in [0, 1]"),
        ("bert_pretrain", ["--hidden-dim", "30"], "hidden_dim=30 must be divisible by num_heads=4"),
        ("bert_classify", ["--classifier-dropout", "-0.1"],
         "argument --classifier-dropout: -0.1: expected a number in [0, 1)"),
        ("bert_classify", ["--weight-decay", "-1"], "argument --weight-decay: -1: expected a number >= 0"),
        ("demo", ["--held-out-fraction", "1"], "argument --held-out-fraction: 1: expected a number in (0, 1)"),
        ("demo", ["--seed", "-1"], "argument --seed: -1: expected a whole number in [0, 4294967295]"),
        ("gpt_finetune", ["--lora", "-1"], "argument --lora: -1: expected a whole number >= 0"),
        ("gpt_finetune", ["--sequence-length", "0"], "argument --sequence-length: 0: expected a whole number >= 1"),
    ],
)
def test_a_bad_number_is_refused_in_one_line_before_the_run_folder_exists(recipe, argv, line, tmp_path, capsys):
    output = tmp_path / "run"
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["train", recipe, *argv, "--output", str(output)])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 2
    assert err[-1].startswith(f"zoo train {recipe}: error: ") and line in err[-1], err[-1]
    assert not output.exists()


@pytest.mark.parametrize(
    "argv, line",
    [
        (["serve", "RUN", "--port", "70000"], "argument --port: 70000: expected a whole number in [0, 65535]"),
        (["explore", "RUN", "--port", "-1"], "argument --port: -1: expected a whole number in [0, 65535]"),
        (["serve", "RUN", "--max-batch", "0"], "argument --max-batch: 0: expected a whole number >= 1"),
        (["sample", "RUN", "--max-length", "0"], "argument --max-length: 0: expected a whole number >= 1"),
        (["sample", "RUN", "--temperature", "0"], "argument --temperature: 0: expected a number > 0"),
        (["sample", "RUN", "--top-p", "1.5"], "argument --top-p: 1.5: expected a number in (0, 1]"),
        (["sample", "RUN", "--top-k", "0"], "argument --top-k: 0: expected a whole number >= 1"),
        (["translate", "RUN", "x", "--beam-size", "0"], "argument --beam-size: 0: expected a whole number >= 1"),
        (["translate", "RUN", "x", "--length-penalty", "nan"], "argument --length-penalty: nan: expected a number"),
    ],
)
def test_the_zoo_commands_check_their_numbers_before_loading_anything(argv, line, tmp_path, capsys):
    argv = [str(tmp_path / "no-run") if word == "RUN" else word for word in argv]  # never read: refused first
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"zoo {argv[0]}: error: {line}"


def test_preset_info_applies_and_checks_overrides_without_building():
    info = zoo.preset_info("gpt2-small", num_layers=2, num_heads=6)
    assert (info["config"]["num_layers"], info["config"]["num_heads"], info["config"]["hidden_dim"]) == (2, 6, 768)
    assert zoo.preset_info("gpt2-small")["config"]["num_layers"] == 12  # the preset itself is unchanged
    assert zoo.preset_info("transformer-tiny", vocabulary_size=50)["config"]["source_vocabulary_size"] is None
    for overrides, message in [
        (dict(num_heads=5), r"hidden_dim=768 must be divisible by num_heads=5"),
        (dict(dropout=1.0), r"`dropout` must be a rate in \[0, 1\); got 1\.0\."),
        (dict(num_layers=0), r"`num_layers` must be a positive integer; got 0\."),
        (dict(num_layer=3), r"Unknown field\(s\) \['num_layer'\] of GPTConfig"),
    ]:
        with pytest.raises(ValueError, match=message):
            zoo.preset_info("gpt2-small", **overrides)


def test_history_reads_a_value_missing_from_an_epoch_as_nan(tmp_path):
    path = tmp_path / "history.csv"
    path.write_text("epoch,loss,val_loss\n0,2.5,NA\n1,2.0,\n2,1.5,1.75\n")
    history = read_history(path)
    assert history["loss"] == [2.5, 2.0, 1.5]
    assert [math.isnan(v) for v in history["val_loss"]] == [True, True, False] and history["val_loss"][2] == 1.75
