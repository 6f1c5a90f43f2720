"""A tokenizer in GGUF's terms, for the GGUF driver (gguf.py): what
`tokenizer.ggml.*` keeps of Hugging Face's tokenizer files (byte-level BPE as
`gpt2`, SentencePiece-style BPE as `llama`), and those files written back
from a GGUF file's metadata."""

import json
import re

from zoo.models.tensor_names import CheckpointError, write_text

# The pre-tokenizer's split pattern -> llama.cpp's `tokenizer.ggml.pre` (src/llama-vocab.cpp) that splits the same.
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                  r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                 r"\s*[\r\n]+|\s+(?!\S)|\s+")
SPLIT_PATTERNS = {LLAMA3_PATTERN: "llama-bpe", QWEN2_PATTERN: "qwen2"}
PRE_TOKENIZERS = ("gpt-2", "smollm", "llama-bpe", "qwen2")
BYTE_TOKEN = re.compile(r"<0x[0-9A-Fa-f]{2}>")


class GGUFError(CheckpointError):
    """A GGUF file, or a model, that this driver cannot write or read, said in one line."""


def read_huggingface_vocabulary(folder, vocabulary_size):
    """What GGUF keeps of the tokenizer files in `folder` (`tokenizer.json`, or
    GPT-2's `vocab.json` + `merges.txt`, and the config files): a dict of
    tokens, token types, merges, `pre`, special ids, `add_bos` and the chat
    template. A ValueError says what llama.cpp cannot represent."""
    import gguf
    from tokenizers import Tokenizer

    tokenizer_config = _json(folder / "tokenizer_config.json")
    generation = _json(folder / "generation_config.json")
    if (folder / "tokenizer.json").is_file():
        data = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
        model = data.get("model") or {}
        kind = "gpt2" if model.get("type") == "BPE" and _has_byte_level(data) else None
        if model.get("type") == "BPE" and not _has_byte_level(data) and _is_sentence_piece(data):
            kind = "llama"  # SentencePiece's BPE as transformers converts it (Llama 2, TinyLlama, Mistral, Gemma)
        if kind is None:
            raise ValueError(
                "GGUF export: the tokenizer.json is neither a byte-level BPE nor SentencePiece's BPE with byte "
                "fallback (unigram and WordPiece vocabularies are not written here); expected Llama's, Mistral's, "
                "Qwen's or SmolLM2's."
            )
        pre = pre_tokenizer_name(data) if kind == "gpt2" else "default"
        vocabulary = dict(model["vocab"])
        merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
        added = {t["id"]: t for t in data.get("added_tokens", [])}
        backend = Tokenizer.from_str(json.dumps(data))
    else:
        vocabulary = _json(folder / "vocab.json")
        lines = (folder / "merges.txt").read_text(encoding="utf-8").splitlines()
        merges = [m for m in lines if m.strip() and not m.startswith("#version")]
        end = "<|endoftext|>"
        added = {vocabulary[end]: {"content": end, "special": True}}
        pre, backend, kind, data = "gpt-2", None, "gpt2", {}
    by_id = {i: t for t, i in vocabulary.items()}
    by_id.update({i: t["content"] for i, t in added.items()})
    if max(by_id) >= vocabulary_size:
        raise ValueError(f"GGUF export: the tokenizer has id {max(by_id)}, past the model's {vocabulary_size} rows.")
    tokens, types = [], []
    for i in range(vocabulary_size):  # ids without a token (padded rows) are llama.cpp's "[PAD{i}]", unused
        if i not in by_id:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
            continue
        tokens.append(by_id[i])
        if kind == "llama" and by_id[i] == (data["model"].get("unk_token")):
            types.append(gguf.TokenType.UNKNOWN)
        elif i in added:
            types.append(gguf.TokenType.CONTROL if added[i].get("special") else gguf.TokenType.USER_DEFINED)
        elif kind == "llama" and BYTE_TOKEN.fullmatch(by_id[i]):
            types.append(gguf.TokenType.BYTE)
        else:
            types.append(gguf.TokenType.NORMAL)
    ids = {t: i for i, t in enumerate(tokens)}

    def token_id(key):
        value = tokenizer_config.get(key)
        value = value.get("content") if isinstance(value, dict) else value
        return ids.get(value) if value is not None else None

    eos = generation.get("eos_token_id")
    ends = list(eos) if isinstance(eos, list) else ([eos] if eos is not None else [])
    if token_id("eos_token") is not None and token_id("eos_token") not in ends:
        ends.insert(0, token_id("eos_token"))
    bos = token_id("bos_token")
    add_bos = tokenizer_config.get("add_bos_token")
    if add_bos is None:  # the tokenizer.json's post-processor decides
        add_bos = bool(backend and bos is not None and backend.encode("a").ids[:1] == [bos])
    unk = data.get("model", {}).get("unk_token")
    return {
        "model": kind, "scores": sentence_piece_scores(tokens, merges) if kind == "llama" else None,
        "add_space_prefix": _adds_space_prefix(data) if kind == "llama" else None,
        "unk": ids.get(unk) if unk is not None else None,
        "tokens": tokens, "types": types, "merges": merges, "pre": pre, "bos": bos, "ends": ends,
        "pad": token_id("pad_token"), "add_bos": bool(add_bos), "chat_template": tokenizer_config.get("chat_template"),
    }


