"""Every error path a user can hit, and where its message is tested.

Each test here checks the part of a message that names what was wrong and
what was expected. Paths already tested elsewhere are not repeated; this
map says where they are, so that the whole list reads in one place.

Bad token ids
    tests/layers/test_embeddings.py   ids V, 100 and -1 (TokenEmbedding,
                                      TokenAndPositionEmbedding)
    tests/models/test_factory.py      id 100 into gpt-nano
    tests/generation/test_generate.py a prompt id outside the vocabulary
    tests/data/test_pipelines.py      `check_token_ids` (too big, negative,
                                      ragged, flat)
    tests/data/test_tokenizers.py     unknown characters, ids to decode
    here: a negative id or one past the vocabulary into each family (BERT,
    the encoder's and the decoder's ids); negative prompt ids and source
    ids in `generate`; segment ids and masked-LM positions (known gaps).

Lengths beyond the maximum
    tests/layers/test_embeddings.py   PositionEmbedding and
                                      TokenAndPositionEmbedding, eager and
                                      symbolic
    tests/models/test_factory.py      gpt-nano, length 40
    tests/generation/test_generate.py prompt + max_new_tokens > 32
    here: bert-tiny; the source and the target of transformer-tiny; a
    source too long for `generate`; beam search too long; `predict` after
    a retrace (a known gap on TensorFlow).

Missing, misnamed or malformed inputs
    tests/models/test_factory.py      misnamed `segment_ids`; encoder and
                                      decoder batches of different sizes
    tests/layers/test_blocks.py       `encoder_output` missing or
                                      unexpected; batch sizes that differ
    tests/layers/test_attention.py    `key_value` missing or unexpected;
                                      `padding_mask` of a wrong shape
    here: a missing input (GPT, masked LM), only an unexpected one
    (encoder-decoder), a bare array, a padding mask of the wrong length
    into a model; a missing input under `predict` on JAX (a known gap).

Bad sampler arguments (`zoo.generate`, `beam_search`)
    tests/generation/test_generate.py an empty sequence, an empty batch, a
                                      flat sequence, max_new_tokens=0, too
                                      long, p=0 and 1.5, k=0,
                                      temperature=0, num_beams=0, an unknown
                                      sampler, a source for a decoder-only
                                      model, no source for an
                                      encoder-decoder, an encoder-only
                                      BertMaskedLM
    here: negative or fractional max_new_tokens; k past the vocabulary or
    fractional; negative p and temperature; stop ids outside the
    vocabulary; a non-integer seed; fractional num_beams; a non-numeric
    length penalty; no prompt; a 3-D prompt; float ids; padding masks
    with a list, of the wrong shape, or hiding a whole row; sources of the
    wrong count, empty, too long or outside the vocabulary; a BertBackbone,
    a BertClassifier or a non-zoo model.

Bad data files
    tests/data/test_sources.py        missing file, a folder, empty file,
                                      not UTF-8; parallel files missing,
                                      empty, of different line counts, with
                                      an empty line; TSV row without a tab
                                      (no label), non-integer label, a
                                      header without 'label', only a
                                      header, missing .tsv; a TFDS set
                                      without the language
    tests/data/test_pipelines.py      text shorter than one block;
                                      sources and targets of different
                                      counts, an empty source, fewer
                                      examples than a batch; labels and
                                      sequences of different counts
    tests/data/test_tokenizers.py     vocabulary files missing or without
                                      '[PAD]' first
    tests/recipes/test_gpt_char.py    text too short, missing file,
                                      --overwrite
    tests/recipes/test_translate.py   line counts differ, val file missing,
                                      empty, with an empty line
    tests/recipes/test_bert.py        TSV row without a label, non-integer
                                      label, dev.tsv missing or empty, a
                                      missing pretrained run
    tests/recipes/test_demo.py        --data other than the toy grammar
    (all covered; nothing added here)

Unknown preset, task or override
    tests/models/test_factory.py      a misspelled preset (with the
                                      closest names), an override of
                                      another family, an unknown task,
                                      num_classes < 2
    here: a preset close to nothing (lists them all); `describe` with a
    misspelled preset; an override of another task of the same family;
    an unknown task of the encoder-decoder; bad override values.

Quantization
    tests/models/test_quantize.py     an unknown mode and GPTQ (in
                                      `quantize` and `from_pretrained`,
                                      before the folder is read); a model
                                      quantized twice; a config naming a
                                      layer the model lacks
    tests/recipes/test_cli_quantize.py  --quantize with an unknown mode or
                                      GPTQ, for sample, translate, classify
                                      and eval, before the run is read
    here: `export` of a quantized model, in both formats.

An error path whose error is still unclear is marked `xfail(strict=True)`,
saying what happens instead and naming that error (`raises=`), so that any
other outcome - no error at all, or a different crash - fails the run; when
it is fixed, strict xfail turns its passing into a failure and the marker
goes. `make test` runs this file on JAX and on TensorFlow, so each backend's
errors are checked.
"""

