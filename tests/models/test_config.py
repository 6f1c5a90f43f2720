"""A family's config: the one list of its fields, what the backbone, the
presets, `get_config` and the factory's overrides read."""

import dataclasses

import numpy as np
import pytest

import zoo
from zoo.families import FAMILIES
from zoo.models import (EncoderDecoderConfig, Gemma3Backbone, Gemma3Config, GPTBackbone, GPTConfig, LlamaBackbone,
                        LlamaConfig)
from zoo.models.config import ModelConfig, Preset
from zoo.presets import PRESETS

NANO = dict(vocabulary_size=50, num_layers=2, num_heads=4, hidden_dim=16, intermediate_dim=32)


def test_every_family_has_a_config_and_its_presets_are_instances_of_it():
    for family in FAMILIES.values():
        assert issubclass(family.config, ModelConfig) and dataclasses.is_dataclass(family.config)
        assert family.presets, family.name
        for name, preset in family.presets.items():
            assert isinstance(preset, Preset) and type(preset.config) is family.config, name
            assert PRESETS[name]["family"] == family.name


def test_the_backbone_takes_its_config_or_the_fields_and_keeps_it():
    config = LlamaConfig(**NANO, num_key_value_heads=2, query_key_norm=True)
    by_config, by_fields = LlamaBackbone(config=config), LlamaBackbone(**NANO, num_key_value_heads=2, query_key_norm=True)
    assert by_config.config == by_fields.config == config
    assert by_config.get_config() | {"name": None} == by_fields.get_config() | {"name": None}
    assert by_config.query_key_norm and by_config.head_dim == 4  # fields and derived values as attributes
    positional = GPTBackbone(50, 2, 4, 16)
    assert positional.config == GPTConfig(vocabulary_size=50, num_layers=2, num_heads=4, hidden_dim=16)


def test_get_config_echoes_the_fields_and_from_config_rebuilds_the_same_model():
    backbone = LlamaBackbone(**NANO, num_key_value_heads=2, max_sequence_length=16)
    config = backbone.get_config()
    assert {k: config[k] for k in LlamaConfig.argument_names()} == backbone.config.to_dict()
    rebuilt = LlamaBackbone.from_config(config)
    rebuilt.set_weights(backbone.get_weights())
    token_ids = np.array([[3, 4, 5, 6]], "int32")
    np.testing.assert_allclose(rebuilt({"token_ids": token_ids}), backbone({"token_ids": token_ids}), atol=1e-6)


def test_a_none_stands_for_its_derived_value_and_follows_a_change():
    config = GPTConfig(vocabulary_size=50, num_layers=2, num_heads=4, hidden_dim=16)
    assert config.intermediate_dim == 64  # 4 d
    assert config.replace(hidden_dim=32).intermediate_dim == 128
    assert config.replace(hidden_dim=32, intermediate_dim=40).intermediate_dim == 40
    assert config.arguments()["intermediate_dim"] is None and config.to_dict()["intermediate_dim"] == 64
    translator = EncoderDecoderConfig(vocabulary_size=30, num_layers=1, num_heads=2, hidden_dim=8)
    assert translator.replace(vocabulary_size=40).source_vocabulary_size == 40


def test_an_override_of_a_preset_changes_what_follows_from_it():
    model = zoo.build("transformer-tiny", vocabulary_size=50)
    assert model.config.vocabulary_size == model.config.source_vocabulary_size == 50


@pytest.mark.parametrize(
    "arguments, message",
    [
        (dict(NANO, num_layers=0), r"`num_layers` must be a positive integer; got 0"),
        (dict(NANO, hidden_dim=18),
         r"hidden_dim=18 must be divisible by num_heads=4 \(each head is hidden_dim / num_heads wide\), "
         r"or pass `head_dim`"),
        ({k: v for k, v in NANO.items() if k != "hidden_dim"}, r"LlamaConfig needs 'hidden_dim'"),
    ],
)
def test_bad_fields_are_refused_in_one_line(arguments, message):
    with pytest.raises((ValueError, TypeError), match=message):
        LlamaBackbone(**arguments)


def test_a_config_and_its_fields_together_or_an_unknown_field_are_refused():
    config = LlamaConfig(**NANO)
    with pytest.raises(TypeError, match="either `config=` or LlamaConfig's fields"):
        LlamaBackbone(config=config, num_layers=3)
    with pytest.raises(TypeError, match="`config` must be a LlamaConfig; got GPTConfig"):
        LlamaBackbone(config=GPTConfig(vocabulary_size=50, num_layers=2, num_heads=4, hidden_dim=16))
    with pytest.raises(ValueError, match=r"Unknown field\(s\) \['num_layer'\] of LlamaConfig"):
        config.replace(num_layer=3)


def test_a_preset_added_to_a_family_is_listed_and_built():
    presets = FAMILIES["llama"].presets
    presets["llama-test-added"] = Preset("Tests.", LlamaConfig(**NANO, num_key_value_heads=1))
    try:
        assert "llama-test-added" in zoo.list_presets("llama")
        assert zoo.build("llama-test-added").num_key_value_heads == 1
    finally:
        del presets["llama-test-added"]
    assert "llama-test-added" not in PRESETS


@pytest.mark.parametrize("config", [
    LlamaConfig(**NANO, num_key_value_heads=2, query_key_norm=True, attention_bias=True,
                rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                  original_max_position_embeddings=16)),
    Gemma3Config(**{**NANO, "num_layers": 6}, num_key_value_heads=1, head_dim=8, sliding_window=3,
                 query_pre_attention_scalar=16),
], ids=["llama", "gemma"])
def test_each_layer_attends_as_its_config_says(config):
    """A rotary decoder's variant flags are read in its config
    (`attention_options(i)`) and nowhere else: each block's self-attention
    holds what the config gives for its layer."""
    family = {LlamaConfig: LlamaBackbone, Gemma3Config: Gemma3Backbone}[type(config)]
    backbone = family(config=config)
    for i, block in enumerate(backbone.blocks):
        options = config.attention_options(i)
        attention = block.self_attention
        assert {name: getattr(attention, name) for name in options} == options, i
        assert attention.num_key_value_heads == config.num_key_value_heads
    if isinstance(config, Gemma3Config):
        windows = [block.self_attention.sliding_window for block in backbone.blocks]
        assert windows == [3, 3, 3, 3, 3, None]  # five local layers, then a global one
        assert {block.self_attention.attention_scale for block in backbone.blocks} == {16 ** -0.5}
        assert all(block.self_attention.query_key_norm for block in backbone.blocks)
