"""`HuggingFaceTokenizer`: a Hugging Face `tokenizer.json` as a zoo tokenizer.

Two tokenizer.json files are built here with the `tokenizers` package, in
the two shapes the Llama-style checkpoints ship: a byte-level BPE with
added special tokens (Llama 3, Qwen2 / Qwen3, SmolLM2) and a
SentencePiece-like BPE with byte fallback whose post-processor adds `<s>`
(Llama 2, Mistral, TinyLlama). Invariants: the ids are the package's ids,
detokenize inverts tokenize, the special ids are those of the checkpoint's
files, the tokenizer comes back unchanged from a `.keras` file (in a fresh
process too), and text generation stops at any of the end ids.
"""

import functools
import json
import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import keras
import numpy as np
import pytest
import tokenizers
from tokenizers import AddedToken, decoders, models, normalizers, pre_tokenizers, processors, trainers

import zoo
from zoo.data import DataError
from zoo.tokenizers import HuggingFaceTokenizer
from zoo.tokenizers import token_id_lists

ROOT = Path(__file__).resolve().parents[2]
CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "naïve café façade crème brûlée",
    "zwei hunde laufen über die straße",
    "hello world, hello there!",
] * 5
PROBES = [
    "naïve café über straße",
    "日本語のテキスト 世界",
    "emoji 🙂🚀 and ZWJ 👩‍💻",
    "  leading and  double spaces ",
    "the lazy dog",
    "",
]
BEGIN, END, EOT = "<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"


def _byte_level(bos_template=True):
    """A byte-level BPE (GPT-2's byte alphabet) with added special tokens;
    the post-processor adds BOS as Llama 3's does, or nothing as Qwen's."""
    tokenizer = tokenizers.Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tokenizer.train_from_iterator(CORPUS, trainer)
    tokenizer.add_special_tokens([BEGIN, END, EOT])
    byte_level = processors.ByteLevel(trim_offsets=False)
    if bos_template:
        template = processors.TemplateProcessing(
            single=f"{BEGIN} $A", pair=f"{BEGIN} $A {BEGIN} $B", special_tokens=[(BEGIN, tokenizer.token_to_id(BEGIN))]
        )
        tokenizer.post_processor = processors.Sequence([byte_level, template])
    else:
        tokenizer.post_processor = byte_level
    return tokenizer.to_str()


def _sentence_piece():
    """Llama 2's tokenizer.json shape: `▁` for spaces, BPE with byte
    fallback (`<0x00>`..`<0xFF>`), `<unk>` `<s>` `</s>` first, and a
    template post-processor that adds `<s>`."""
    tokenizer = tokenizers.Tokenizer(models.BPE())
    tokenizer.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tokenizer.train_from_iterator(CORPUS, trainers.BpeTrainer(vocab_size=200, show_progress=False))
    data = json.loads(tokenizer.to_str())
    specials = ["<unk>", "<s>", "</s>"]
    vocabulary = {token: i for i, token in enumerate(specials + [f"<0x{b:02X}>" for b in range(256)])}
    for token, _ in sorted(data["model"]["vocab"].items(), key=lambda item: item[1]):
        vocabulary.setdefault(token, len(vocabulary))
    data["model"].update(vocab=vocabulary, unk_token="<unk>", byte_fallback=True, fuse_unk=True)
    tokenizer = tokenizers.Tokenizer.from_str(json.dumps(data))
    tokenizer.add_special_tokens([AddedToken(token, normalized=False, special=True) for token in specials])
    tokenizer.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)]
    )
    return tokenizer.to_str()


MAKERS = {
    "byte_level": _byte_level,
    "qwen_like": functools.partial(_byte_level, bos_template=False),
    "sentence_piece": _sentence_piece,
}


@functools.cache  # trained once per module
def _json(kind):
    return MAKERS[kind]()


KINDS = ["byte_level", "qwen_like", "sentence_piece"]
SPECIALS = {"byte_level": (BEGIN, END), "qwen_like": (None, END), "sentence_piece": ("<s>", "</s>")}


def _tokenizer(kind, **kwargs):
    bos, eos = SPECIALS[kind]
    return HuggingFaceTokenizer.from_file(_json(kind), bos_token=bos, eos_token=eos, **kwargs)


def _write_folder(folder, kind, **files):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tokenizer.json").write_text(_json(kind), encoding="utf-8")
    for name, content in files.items():
        (folder / f"{name}.json").write_text(json.dumps(content), encoding="utf-8")
    return folder


