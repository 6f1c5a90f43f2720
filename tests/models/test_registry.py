"""The family registry: every family is one record, registered once, and
the factory, the checkpoint drivers and the `zoo` command read it."""

import keras
import pytest

import zoo
from zoo import families
from zoo.checkpoints import registry as checkpoint_registry
from zoo.presets import PRESETS


def test_every_preset_names_a_registered_family_and_builds_its_backbone_class():
    for name, preset in PRESETS.items():
        family = families.get(preset["family"])
        assert family.name == preset["family"]
    for family in families.FAMILIES.values():
        preset = next(name for name, p in PRESETS.items() if p["family"] == family.name and name.endswith(("nano", "tiny")))
        assert type(zoo.build(preset)) is family.backbone
        for task, spec in family.tasks.items():
            model = zoo.build(preset, task=task)
            assert type(model) is (spec.model_class or family.backbone)
            assert families.of_model(model) is family


def test_the_checkpoint_drivers_read_the_families_modules():
    modules = {f.name: f.weight_map_module() for f in families.FAMILIES.values()}
    assert {name: m.__name__ if m else None for name, m in modules.items()} == {
        "gpt": "zoo.models.gpt.weight_map", "llama": "zoo.models.llama.weight_map", "gemma": "zoo.models.gemma.weight_map",
        "bert": "zoo.models.bert.weight_map", "transformer": "zoo.models.transformer.weight_map",
    }
    assert set(checkpoint_registry.WEIGHT_MAPS) == {m for m in modules.values() if m is not None}
    assert checkpoint_registry.for_model(zoo.build("gemma3-nano", task="causal_lm")) is modules["gemma"]
    assert checkpoint_registry.for_model(zoo.build("transformer-tiny")) is modules["transformer"]  # Marian's
    with pytest.raises(ValueError, match="Checkpoints exist for .*; got a Dense"):
        checkpoint_registry.for_model(keras.layers.Dense(2))


def test_a_family_is_registered_once_and_an_unknown_one_is_named():
    with pytest.raises(ValueError, match="A family named 'llama' is registered already"):
        families.register(families.Family("llama", object))
    with pytest.raises(ValueError, match="Unknown family 'lama'; expected one of .*'llama'"):
        zoo.list_presets("lama")
    with pytest.raises(ValueError, match="Unknown task 'masked_lm' for the gemma family of 'gemma3-nano'"):
        zoo.build("gemma3-nano", task="masked_lm")