import keras
import numpy as np
import pytest

import zoo
from tests.models.conftest import bert_inputs, gpt_inputs, seq2seq_inputs
from zoo import generate
from zoo.generation import beam_search


@pytest.fixture(scope="module")
def models():
    keras.utils.set_random_seed(0)
    return {
        "gpt": zoo.build("gpt-nano", task="causal_lm"),  # V 100, context 32
        "bert": zoo.build("bert-tiny"),  # V 100, length 32
        "masked_lm": zoo.build("bert-tiny", task="masked_lm"),
        "transformer": zoo.build("transformer-tiny"),  # V 1000, length 32
    }


def inputs_of(family, **kwargs):
    if family == "gpt":
        return gpt_inputs(**kwargs)
    if family == "bert":
        return bert_inputs(**kwargs)
    return seq2seq_inputs(**kwargs)


# --- Bad token ids -----------------------------------------------------------


@pytest.mark.parametrize(
    "family, name, bad, vocabulary",
    [
        ("gpt", "token_ids", -5, 100),
        ("bert", "token_ids", -1, 100),
        ("bert", "token_ids", 100, 100),
        ("transformer", "encoder_token_ids", 1000, 1000),
        ("transformer", "decoder_token_ids", -1, 1000),
    ],
)
def test_token_id_outside_the_vocabulary_names_the_id_and_the_range(models, family, name, bad, vocabulary):
    x = inputs_of(family)
    x[name][1, 2] = bad
    message = rf"Token id {bad} is outside the vocabulary: ids must be in \[0, {vocabulary}\)"
    with pytest.raises(ValueError, match=message):
        models[family](x)


def test_segment_id_outside_the_segments_is_an_error(models):
    x = bert_inputs()
    x["segment_ids"][0, 1] = 2  # num_segments is 2
    with pytest.raises(ValueError, match=r"segment_ids: segment id 2 is out of range; expected values in \[0, 2\)"):
        models["bert"](x)


def test_masked_lm_position_past_the_sequence_is_an_error(models):
    x = bert_inputs(length=8)
    x["mask_positions"] = np.array([[1, 8], [0, 2]], "int32")
    with pytest.raises(ValueError, match=r"mask_positions: position 8 is out of range; expected values in \[0, 8\)"):
        models["masked_lm"](x)


# --- Lengths beyond the maximum --------------------------------------------------


@pytest.mark.parametrize(
    "family, kwargs",
    [
        ("bert", dict(length=40)),
        ("transformer", dict(source_length=40)),
        ("transformer", dict(target_length=33)),
    ],
)
def test_input_longer_than_the_maximum_names_both_lengths(models, family, kwargs):
    length = next(iter(kwargs.values()))
    with pytest.raises(ValueError, match=f"length {length} is longer than the model's maximum sequence length 32"):
        models[family](inputs_of(family, **kwargs))