def _json(path):
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def _parts(pre):
    pre = pre or {}
    return pre.get("pretokenizers", [pre]) if pre.get("type") == "Sequence" else [pre]


def _has_byte_level(data):
    return any(p.get("type") == "ByteLevel" for p in _parts(data.get("pre_tokenizer")))


def pre_tokenizer_name(data):
    """llama.cpp's name (`tokenizer.ggml.pre`) of a tokenizer.json's byte-level pre-tokenizer."""
    parts = _parts(data.get("pre_tokenizer"))
    kinds = [p.get("type") for p in parts]
    if kinds == ["ByteLevel"] and parts[0].get("use_regex", True):
        return "gpt-2"
    if kinds == ["Digits", "ByteLevel"] and parts[0].get("individual_digits") and parts[1].get("use_regex", True):
        return "smollm"
    if kinds == ["Split", "ByteLevel"] and not parts[1].get("use_regex", True):
        pattern = (parts[0].get("pattern") or {}).get("Regex")
        if pattern in SPLIT_PATTERNS:
            return SPLIT_PATTERNS[pattern]
    raise ValueError(
        f"GGUF export: the tokenizer.json's pre-tokenizer ({' + '.join(map(str, kinds))}) splits text in a way "
        "llama.cpp has no name for here; expected GPT-2's, SmolLM2's, Llama 3's or Qwen2's."
    )


def sentence_piece_scores(tokens, merges):
    """llama.cpp's SentencePiece scores of a BPE's tokens: llama.cpp joins
    the adjacent pair whose join has the highest score, BPE the pair of
    the earliest merge, so a token made by merge r scores -(r + 1), and
    every other token 0."""
    rank = {}
    for r, merge in enumerate(merges):
        rank.setdefault(merge.replace(" ", "", 1), r)
    return [-(rank[t] + 1.0) if t in rank else 0.0 for t in tokens]


def _is_sentence_piece(data):
    """Whether a BPE tokenizer.json is SentencePiece's: bytes as <0xXX> fallback tokens, or spaces as "▁"."""
    normalizer = data.get("normalizer") or {}
    parts = normalizer.get("normalizers", [normalizer]) if normalizer.get("type") == "Sequence" else [normalizer]
    marks = any(p.get("type") == "Prepend" or (p.get("type") == "Replace" and p.get("content") == "▁") for p in parts)
    metaspace = any(p.get("type") == "Metaspace" for p in _parts(data.get("pre_tokenizer")))
    return bool(data["model"].get("byte_fallback")) or marks or metaspace


