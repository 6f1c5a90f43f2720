"""The zoo factory: presets, exact parameter counts, describe, bad input."""

import pytest

import zoo
from tests.models.conftest import bert_inputs, gpt_inputs, seq2seq_inputs

# The counts of the published checkpoints.
PUBLISHED = {
    "gpt2-small": 124_439_808,
    "gpt2-medium": 354_823_168,
    "bert-base": 109_482_240,
    "bert-large": 335_141_888,
    "t5-small": 60_506_624,
    "flan-t5-small": 76_961_152,
    "flan-t5-base": 247_577_856,
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_parameter_counts_match_the_published_checkpoints(name):
    assert zoo.describe(name)["parameters"] == PUBLISHED[name]


def encoder_decoder_parameters(vocabulary_size, layers, d, d_ff):
    """The encoder-decoder's count from its architecture: one shared, tied
    (V, d) table, sinusoidal positions (no weights), post-LN blocks; every
    Dense with a bias, every LayerNorm with gamma and beta."""
    attention = 4 * (d * d + d)  # Q, K, V and output projections
    feed_forward = (d * d_ff + d_ff) + (d_ff * d + d)
    norm = 2 * d
    encoder_block = attention + feed_forward + 2 * norm
    decoder_block = 2 * attention + feed_forward + 3 * norm  # self- and cross-attention
    return vocabulary_size * d + layers * (encoder_block + decoder_block)


# The README's table (and the architecture formula above) - not the code's own numbers.
TRANSFORMER = {
    # name: (vocabulary, layers, d, d_ff, context, parameters, train FLOPs/token)
    "transformer-base": (37_000, 6, 512, 2048, 256, 63_082_496, 283_705_344),
    "transformer-big": (37_000, 6, 1024, 4096, 256, 214_245_376, 1_095_892_992),
}


@pytest.mark.parametrize("name", sorted(TRANSFORMER))
def test_transformer_parameter_counts_and_flops_are_exact(name):
    vocabulary, layers, d, d_ff, context, parameters, flops = TRANSFORMER[name]
    assert encoder_decoder_parameters(vocabulary, layers, d, d_ff) == parameters
    # Kaplan et al.: 6 x non-embedding parameters + 12 layers context width,
    # counted for both stacks.
    assert 6 * (parameters - vocabulary * d) + 2 * 12 * layers * context * d == flops
    info = zoo.describe(name)  # builds the model to count, never runs it
    assert (info["parameters"], info["non_embedding_parameters"]) == (parameters, parameters - vocabulary * d)
    assert info["training_flops_per_token"] == flops


def test_every_preset_is_listed_and_described():
    names = zoo.list_presets()
    for required in ["transformer-base", "transformer-big", "gpt2-small", "gpt2-medium", "bert-base",
                     "bert-large", "gpt-nano", "bert-tiny", "transformer-tiny"]:
        assert required in names
    assert set(zoo.list_presets("bert")) <= set(names)
    info = zoo.describe("gpt-nano")
    assert info["family"] == "gpt"
    # gpt-nano by hand: token (100, 32) and position (32, 32) tables; two
    # pre-LN blocks with biases; a final LayerNorm.
    d, d_ff, layers, vocabulary, context = 32, 64, 2, 100, 32
    block = 4 * (d * d + d) + (d * d_ff + d_ff) + (d_ff * d + d) + 2 * (2 * d)
    embeddings = vocabulary * d + context * d
    assert info["parameters"] == embeddings + layers * block + 2 * d == 21_376
    assert info["non_embedding_parameters"] == layers * block + 2 * d
    assert info["training_flops_per_token"] == 6 * (layers * block + 2 * d) + 12 * layers * context * d


def test_describe_counts_the_weights_of_the_built_model_and_leaves_no_variable_behind():
    """describe builds the shapes without values: the count of `zoo.build`'s
    model, for every family; a model built and trained afterwards
    initializes only its own variables."""
    import keras
    import numpy as np
    from keras.src.backend.common import global_state

    for name, overrides in [("gpt-nano", {}), ("llama-nano", {"num_key_value_heads": 1}), ("gemma3-nano", {}),
                            ("bert-tiny", {}), ("transformer-tiny", {})]:
        assert zoo.describe(name, **overrides)["parameters"] == zoo.build(name, **overrides).count_params(), name
        assert not global_state.get_global_attribute("uninitialized_variables")
    lm = zoo.build("gpt-nano", task="causal_lm", dropout=0.0)
    x = np.random.default_rng(0).integers(1, 100, size=(4, 9))
    lm.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    losses = [lm.train_on_batch({"token_ids": x[:, :-1]}, x[:, 1:]) for _ in range(3)]
    assert np.all(np.isfinite(losses)) and losses[-1] < losses[0]


def test_tasks_are_chosen_by_argument():
    assert isinstance(zoo.build("gpt-nano", task="causal_lm"), zoo.models.GPTCausalLM)
    assert isinstance(zoo.build("gpt-nano"), zoo.models.GPTBackbone)
    classifier = zoo.build("bert-tiny", task="classifier", num_classes=5)
    assert classifier(bert_inputs()).shape == (2, 5)
    assert isinstance(zoo.build("bert-tiny", task="masked_lm"), zoo.models.BertMaskedLM)
    assert isinstance(zoo.build("transformer-tiny", task="seq2seq"), zoo.models.EncoderDecoder)


def test_overrides_reach_the_model():
    model = zoo.build("gpt-nano", num_layers=3, hidden_dim=48, num_heads=6)
    assert len(model.blocks) == 3 and model.hidden_dim == 48


def test_unknown_preset_lists_the_closest_names():
    with pytest.raises(ValueError, match="Unknown preset 'gpt2-smal'.*gpt2-small"):
        zoo.build("gpt2-smal")


def test_unknown_override_is_an_error_not_ignored():
    with pytest.raises(ValueError, match=r"Unknown override\(s\) \['num_segments'\]"):
        zoo.build("gpt-nano", num_segments=2)  # a BERT argument
    with pytest.raises(ValueError, match="Unknown task 'classifier'"):
        zoo.build("gpt-nano", task="classifier")


def test_num_classes_below_two_is_an_error():
    with pytest.raises(ValueError, match="num_classes"):
        zoo.build("bert-tiny", task="classifier", num_classes=1)


def test_token_ids_outside_the_vocabulary_are_an_error_in_eager_calls():
    model = zoo.build("gpt-nano")
    x = gpt_inputs()
    x["token_ids"][0, 3] = 100  # vocabulary is 100
    with pytest.raises(ValueError, match=r"Token id 100 is outside the vocabulary.*\[0, 100\)"):
        model(x)


def test_sequences_longer_than_the_maximum_length_are_an_error():
    model = zoo.build("gpt-nano")  # context 32
    with pytest.raises(ValueError, match="longer than the model's maximum sequence length 32"):
        model(gpt_inputs(length=40))


def test_missing_or_misnamed_inputs_are_an_error():
    model = zoo.build("bert-tiny")
    x = bert_inputs()
    x["segment_id"] = x.pop("segment_ids")
    with pytest.raises(ValueError, match=r"missing \['segment_ids'\]; unexpected \['segment_id'\]"):
        model(x)


def test_encoder_and_decoder_batches_of_different_size_are_an_error():
    model = zoo.build("transformer-tiny")
    x = seq2seq_inputs()
    x["decoder_token_ids"] = x["decoder_token_ids"][:1]
    x["decoder_padding_mask"] = x["decoder_padding_mask"][:1]
    with pytest.raises(ValueError, match="batch size"):
        model(x)


def test_plot_model_draws_each_family(tmp_path):
    import shutil

    pytest.importorskip("pydot", reason="plot_model needs pydot: pip install -e '.[test]' installs it")
    if shutil.which("dot") is None:
        pytest.skip("plot_model needs graphviz's `dot` program, a system package (apt-get install graphviz), "
                    "which is not on PATH here")
    for name in ["gpt-nano", "bert-tiny", "transformer-tiny"]:
        path = zoo.plot(name, tmp_path / f"{name}.png")
        assert path.exists() and path.stat().st_size > 1000


def test_dropout_goes_to_the_backbone_and_classifier_dropout_to_the_head():
    model = zoo.build("bert-tiny", task="classifier", num_classes=2, dropout=0.3, classifier_dropout=0.2)
    assert model.backbone._zoo_config["dropout"] == 0.3
    assert model.dropout_layer.rate == 0.2