def test_predict_longer_than_the_maximum_names_the_maximum_after_a_retrace():
    """TensorFlow retraces `predict` for a second length with the length
    unknown, where the static check cannot run: the model checks the
    arrays' shapes itself first."""
    model = zoo.build("gpt-nano", task="causal_lm")
    model.predict(gpt_inputs(length=8), verbose=0)
    model.predict(gpt_inputs(length=9), verbose=0)
    with pytest.raises(ValueError, match="maximum sequence length 32"):
        model.predict(gpt_inputs(length=40), verbose=0)
    assert model.predict(gpt_inputs(length=10), verbose=0).shape[1] == 10  # and goes on predicting


def test_evaluate_longer_than_the_maximum_names_the_maximum_after_a_retrace():
    model = zoo.build("transformer-tiny")  # V 1000, length 32
    model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    for length in (6, 7):
        model.evaluate(seq2seq_inputs(target_length=length), np.zeros((2, length), "int32"), verbose=0)
    with pytest.raises(ValueError, match="length 40 is longer than the model's maximum sequence length 32"):
        model.evaluate(seq2seq_inputs(target_length=40), np.zeros((2, 40), "int32"), verbose=0)


# --- Missing, misnamed or malformed inputs --------------------------------------


@pytest.mark.parametrize(
    "family, change, message",
    [
        (
            "gpt",
            dict(drop="token_ids"),
            r"GPTCausalLM takes the inputs \['padding_mask', 'token_ids'\]; missing \['token_ids'\]\.$",
        ),
        (
            "masked_lm",
            dict(drop="mask_positions"),
            r"BertMaskedLM takes the inputs .*; missing \['mask_positions'\]\.$",
        ),
        ("transformer", dict(add="labels"), r"EncoderDecoder takes the inputs .*; unexpected \['labels'\]\.$"),
    ],
)
def test_missing_or_unexpected_inputs_are_named(models, family, change, message):
    if family == "masked_lm":
        x = dict(bert_inputs(), mask_positions=np.array([[1], [2]], "int32"))
    else:
        x = inputs_of(family)
    if "drop" in change:
        del x[change["drop"]]
    else:
        x[change["add"]] = x["decoder_token_ids"]
    with pytest.raises(ValueError, match=message):
        models[family](x)


def test_a_bare_array_instead_of_the_named_inputs_names_them(models):
    with pytest.raises(ValueError, match=r"expects 2 named input\(s\) with keys \['padding_mask', 'token_ids'\]"):
        models["gpt"](gpt_inputs()["token_ids"])


def test_a_padding_mask_of_the_wrong_length_names_both_shapes(models):
    x = gpt_inputs(length=8)
    x["padding_mask"] = np.ones((2, 9), "int32")
    with pytest.raises(ValueError, match=r"`padding_mask` of shape \(2, 9\) does not broadcast to \(2, 8\)"):
        models["gpt"](x)


def test_predict_with_a_missing_input_names_it():
    model = zoo.build("gpt-nano", task="causal_lm")
    x = gpt_inputs()
    del x["token_ids"]
    with pytest.raises(ValueError, match=r"missing \['token_ids'\]"):
        model.predict(x, verbose=0)