def _adds_space_prefix(data):
    """Whether a SentencePiece tokenizer.json puts "▁" before the text (Llama 2's Prepend normalizer, or a
    Metaspace pre-tokenizer that prepends)."""
    normalizer = data.get("normalizer") or {}
    parts = normalizer.get("normalizers", [normalizer]) if normalizer.get("type") == "Sequence" else [normalizer]
    if any(p.get("type") == "Prepend" for p in parts):
        return True
    return any(p.get("type") == "Metaspace" and p.get("prepend_scheme", "always") != "never"
               for p in _parts(data.get("pre_tokenizer")))


def write_vocabulary(writer, vocabulary):
    writer.add_tokenizer_model(vocabulary["model"])
    writer.add_tokenizer_pre(vocabulary["pre"])
    writer.add_token_list(vocabulary["tokens"])
    writer.add_token_types(vocabulary["types"])
    if vocabulary["model"] == "llama":
        writer.add_token_scores(vocabulary["scores"])
        writer.add_add_space_prefix(vocabulary["add_space_prefix"])
        if vocabulary["unk"] is not None:
            writer.add_unk_token_id(vocabulary["unk"])
    else:
        writer.add_token_merges(vocabulary["merges"])
    if vocabulary["bos"] is not None:
        writer.add_bos_token_id(vocabulary["bos"])
    ends = vocabulary["ends"]
    if ends:
        writer.add_eos_token_id(ends[0])
    if len(ends) > 1:
        writer.add_eot_token_id(ends[1])
    if vocabulary["pad"] is not None:
        writer.add_pad_token_id(vocabulary["pad"])
    writer.add_add_bos_token(vocabulary["add_bos"])
    writer.add_add_eos_token(False)
    if vocabulary["chat_template"]:
        writer.add_chat_template(vocabulary["chat_template"])


