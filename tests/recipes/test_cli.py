"""The `zoo` console command: presets, describe, and `zoo train NAME` running
the recipes' own `main(argv)`."""

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from zoo import cli

ROOT = Path(__file__).resolve().parents[2]


def test_the_console_script_is_declared():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["zoo"] == "zoo.cli:main"


def test_every_recipe_exposes_main():
    import importlib

    for name, module in cli.RECIPES.items():
        assert callable(importlib.import_module(module).main), name


def test_presets_lists_each_family(capsys):
    assert cli.main(["presets"]) == 0
    out = capsys.readouterr().out
    for name in ("transformer-tiny", "transformer-small", "bert-tiny", "bert-small", "gpt-nano"):
        assert name in out
    assert cli.main(["presets", "--family", "bert"]) == 0
    out = capsys.readouterr().out
    assert "bert-tiny" in out and "gpt-nano" not in out


def test_describe_prints_sizes(capsys):
    assert cli.main(["describe", "bert-tiny"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("bert-tiny (bert)") and "parameters:" in out and "FLOPs per token" in out
    assert cli.main(["describe", "bert-tinny"]) == 2
    assert "Did you mean 'bert-tiny'" in capsys.readouterr().err


def test_train_runs_a_recipe_with_its_flags(tmp_path, capsys):
    output = tmp_path / "run"
    flags = ["--output", str(output), "--num-pairs", "400", "--epochs", "1", "--batch-size", "32",
             "--jit-compile", "false"]
    assert cli.main(["train", "demo", *flags]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("val_accuracy=")
    # A second run into the same folder is refused with a message, not a traceback.
    assert cli.main(["train", "demo", *flags]) == 2
    assert "--overwrite" in capsys.readouterr().err


def test_bad_data_is_one_clear_line(tmp_path, capsys):
    (tmp_path / "train.tsv").write_text("label\tsentence\n1\tgood\nbad row\n")
    code = cli.main(["train", "bert-classify", "--data", str(tmp_path), "--output", str(tmp_path / "run")])
    assert code == 2
    assert "train.tsv, line 3: expected 'label<TAB>text'" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_unknown_recipe_is_refused(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["train", "gpt-chars"])
    assert exit_info.value.code == 2
    assert "gpt-char" in capsys.readouterr().err


def test_python_dash_m_recipe_reports_bad_data_without_a_traceback(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "recipes.translate", "--data", str(tmp_path), "--output", str(tmp_path / "run")],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert "train.de: does not exist" in result.stderr.strip().splitlines()[-1]
