"""Renamed public names still work for one release, each with a
DeprecationWarning that names the new one, and return the same object."""

import importlib

import pytest

import zoo


@pytest.mark.parametrize(
    "module, name, new",
    [
        ("zoo.generation", "generate", lambda: zoo.generate),
        ("zoo.pretrained", "from_pretrained", lambda: zoo.checkpoints.from_pretrained),
        ("zoo.pretrained", "checkpoint_folder", lambda: zoo.checkpoints.checkpoint_folder),
        ("zoo.convert", "from_keras_hub", lambda: zoo.checkpoints.from_keras_hub),
        ("zoo.convert", "huggingface_names", lambda: zoo.checkpoints.huggingface_names),
        ("zoo.checkpoints", "llama", lambda: importlib.import_module("zoo.models.llama.checkpoints")),
        ("zoo.checkpoints", "gpt2", lambda: importlib.import_module("zoo.models.gpt.checkpoints")),
        ("zoo.checkpoints", "gemma3", lambda: importlib.import_module("zoo.models.gemma.checkpoints")),
        ("zoo.checkpoints", "bert", lambda: importlib.import_module("zoo.models.bert.checkpoints")),
    ],
)
def test_an_old_name_warns_and_is_the_new_one(module, name, new):
    with pytest.warns(DeprecationWarning, match=rf"{module}\.{name} is .*next release"):
        old = getattr(importlib.import_module(module), name)
    assert old is new()


def test_the_old_generate_gives_what_the_new_one_gives():
    lm = zoo.build("gpt-nano", task="causal_lm")
    with pytest.warns(DeprecationWarning):
        old = zoo.generation.generate(lm, [[1, 2, 3]], 5, sampler="top_k", k=3, seed=4)
    new = zoo.generate(lm, [[1, 2, 3]], 5, sampler="top_k", k=3, seed=4)
    assert old.sequences == new.sequences


@pytest.mark.parametrize("module", ["zoo.generation", "zoo.pretrained", "zoo.convert", "zoo.checkpoints"])
def test_a_name_that_never_was_is_an_attribute_error(module):
    with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
        getattr(importlib.import_module(module), "no_such_name")