def _lm(tokenizer, **kwargs):
    return zoo.build("gpt-nano", "causal_lm", vocabulary_size=tokenizer.vocabulary_size(), tokenizer=tokenizer, **kwargs)


# --- Ids and text --------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_ids_are_the_tokenizers_package_ids(kind):
    reference = tokenizers.Tokenizer.from_str(_json(kind))
    tokenizer = _tokenizer(kind)
    expected = [reference.encode(text).ids for text in PROBES]
    assert [tokenizer(text).tolist() for text in PROBES] == expected
    rows = tokenizer.tokenize(PROBES)  # a list: one int32 array per text, as the other zoo tokenizers
    assert isinstance(rows, list) and all(row.dtype == np.int32 for row in rows)
    assert token_id_lists(tokenizer, PROBES) == expected
    assert tokenizer(PROBES[1]).dtype == np.int32 and tokenizer(PROBES[1]).ndim == 1


@pytest.mark.parametrize("kind", KINDS)
def test_detokenize_inverts_tokenize_on_non_ascii_text(kind):
    tokenizer = _tokenizer(kind)
    for text in PROBES:
        assert tokenizer.detokenize(tokenizer(text)) == text
        assert tokenizer.detokenize(tokenizer(text).tolist()) == text
    assert tokenizer.detokenize(tokenizer.tokenize(PROBES)) == PROBES
    row = tokenizer("the lazy dog")
    padded = np.full((2, 20), tokenizer.token_to_id(SPECIALS[kind][1]), "int32")  # padded with a special token
    padded[0, : len(row)] = row
    assert tokenizer.detokenize(padded) == ["the lazy dog", ""]  # a (B, T) array decodes row by row


def test_special_tokens_are_skipped_and_kept_whole():
    tokenizer = _tokenizer("byte_level")
    ids = tokenizer(f"hello{EOT}world{END}").tolist()
    assert tokenizer.token_to_id(EOT) in ids and ids[-1] == tokenizer.token_to_id(END)
    assert tokenizer.detokenize(ids) == "helloworld"


def test_bos_follows_the_post_processor_unless_add_bos_is_given():
    llama3, qwen, llama2 = _tokenizer("byte_level"), _tokenizer("qwen_like"), _tokenizer("sentence_piece")
    assert llama3("the dog")[0] == llama3.start_token_id == llama3.token_to_id(BEGIN)
    assert llama2("the dog")[0] == llama2.start_token_id == 1
    assert qwen.start_token_id is None and qwen("the dog").tolist() == llama3("the dog").tolist()[1:]
    without = _tokenizer("byte_level", add_bos=False)
    assert without("the dog").tolist() == llama3("the dog").tolist()[1:]
    explicit = _tokenizer("sentence_piece", add_bos=True)
    assert explicit("the dog").tolist() == llama2("the dog").tolist()
    with pytest.raises(ValueError, match="add_bos=True needs"):
        _tokenizer("qwen_like", add_bos=True)


def test_the_vocabulary_surface_agrees_with_the_package():
    reference = tokenizers.Tokenizer.from_str(_json("sentence_piece"))
    tokenizer = _tokenizer("sentence_piece")
    assert tokenizer.vocabulary_size() == reference.get_vocab_size(with_added_tokens=True)
    vocabulary = tokenizer.get_vocabulary()
    assert len(vocabulary) == tokenizer.vocabulary_size()
    assert vocabulary[:4] == ["<unk>", "<s>", "</s>", "<0x00>"]
    for i in (0, 2, 100, len(vocabulary) - 1):
        assert tokenizer.token_to_id(tokenizer.id_to_token(i)) == i == reference.token_to_id(vocabulary[i])
    assert tokenizer.end_token_ids == (2,) and tokenizer.end_token_id == 2 and tokenizer.pad_token_id is None


# --- Special ids from a checkpoint folder ---------------------------------------------