# --- Bad sampler arguments -----------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(prompt=[[1, -2]]), r"`prompt` sequence 0 has token id -2 outside the vocabulary \[0, 100\)"),
        (dict(max_new_tokens=-1), r"`max_new_tokens` must be an integer >= 1; got -1\."),
        (dict(max_new_tokens=2.5), r"`max_new_tokens` must be an integer >= 1; got 2\.5\."),
        (dict(sampler="top_k", top_k=101), r"`top_k` must be an integer in \[1, 100\] \(the vocabulary size\); got 101\."),
        (dict(sampler="top_k", top_k=2.5), r"`top_k` must be an integer in \[1, 100\] .*; got 2\.5\."),
        (dict(sampler="top_p", top_p=-0.1), r"`top_p` must be in \(0, 1\] .*; got -0\.1\."),
        (dict(sampler="temperature", temperature=-1.0), r"`temperature` must be a number > 0; got -1\.0\."),
        (dict(sampler="beam", temperature=0), r"`temperature` must be a number > 0; got 0\."),
        (dict(stop_token_ids=[100]), r"Stop token id 100 is outside the vocabulary \[0, 100\)"),
        (dict(sampler="beam", num_beams=1.5), r"`num_beams` must be a positive integer; got 1\.5\."),
        (dict(sampler="beam", length_penalty="long"), r"`length_penalty` must be a number; got 'long'\."),
        (
            dict(sampler="beam", prompt=[[1] * 30], max_new_tokens=3),
            r"is 33 positions, more than the model's maximum sequence length 32",
        ),
        (dict(sampler=None), r"Unknown sampler None; expected one of 'greedy', 'temperature', 'top_k', 'top_p'"),
        (dict(prompt=None), r"`prompt` is required: a batch of token-id sequences"),
        (
            dict(prompt=np.zeros((1, 2, 3), "int32")),
            r"`prompt` as an array must be \(batch, length\); got shape \(1, 2, 3\)",
        ),
        (dict(prompt=[[1.0, 2.0]]), r"`prompt` sequence 0 must hold integer token ids; got dtype float64"),
        (dict(padding_mask=[[1, 1]]), r"A padding mask goes with a padded \(batch, length\) `prompt` array"),
        (
            dict(prompt=np.ones((1, 2), "int32"), padding_mask=np.ones((1, 3))),
            r"`prompt` padding mask of shape \(1, 3\) must match prompt of shape \(1, 2\)",
        ),
        (
            dict(prompt=np.ones((2, 2), "int32"), padding_mask=np.array([[1, 1], [0, 0]])),
            r"`prompt` sequence 1 is empty; every sequence needs at least one token",
        ),
        (dict(source_padding_mask=[[1]]), r"GPTCausalLM is decoder-only and takes no `source`"),
    ],
)
def test_bad_generate_arguments_name_the_argument_and_what_it_must_be(models, kwargs, message):
    arguments = dict(model=models["gpt"], prompt=[[1, 2]], max_new_tokens=4) | kwargs
    with pytest.raises(ValueError, match=message):
        generate(**arguments)


def test_a_seed_that_is_not_an_integer_is_an_error(models):
    # Checked after the sampling loop is compiled, so this call compiles it.
    with pytest.raises(ValueError, match=r"`seed` must be an integer or None; got 'a'\."):
        generate(models["gpt"], [[1, 2]], 1, sampler="top_k", top_k=5, seed="a")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(prompt=[[1], [1]], source=[[4]]), r"`source` has 1 sequences but `prompt` has 2\."),
        (dict(source=[[]]), r"`source` sequence 0 is empty"),
        (dict(source=[[4] * 40]), r"The longest source \(40 tokens\) is longer than the .*maximum sequence length 32"),
        (dict(source=[[4, 1000]]), r"`source` sequence 0 has token id 1000 outside the vocabulary \[0, 1000\)"),
        (dict(source=[[4, -1]], sampler="beam"), r"`source` sequence 0 has token id -1 outside the vocabulary"),
    ],
)
def test_bad_sources_for_an_encoder_decoder_are_named(models, kwargs, message):
    arguments = dict(model=models["transformer"], prompt=[[1]], max_new_tokens=4) | kwargs
    with pytest.raises(ValueError, match=message):
        generate(**arguments)


@pytest.mark.parametrize("task", [None, "classifier"])
def test_encoder_only_models_cannot_generate(task):
    model = zoo.build("bert-tiny", task=task)
    name = type(model).__name__
    message = rf"{name} has no cached step .*so `generate` cannot run it: encoder-only models .* cannot generate"
    with pytest.raises(ValueError, match=message):
        generate(model, [[1, 2]], 4)
    with pytest.raises(ValueError, match=message):
        beam_search(model, [[1, 2]], 4)


