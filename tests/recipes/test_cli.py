"""The `zoo` console command, in-process: its declaration, the recipe list,
presets and describe, and every refusal (an unknown recipe, a preset typo,
a run folder that is not one, a run of the wrong kind, a size flag with
--pretrained) before any work starts. Training, reloading and using runs:
tests/recipes/test_runs.py."""

import json
import re
import tomllib
from pathlib import Path

import pytest

from recipes import cli

ROOT = Path(__file__).resolve().parents[2]


def test_the_console_script_is_recipes_cli_main_and_the_library_never_imports_recipes():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["zoo"] == "recipes.cli:main"
    for path in (ROOT / "zoo").rglob("*.py"):
        for line in path.read_text(encoding="utf-8").splitlines():
            words = line.split()
            assert not (words[:1] in (["import"], ["from"]) and words[1].split(".")[0] == "recipes"), (path, line)


def test_every_recipe_has_main_and_evaluate_and_uses_only_public_zoo_names():
    for name in cli.RECIPES:
        recipe = cli.recipe_module(name)
        assert callable(recipe.main) and callable(recipe.evaluate), name
        source = Path(recipe.__file__).read_text(encoding="utf-8")
        for private in ("zoo.training.run", "zoo.data.buckets", "zoo.presets", "zoo.cli", "zoo.training.callbacks"):
            assert private not in source, (name, private)
        assert not re.search(r"zoo(\.\w+)*\._", source), name  # no underscore names of zoo


def test_train_help_lists_each_recipe_with_one_line(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["train", "-h"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for name, line in cli.RECIPES.items():
        assert f"{name} " in out and line in out


def test_a_recipes_own_help_under_both_spellings(capsys):
    for spelling in ("gpt-char", "gpt_char"):
        with pytest.raises(SystemExit) as exit_info:
            cli.main(["train", spelling, "-h"])
        assert exit_info.value.code == 0
        out = capsys.readouterr().out
        assert out.startswith("usage: zoo train gpt_char") and "--steps-per-epoch" in out


def test_every_flag_of_every_command_and_recipe_has_help():
    import argparse

    def check(parser, where):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    check(sub, f"{where} {name}")
            elif not isinstance(action, argparse._HelpAction):
                assert action.help, f"{where}: {action.option_strings or action.dest} has no help"

    check(cli.parser(), "zoo")
    for name in ("gpt_char", "translate", "bert_pretrain", "bert_classify", "demo"):
        check(cli.recipe_module(name).make_parser(), f"zoo train {name}")


def test_presets_lists_each_family(capsys):
    assert cli.main(["presets"]) == 0
    out = capsys.readouterr().out
    for name in ("transformer-tiny", "transformer-small", "bert-tiny", "bert-small", "gpt-nano"):
        assert name in out
    assert cli.main(["presets", "--family", "bert"]) == 0
    out = capsys.readouterr().out
    assert "bert-tiny" in out and "gpt-nano" not in out
    assert cli.main(["presets", "--family", "gemma"]) == 0
    assert "gemma3-270m" in capsys.readouterr().out
    assert cli.main(["presets", "--family", "gemmma"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("zoo presets: error: Unknown family 'gemmma'; expected one of") and "'gemma'" in err
    assert "\n" not in err


def test_describe_prints_sizes_and_a_typo_gets_did_you_mean(capsys):
    assert cli.main(["describe", "bert-tiny"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("bert-tiny (bert)") and "parameters:" in out and "FLOPs per token" in out
    assert cli.main(["describe", "bert-tinny"]) == 2
    assert "Did you mean 'bert-tiny'" in capsys.readouterr().err


def test_unknown_recipe_is_refused_with_the_list(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["train", "gpt-chars"])
    assert exit_info.value.code == 2
    assert "gpt_char" in capsys.readouterr().err


@pytest.mark.parametrize(
    "recipe, preset, close",
    [("gpt_char", "nanno", "gpt-nano"), ("translate", "transformer-tinny", "transformer-tiny"),
     ("bert_pretrain", "bert-smal", "bert-small"), ("bert_classify", "bert-tny", "bert-tiny"),
     ("demo", "transformer-tiy", "transformer-tiny")],
)
def test_a_preset_typo_gets_did_you_mean_before_anything_is_read_or_written(recipe, preset, close, tmp_path, capsys):
    output = tmp_path / "run"
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["train", recipe, "--preset", preset, "--data", str(tmp_path / "nowhere"), "--output", str(output)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"--preset {preset}" in err and "did you mean" in err and close in err
    assert not output.exists()


def test_bad_data_is_one_clear_line_and_writes_nothing(tmp_path, capsys):
    (tmp_path / "train.tsv").write_text("label\tsentence\n1\tgood\nbad row\n")
    code = cli.main(["train", "bert-classify", "--data", str(tmp_path), "--output", str(tmp_path / "run")])
    assert code == 2
    assert "train.tsv, line 3: expected 'label<TAB>text'" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_a_tfds_error_is_one_line(tmp_path, capsys):
    code = cli.main(["train", "translate", "--data", "tfds:no_such_dataset_here", "--output", str(tmp_path / "run")])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "tfds" in err[0] and "no_such_dataset_here not found" in err[0]
    assert not (tmp_path / "run").exists()


def test_a_missing_optional_package_is_reported_at_start(tmp_path, capsys, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    missing = {"sacrebleu", "tensorflow_datasets"}
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in missing else real(name, *a))
    code = cli.main(["train", "translate", "--data", str(tmp_path / "nowhere"), "--output", str(tmp_path / "run")])
    assert code == 2
    assert "pip install sacrebleu" in capsys.readouterr().err  # before the data is even read
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["train", "bert_classify", "--data", "tfds:glue/sst2", "--output", str(tmp_path / "run")])
    assert exit_info.value.code == 2
    assert "tfds:glue/sst2 needs the `tensorflow_datasets` package" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_size_flags_with_a_pretrained_backbone_are_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["train", "bert_classify", "--pretrained", str(tmp_path), "--num-layers", "3",
                  "--output", str(tmp_path / "run")])
    assert exit_info.value.code == 2
    assert "--num-layers: the sizes are the pretrained backbone's" in capsys.readouterr().err


def test_using_a_folder_that_is_not_a_run_is_one_clear_line(tmp_path, capsys):
    for command in (["sample", str(tmp_path), "hi"], ["translate", str(tmp_path), "hallo"],
                    ["classify", str(tmp_path), "good"], ["eval", str(tmp_path)]):
        assert cli.main(command) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "no run.json" in err[0] and "zoo train NAME --output DIR" in err[0], command


def test_a_run_of_the_wrong_kind_is_refused_before_loading(tmp_path, capsys):
    (tmp_path / "run.json").write_text(json.dumps({"recipe": "bert_pretrain", "args": {}, "finished": True}))
    (tmp_path / "model.keras").write_bytes(b"not loaded: refused before")
    assert cli.main(["sample", str(tmp_path), "hi"]) == 2
    assert "a bert_pretrain run; `zoo sample` needs a run of gpt_char" in capsys.readouterr().err
    assert cli.main(["classify", str(tmp_path), "good"]) == 2
    assert "needs a run of bert_classify" in capsys.readouterr().err
