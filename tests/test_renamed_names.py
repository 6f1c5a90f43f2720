"""Renamed keyword arguments still work for one release, each with a
DeprecationWarning that names the new one, and a file saved under a former
name loads with equal outputs."""

import importlib
import zipfile

import numpy as np
import pytest

import zoo


@pytest.mark.parametrize("module", ["zoo.generation", "zoo.checkpoints"])
def test_a_name_that_never_was_is_an_attribute_error(module):
    with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
        getattr(importlib.import_module(module), "no_such_name")


@pytest.mark.parametrize("preset", ["llama-nano", "gemma3-nano"])
def test_the_rms_norm_epsilons_former_name_warns_and_sets_it(preset):
    model = zoo.build(preset, rms_norm_epsilon=1e-3)
    fields = {k: v for k, v in model.config.to_dict().items() if k != "rms_norm_epsilon"}
    with pytest.warns(DeprecationWarning, match=r"`layer_norm_epsilon` is now `rms_norm_epsilon`.*next release"):
        config, _ = type(model.config).take((), {**fields, "layer_norm_epsilon": 1e-3})
    assert config == model.config
    with pytest.warns(DeprecationWarning, match="rms_norm_epsilon"):
        assert zoo.build(preset, layer_norm_epsilon=1e-3).config == model.config
    with pytest.warns(DeprecationWarning, match="rms_norm_epsilon"):
        assert model.config.replace(layer_norm_epsilon=1e-4).rms_norm_epsilon == 1e-4
    with pytest.raises(TypeError, match="pass `rms_norm_epsilon` only"):
        zoo.build(preset, layer_norm_epsilon=1e-3, rms_norm_epsilon=1e-3)


def test_a_llama_file_saved_with_the_former_name_loads_with_equal_outputs(tmp_path):
    lm = zoo.build("llama-nano", task="causal_lm", rms_norm_epsilon=1e-3)
    path = tmp_path / "new.keras"
    zoo.save(lm, path)
    former = tmp_path / "former.keras"  # the same file as the version before the rename wrote it
    with zipfile.ZipFile(path) as source, zipfile.ZipFile(former, "w") as target:
        for item in source.infolist():
            data = source.read(item.filename)
            if item.filename == "config.json":
                data = data.replace(b'"rms_norm_epsilon"', b'"layer_norm_epsilon"')
                assert b"layer_norm_epsilon" in data
            target.writestr(item, data)
    with pytest.warns(DeprecationWarning, match="rms_norm_epsilon"):
        loaded = zoo.load(former)
    assert loaded.backbone.config.rms_norm_epsilon == 1e-3
    token_ids = np.array([[1, 2, 3, 4]])
    np.testing.assert_allclose(loaded.predict_on_batch({"token_ids": token_ids}),
                               lm.predict_on_batch({"token_ids": token_ids}), atol=1e-6)


@pytest.mark.parametrize("block", [zoo.layers.DecoderBlock, zoo.layers.EncoderBlock])
def test_the_blocks_former_epsilon_name_warns_and_sets_it(block):
    with pytest.warns(DeprecationWarning, match=r"`layer_norm_epsilon` is now `norm_epsilon`"):
        layer = block(2, 8, layer_norm_epsilon=1e-3)
    assert layer.norm_epsilon == 1e-3 and "layer_norm_epsilon" not in layer.get_config()
    assert block.from_config(layer.get_config()).norm_epsilon == 1e-3


def test_the_decoder_blocks_former_cross_attention_flag_warns_and_sets_it():
    with pytest.warns(DeprecationWarning, match=r"`cross_attention` is now `use_cross_attention`"):
        block = zoo.layers.DecoderBlock(2, 8, cross_attention=True)
    assert block.use_cross_attention and block.cross_attention_layer is not None
    config = block.get_config()
    assert config["use_cross_attention"] and "cross_attention" not in config
