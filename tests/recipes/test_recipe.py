"""The recipes' skeleton (recipes/recipe.py): `run` calls a recipe's parts
in their order, hands `report` the saved model, records and prints the
figures (the recipe's own last) and marks the run finished; every recipe
module fills in the same parts."""

import argparse
import json
import types

import keras
import numpy as np
import pytest

from recipes import recipe
from recipes.cli import RECIPES, recipe_module

PARTS = ("parse", "read_data", "open_folder", "make_model", "fit", "evaluate")


def fake_recipe(output, calls, validation_split=None):
    """A recipe whose model is one Dense layer, recording each part's call."""
    from recipes.run_folder import MODEL

    def parse(argv):
        calls.append("parse")
        parser = argparse.ArgumentParser()
        parser.add_argument("--seed", type=int, default=3)
        args = parser.parse_args(argv)
        args.__dict__.update(output=str(output), overwrite=False, strategy="default", mesh=None, batch_size=2,
                             mixed_precision=False, jit_compile="false", preset=None)
        return args

    def read_data(args):
        calls.append("read_data")
        return {"x": np.ones((2, 3), "float32")}

    def open_folder(args, data):
        calls.append("open_folder")
        return recipe.open_run_folder("fake", args, "no-preset")

    def make_model(args, data):
        calls.append("make_model")
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
        model.compile(loss="mse")
        return model

    def fit(model, args, folder, data):
        calls.append("fit")
        model.layers[0].kernel.assign(np.full((3, 2), 0.5, "float32"))
        model.save(folder / MODEL)
        return {"steps": 7}

    def evaluate(folder, data=None, split="val", model=None):
        return {"val_other": 0.25, "val_score": float(np.sum(model.predict_on_batch(np.ones((1, 3)))))}

    def report(model, args, folder, data):
        calls.append(("report", model))
        return evaluate(folder.path, model=model)

    module = types.SimpleNamespace(parse=parse, read_data=read_data, open_folder=open_folder,
                                   make_model=make_model, fit=fit, evaluate=evaluate, report=report)
    if validation_split:
        module.VALIDATION_SPLIT = validation_split
    return module


def test_run_calls_the_parts_in_order_and_reports_on_the_saved_model(tmp_path, capsys):
    calls = []
    figure = recipe.run(fake_recipe(tmp_path / "run", calls), ["--seed", "5"])
    assert calls[:5] == ["parse", "read_data", "open_folder", "make_model", "fit"] and len(calls) == 6
    reported = calls[5][1]
    assert calls[5][0] == "report" and isinstance(reported, keras.Model)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(reported.layers[0].kernel), np.full((3, 2), 0.5))
    assert figure == pytest.approx(3.0)  # the reloaded model's: 2 outputs of 3 x 0.5
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0] == "fake: preset no-preset"
    assert lines[-3:] == ["val_other=0.2500", f"run folder: {tmp_path / 'run'}", "val_score=3.0000"]
    record = json.loads((tmp_path / "run" / "run.json").read_text())
    assert record["finished"] and record["recipe"] == "fake" and record["args"]["seed"] == 5
    assert record["results"]["val_score"] == pytest.approx(3.0) and record["results"]["steps"] == 7
    assert record["results"]["total_seconds"] >= record["results"]["train_seconds"] > 0
    assert record["figures"] == {"val": {"val_other": 0.25, "val_score": pytest.approx(3.0)}}


def test_without_report_the_figures_are_evaluates_under_the_recipes_validation_split(tmp_path):
    calls = []
    module = fake_recipe(tmp_path / "run", calls, validation_split="dev")
    del module.report
    assert recipe.run(module, []) == pytest.approx(3.0)
    assert calls == ["parse", "read_data", "open_folder", "make_model", "fit"]
    assert set(json.loads((tmp_path / "run" / "run.json").read_text())["figures"]) == {"dev"}


def test_a_bad_flag_stops_the_run_before_anything_is_read_or_written(tmp_path):
    calls = []
    with pytest.raises(SystemExit):
        recipe.run(fake_recipe(tmp_path / "run", calls), ["--seed", "x"])
    assert calls == ["parse"] and not (tmp_path / "run").exists()


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_every_recipe_fills_in_the_skeleton(name):
    module = recipe_module(name)
    missing = [part for part in PARTS if not callable(getattr(module, part, None))]
    assert not missing, f"{name} lacks {missing}"
    assert recipe.validation_split(module) in ("val", "dev")