def test_special_ids_come_from_the_folder_files_with_a_list_of_end_ids(tmp_path):
    reference = tokenizers.Tokenizer.from_str(_json("byte_level"))
    begin, end, eot = (reference.token_to_id(t) for t in (BEGIN, END, EOT))
    folder = _write_folder(
        tmp_path / "llama3-instruct",
        "byte_level",
        tokenizer_config={"bos_token": BEGIN, "eos_token": {"content": EOT, "special": True}, "pad_token": None},
        config={"bos_token_id": begin, "eos_token_id": end},
        generation_config={"bos_token_id": begin, "eos_token_id": [end, eot]},
    )
    tokenizer = HuggingFaceTokenizer.from_folder(folder)
    assert tokenizer.start_token_id == begin
    assert tokenizer.end_token_ids == (end, eot) and tokenizer.end_token_id == end
    assert tokenizer.pad_token_id is None and tokenizer.add_bos is None
    assert tokenizer("hi")[0] == begin  # the post-processor adds BOS
    folder = _write_folder(
        tmp_path / "llama3-base", "byte_level", tokenizer_config={"eos_token": EOT}, config={"eos_token_id": end}
    )
    assert HuggingFaceTokenizer.from_folder(folder).end_token_ids == (end, eot)  # config.json's, then the tokenizer's


def test_special_ids_from_config_json_alone(tmp_path):
    reference = tokenizers.Tokenizer.from_str(_json("qwen_like"))
    end, eot = reference.token_to_id(END), reference.token_to_id(EOT)
    folder = _write_folder(
        tmp_path / "qwen", "qwen_like", config={"bos_token_id": end, "eos_token_id": end, "pad_token_id": eot}
    )
    qwen = HuggingFaceTokenizer.from_folder(folder)
    assert (qwen.start_token_id, qwen.end_token_ids, qwen.pad_token_id) == (end, (end,), eot)
    assert qwen("hi").tolist() == reference.encode("hi").ids  # no BOS


def test_add_bos_token_from_tokenizer_config(tmp_path):
    folder = _write_folder(
        tmp_path / "tinyllama",
        "sentence_piece",
        tokenizer_config={
            "bos_token": {"content": "<s>", "lstrip": False},
            "eos_token": "</s>",
            "pad_token": "</s>",
            "add_bos_token": True,
        },
        generation_config={"eos_token_id": 2},
    )
    tinyllama = HuggingFaceTokenizer.from_folder(folder)
    assert (tinyllama.start_token_id, tinyllama.end_token_ids, tinyllama.pad_token_id) == (1, (2,), 2)
    assert tinyllama.add_bos is True and tinyllama("hi")[0] == 1


def test_errors_are_one_clear_line(tmp_path):
    cases = [
        (lambda: HuggingFaceTokenizer.from_file(tmp_path / "missing.json"), DataError, "does not exist"),
        (lambda: HuggingFaceTokenizer.from_folder(tmp_path), DataError, "does not exist"),
        (lambda: HuggingFaceTokenizer("{not json"), DataError, "not a Hugging Face tokenizer.json"),
        (lambda: HuggingFaceTokenizer('{"model": 3}'), DataError, "not a Hugging Face tokenizer.json"),
        (lambda: _tokenizer("byte_level", pad_token="<pad>"), ValueError, "'<pad>' is not in the vocabulary"),
        (lambda: HuggingFaceTokenizer(_json("byte_level"), end_token_ids=[10_000]), ValueError, "out of range"),
        (lambda: HuggingFaceTokenizer().tokenize("hi"), ValueError, "no tokenizer.json yet"),
        (lambda: HuggingFaceTokenizer(3), TypeError, "expected a path to a tokenizer.json"),
    ]
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "tokenizer.json").write_text(_json("byte_level"), encoding="utf-8")
    (tmp_path / "bad" / "config.json").write_text("{", encoding="utf-8")
    cases.append((lambda: HuggingFaceTokenizer.from_folder(tmp_path / "bad"), DataError, "config.json: not valid JSON"))
    for make, error, message in cases:
        with pytest.raises(error, match=message) as caught:
            make()
        assert "\n" not in str(caught.value), str(caught.value)


# --- Carried by a model ------------------------------------------------------------


@pytest.mark.parametrize("kind", ["byte_level", "sentence_piece"])
def test_the_tokenizer_round_trips_inside_the_keras_file(kind, tmp_path):
    tokenizer = HuggingFaceTokenizer.from_file(
        _json(kind), bos_token=SPECIALS[kind][0], eos_token=[SPECIALS[kind][1], 0], pad_token=0
    )
    path = zoo.save(_lm(tokenizer), tmp_path / "model.keras")
    with zipfile.ZipFile(path) as archive:
        assets = [name for name in archive.namelist() if name.endswith("/tokenizer.json")]
        assert len(assets) == 1 and archive.read(assets[0]).decode("utf-8") == _json(kind)  # the exact JSON
        config = archive.read("config.json").decode("utf-8")
    assert '"model"' not in config and "tokenizer_json" in config  # the config holds the settings, not the JSON
    for loaded in (zoo.load(path), keras.saving.load_model(path)):
        assert type(loaded.tokenizer) is HuggingFaceTokenizer and loaded.tokenizer is not tokenizer
        assert token_id_lists(loaded.tokenizer, PROBES) == token_id_lists(tokenizer, PROBES)
        assert loaded.tokenizer.detokenize(loaded.tokenizer.tokenize(PROBES)) == PROBES
        for name in ("start_token_id", "end_token_ids", "end_token_id", "pad_token_id", "add_bos"):
            assert getattr(loaded.tokenizer, name) == getattr(tokenizer, name), name
        assert loaded.tokenizer.get_vocabulary() == tokenizer.get_vocabulary()