def test_a_model_from_outside_the_zoo_cannot_generate():
    model = keras.Sequential([keras.layers.Dense(2)])
    with pytest.raises(ValueError, match=r"Sequential has no cached step \(it lacks empty_cache, call_with_cache, .*\), so `generate` cannot run it"):
        generate(model, [[1]], 2)


# --- Unknown preset, task or override ------------------------------------------------


def test_a_preset_close_to_nothing_lists_them_all():
    with pytest.raises(ValueError, match=r"Unknown preset 'xyzzy-qqq'\. Available: transformer-base, .*, bert-tiny\.$"):
        zoo.build("xyzzy-qqq")


def test_describe_a_misspelled_preset_suggests_the_closest():
    with pytest.raises(ValueError, match=r"Unknown preset 'gpt-nan'\. Did you mean 'gpt-nano'"):
        zoo.describe("gpt-nan")


@pytest.mark.parametrize(
    "name, task, overrides, message",
    [
        (
            "gpt-nano",
            None,
            dict(num_classes=3),
            r"Unknown override\(s\) \['num_classes'\] for 'gpt-nano' \(gpt family\)\. Valid: .*num_layers",
        ),
        (
            "bert-tiny",
            "masked_lm",
            dict(pooling="cls"),
            r"Unknown override\(s\) \['pooling'\] for 'bert-tiny' \(bert family, task 'masked_lm'\)",
        ),
        (
            "transformer-tiny",
            "causal_lm",
            {},
            r"Unknown task 'causal_lm' for the transformer family of 'transformer-tiny'; expected one of 'seq2seq'",
        ),
        ("gpt-nano", None, dict(num_layers=0), r"`num_layers` must be a positive integer; got 0\."),
        ("gpt-nano", None, dict(num_heads=5),
         r"hidden_dim=32 must be divisible by num_heads=5 \(each head is hidden_dim / num_heads wide\)\."),
        ("bert-tiny", None, dict(hidden_dim=30), r"hidden_dim=30 must be divisible by num_heads=4"),
        ("transformer-tiny", None, dict(num_heads=3), r"hidden_dim=64 must be divisible by num_heads=3"),
        ("gpt-nano", None, dict(dropout=1.5), r"`dropout` must be a rate in \[0, 1\); got 1\.5\."),
        ("llama-nano", None, dict(dropout=-0.1), r"`dropout` must be a rate in \[0, 1\); got -0\.1\."),
        ("llama-nano", None, dict(num_key_value_heads=3), r"num_key_value_heads=3 must divide num_heads=4"),
        ("llama-nano", None, dict(hidden_dim=36, num_heads=4), r"The head width 9 must be even: rotary positions"),
        ("gemma3-nano", None, dict(head_dim=7), r"The head width 7 must be even"),
        ("bert-tiny", "sentence_encoder", dict(pooling="max"), r"`pooling` must be \"cls\" or \"mean\"; got 'max'\."),
    ],
)
def test_bad_tasks_and_overrides_name_what_is_allowed(name, task, overrides, message):
    with pytest.raises(ValueError, match=message):
        zoo.build(name, task=task, **overrides)


@pytest.mark.parametrize("format", ["huggingface", "keras-hub"])
def test_export_of_a_quantized_model_says_to_export_the_float_one(format, tmp_path):
    lm = zoo.build("gpt-nano", task="causal_lm")
    lm.quantize("int8")
    with pytest.raises(ValueError, match=r"export writes float weights, and this GPTCausalLM is quantized \(int8\); "
                                         r"expected a float model: export it before quantizing"):
        zoo.export(lm, tmp_path / "out", format=format)
    assert not (tmp_path / "out").exists()