def write_huggingface_tokenizer_files(fields, folder, path):
    """GGUF's tokenizer -> `tokenizer.json`, `vocab.json` + `merges.txt`,
    `tokenizer_config.json` and `generation_config.json` in `folder`, as
    transformers' GGUF converter builds its fast tokenizer."""
    import gguf
    from tokenizers import AddedToken, Tokenizer, decoders, models, processors

    model = fields.get("tokenizer.ggml.model")
    if model not in ("gpt2", "llama"):
        raise GGUFError(
            f"{path}: tokenizer.ggml.model is {model!r}; expected 'gpt2' (a byte-level BPE: GPT-2, Llama 3, "
            "Qwen, SmolLM2) or 'llama' (SentencePiece: Llama 2, TinyLlama, Mistral)."
        )
    pre = fields.get("tokenizer.ggml.pre", "gpt-2" if model == "gpt2" else "default")
    if model == "gpt2" and pre not in PRE_TOKENIZERS:
        raise GGUFError(f"{path}: tokenizer.ggml.pre is {pre!r}; expected one of {', '.join(PRE_TOKENIZERS)}.")
    tokens = list(fields["tokenizer.ggml.tokens"])
    types = list(fields.get("tokenizer.ggml.token_type", [gguf.TokenType.NORMAL] * len(tokens)))
    vocabulary = {t: i for i, t in enumerate(tokens)}
    special = {int(gguf.TokenType.CONTROL), int(gguf.TokenType.USER_DEFINED)}
    if model == "llama":
        merges = sentence_piece_merges(tokens, types, fields.get("tokenizer.ggml.scores"), path)
        backend = sentence_piece_backend(vocabulary, merges, fields, tokens)
    else:
        merges = [tuple(m.split(" ", 1)) for m in fields.get("tokenizer.ggml.merges", [])]
        backend = Tokenizer(models.BPE(vocab=vocabulary, merges=merges, fuse_unk=False))
    if model == "gpt2":  # SentencePiece has no pre-tokenizer: it sees the whole text
        backend.pre_tokenizer = byte_level_pre_tokenizer(pre)
        backend.decoder = decoders.ByteLevel()
        backend.post_processor = processors.ByteLevel(trim_offsets=False)
    backend.add_special_tokens([
        AddedToken(tokens[i], special=int(types[i]) != gguf.TokenType.USER_DEFINED, normalized=False)
        for i in range(len(tokens)) if int(types[i]) in special or int(types[i]) == gguf.TokenType.UNKNOWN
    ])
    backend.save(str(folder / "tokenizer.json"))
    write_text(folder / "vocab.json", json.dumps(vocabulary, ensure_ascii=False))
    write_text(folder / "merges.txt", "#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))

    def token(key):
        i = fields.get(f"tokenizer.ggml.{key}_token_id")
        return tokens[i] if i is not None and 0 <= i < len(tokens) else None

    ends = [fields[k] for k in ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id") if k in fields]
    settings = {"bos_token": token("bos"), "eos_token": token("eos"), "pad_token": token("padding"),
                "add_bos_token": bool(fields.get("tokenizer.ggml.add_bos_token", model == "llama"))}
    if settings["bos_token"] is None:
        settings["add_bos_token"] = False
    if fields.get("tokenizer.chat_template"):
        settings["chat_template"] = fields["tokenizer.chat_template"]
    write_text(folder / "tokenizer_config.json", json.dumps(settings, ensure_ascii=False))
    write_text(folder / "generation_config.json", json.dumps({"eos_token_id": list(dict.fromkeys(ends))}))


def byte_level_pre_tokenizer(pre):
    """The `tokenizers` pre-tokenizer of llama.cpp's `tokenizer.ggml.pre` name."""
    from tokenizers import Regex, pre_tokenizers

    if pre == "gpt-2":
        return pre_tokenizers.ByteLevel(add_prefix_space=False)
    if pre == "smollm":
        return pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
        )
    pattern = {name: regex for regex, name in SPLIT_PATTERNS.items()}[pre]
    return pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])


def sentence_piece_merges(tokens, types, scores, path):
    """The BPE merges of a SentencePiece vocabulary, as transformers'
    converter derives them: every split of a token into two tokens, the
    token's score deciding the order (highest first)."""
    import gguf

    if scores is None or len(scores) != len(tokens):
        raise GGUFError(f"{path}: a SentencePiece vocabulary without one tokenizer.ggml.scores value per token.")
    ids = {t: i for i, t in enumerate(tokens)}
    merges = []
    for i, token in enumerate(tokens):
        if int(types[i]) != gguf.TokenType.NORMAL or len(token) < 2:
            continue
        for cut in range(1, len(token)):
            left, right = token[:cut], token[cut:]
            if left in ids and right in ids:
                merges.append((-scores[i], i, ids[left], ids[right], left, right))
    return [(left, right) for *_, left, right in sorted(merges)]


def sentence_piece_backend(vocabulary, merges, fields, tokens):
    """A `tokenizers.Tokenizer` that tokenizes as llama.cpp's SentencePiece
    tokenizer: spaces as "▁" (one put before the text with
    `add_space_prefix`), BPE over characters, bytes for the rest."""
    from tokenizers import Tokenizer, decoders, models, normalizers

    unk = fields.get("tokenizer.ggml.unknown_token_id")
    backend = Tokenizer(models.BPE(vocab=vocabulary, merges=merges, unk_token=tokens[unk] if unk is not None else None,
                                   byte_fallback=True, fuse_unk=False))
    prefix = bool(fields.get("tokenizer.ggml.add_space_prefix", True))
    steps = ([normalizers.Prepend("▁")] if prefix else []) + [normalizers.Replace(" ", "▁")]
    backend.normalizer = normalizers.Sequence(steps)
    backend.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]
        + ([decoders.Strip(" ", 1, 0)] if prefix else [])
    )
    return backend