def test_a_model_with_the_tokenizer_reloads_in_a_fresh_process(tmp_path):
    tokenizer = _tokenizer("sentence_piece", add_bos=True)
    path = zoo.save(_lm(tokenizer), tmp_path / "model.keras")
    child = """
    import json, sys
    import keras
    import zoo

    out = {}
    for loader in ("zoo.load", "keras.saving.load_model"):
        model = zoo.load(sys.argv[1]) if loader == "zoo.load" else keras.saving.load_model(sys.argv[1])
        tokenizer = model.tokenizer
        rows = tokenizer.tokenize(json.loads(sys.argv[2]))
        out[loader] = {
            "class": type(tokenizer).__name__,
            "ids": [row.tolist() for row in rows],
            "texts": tokenizer.detokenize(rows),
            "special": [tokenizer.start_token_id, list(tokenizer.end_token_ids), tokenizer.pad_token_id, tokenizer.add_bos],
        }
    print("RESULT " + json.dumps(out))
    """
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", KERAS_BACKEND=keras.backend.backend())
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(child), str(path), json.dumps(PROBES)],
        cwd=ROOT, capture_output=True, text=True, env=env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    got = json.loads(result.stdout.split("RESULT ", 1)[1])
    expected = {
        "class": "HuggingFaceTokenizer",
        "ids": token_id_lists(tokenizer, PROBES),
        "texts": PROBES,
        "special": [1, [2], None, True],
    }
    assert got == {"zoo.load": expected, "keras.saving.load_model": expected}


def test_a_tokenizer_with_more_ids_than_the_model_embeds_is_refused():
    tokenizer = _tokenizer("byte_level")
    with pytest.raises(ValueError, match="embeds only 100"):
        zoo.build("gpt-nano", "causal_lm", vocabulary_size=100, tokenizer=tokenizer)


def test_text_generation_stops_at_any_end_id_and_skips_it_in_the_text():
    keras.utils.set_random_seed(2)
    tokenizer = _tokenizer("byte_level")
    end, eot = tokenizer.token_to_id(END), tokenizer.token_to_id(EOT)
    tokenizer.end_token_ids = (end, eot)  # as a Llama 3 instruct checkpoint's generation_config.json
    lm = _lm(tokenizer, initializer_range=1.0)
    prompt = tokenizer("the lazy dog").tolist()
    free = [int(t) for t in zoo.generate(lm, [prompt], 12).sequences[0]]
    # The first new token of the model's own greedy continuation that is not in what precedes it.
    k = next(k for k in range(1, len(free)) if free[k] not in prompt + free[:k])
    assert not {end, eot} & set(prompt + free[: k + 1])
    # Swapping two rows of the tied embedding swaps those two ids in the model: its greedy
    # continuation has <|eot_id|>, the second end id, where it had free[k].
    table = lm.backbone.embedding.token_embedding.embeddings
    rows = keras.ops.convert_to_numpy(table).copy()
    rows[[free[k], eot]] = rows[[eot, free[k]]]
    table.assign(rows)
    relabeled = [{free[k]: eot, eot: free[k]}.get(t, t) for t in free]
    assert [int(t) for t in zoo.generate(lm, [prompt], len(free)).sequences[0]] == relabeled
    text = zoo.generate(lm, "the lazy dog", max_new_tokens=20)
    assert text == tokenizer.detokenize(prompt + free[:k])  # <|eot_id|> ends it, and is no text
    assert text.startswith("the lazy dog") and len(text) > len("the lazy dog")
    longer = zoo.generate(lm, "the lazy dog", max_new_tokens=k + 2, stop_token_ids=None)
    assert longer == tokenizer.detokenize(prompt + relabeled[: k + 2])  # goes on past it
