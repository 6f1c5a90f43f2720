"""A Hugging Face `tokenizer.json` as a tokenizer a zoo model can carry.

Llama, Mistral, Qwen2, Qwen3, SmolLM2 and TinyLlama checkpoints ship their
tokenizer as one `tokenizer.json`: the normalizer, pre-tokenizer, BPE
vocabulary and merges, added tokens, post-processor and decoder, read by
the `tokenizers` package (the Rust library behind transformers' fast
tokenizers). `HuggingFaceTokenizer` runs that file through `tokenizers`
itself, not a re-implementation, so its ids are the package's ids, and
wraps it in keras-hub's tokenizer surface (`tokenize`, `detokenize`,
`vocabulary_size()`, `start_token_id`, `end_token_id`, ...) as a Keras
layer. Inside a model's `.keras` file the JSON travels as the asset
`tokenizer.json`, byte for byte; the config holds only the special-token
settings.

`tokenizers` is imported when a tokenizer file is read, so that
`import zoo` (which registers this class) stays light.

Example:
```python
tokenizer = HuggingFaceTokenizer.from_folder("checkpoints/llama")  # tokenizer.json + the config files
ids = tokenizer("Grüße, 世界 🙂")  # int32 ids, BOS first when the checkpoint adds it
tokenizer.detokenize(ids)  # "Grüße, 世界 🙂"
lm = zoo.build("gpt-nano", "causal_lm", vocabulary_size=tokenizer.vocabulary_size(), tokenizer=tokenizer)
```
"""

import json
from pathlib import Path

import keras
import numpy as np

from zoo.errors import DataError
from zoo.tokenizers.chat_template import render_template
from zoo.tokenizers.text_tokenizer import TextTokenizer
from zoo.files import write_text

ASSET_FILE = "tokenizer.json"


@keras.saving.register_keras_serializable(package="zoo")
class HuggingFaceTokenizer(TextTokenizer):
    """A Hugging Face `tokenizer.json`, run by the `tokenizers` package, as a
    Keras layer with keras-hub's tokenizer methods.

    BOS is added to each text as the checkpoint does it: by default through
    the file's own post-processor (`encode(text, add_special_tokens=True)`:
    Llama 2 / 3, Mistral and TinyLlama add BOS; Qwen2 / Qwen3 and SmolLM2
    add nothing), or explicitly with `add_bos` (transformers'
    `add_bos_token` of `tokenizer_config.json`). `detokenize` skips the
    special tokens. Tokenizing runs eagerly on Python strings; it is not
    meant for a traced graph.

    Args:
        tokenizer_json: the tokenizer: a path to a `tokenizer.json`, its JSON
            text, a `tokenizers.Tokenizer`, or None (set later with
            `set_tokenizer_json`, e.g. when a saved model loads).
        start_token_id: int or None. BOS, the id a prompt starts with.
        end_token_ids: an int, a list of int, or None. The ids that end a
            generated sequence (EOS; instruction-tuned checkpoints often
            have several); `zoo.generate` on text stops at any of them.
        pad_token_id: int or None. The padding id, None when the checkpoint
            has none.
        add_bos: None follows the post-processor of `tokenizer_json`; True
            puts `start_token_id` first and False adds nothing, neither
            running the post-processor's template.
        chat_template: the checkpoint's Jinja chat template (the
            `chat_template` of `tokenizer_config.json`, or its
            `chat_template.jinja`), or None; see `apply_chat_template`.
        generation: None, or an encoder-decoder checkpoint's decoding
            settings (its `generation_config.json`: `num_beams`,
            `max_length`, `decoder_start_token_id`, `forced_bos_token_id`,
            ...), which `zoo.translate` follows (BART's).

    Attributes:
        start_token_id, end_token_ids (a tuple of int), end_token_id (the
        first of them, or None), pad_token_id, add_bos, chat_template,
        generation (a dict, or None).

    Example:
    ```python
    tokenizer = HuggingFaceTokenizer.from_file("tokenizer.json", bos_token="<s>", eos_token="</s>")
    tokenizer("naïve café")  # array([1, ...], dtype=int32), as tokenizers.Tokenizer.encode(...).ids
    tokenizer.detokenize(tokenizer("naïve café"))  # "naïve café"
    ```

    References:
        Hugging Face `tokenizers`: https://github.com/huggingface/tokenizers
    """

    def __init__(
        self,
        tokenizer_json=None,
        start_token_id=None,
        end_token_ids=None,
        pad_token_id=None,
        add_bos=None,
        chat_template=None,
        generation=None,
        **kwargs,
    ):
        kwargs.setdefault("trainable", False)
        super().__init__(**kwargs)
        if isinstance(end_token_ids, (int, np.integer)):
            end_token_ids = [end_token_ids]
        self.start_token_id = _optional_id(start_token_id, "start_token_id")
        self.end_token_ids = tuple(_optional_id(i, "end_token_ids") for i in end_token_ids or ())
        self.pad_token_id = _optional_id(pad_token_id, "pad_token_id")
        if add_bos not in (None, True, False):
            raise ValueError(f"add_bos: expected None, True or False; got {add_bos!r}.")
        if add_bos and self.start_token_id is None:
            raise ValueError("add_bos=True needs a start_token_id, the BOS id to add.")
        self.add_bos = add_bos
        if chat_template is not None and not isinstance(chat_template, str):
            raise ValueError(f"chat_template: expected a Jinja template (a str) or None; got {type(chat_template).__name__}.")
        self.chat_template = chat_template
        if generation is not None and not isinstance(generation, dict):
            raise ValueError(
                f"generation: expected a dict of decoding settings or None; got {type(generation).__name__}."
            )
        self.generation = None if generation is None else dict(generation)
        self._json = None
        self._tokenizer = None
        self._size = None
        if tokenizer_json is not None:
            self.set_tokenizer_json(tokenizer_json)

    @property
    def end_token_id(self):
        """int or None. The first of `end_token_ids`."""
        return self.end_token_ids[0] if self.end_token_ids else None

    # --- Construction ------------------------------------------------------------

    @classmethod
    def from_file(cls, tokenizer_json, bos_token=None, eos_token=None, pad_token=None, add_bos=None, **kwargs):
        """A tokenizer from a `tokenizer.json`, its special tokens named by
        token or id.

        Args:
            tokenizer_json: a path to a `tokenizer.json`, or its JSON text.
            bos_token: a token (str), an id (int) or None.
            eos_token: a token or id, a list of them, or None.
            pad_token: a token or id, or None.
            add_bos: as the constructor's.
            **kwargs: passed to the constructor.

        Returns:
            A `HuggingFaceTokenizer`.

        Raises:
            DataError: the file is missing or not a tokenizer.json.
            ValueError: a special token is not in the vocabulary.
        """
        tokenizer = cls(tokenizer_json, **kwargs)
        if not isinstance(eos_token, (list, tuple)):
            eos_token = [] if eos_token is None else [eos_token]
        tokenizer.start_token_id = tokenizer._id_of(bos_token, "bos_token")
        tokenizer.end_token_ids = tuple(dict.fromkeys(tokenizer._id_of(t, "eos_token") for t in eos_token))
        tokenizer.pad_token_id = tokenizer._id_of(pad_token, "pad_token")
        if add_bos and tokenizer.start_token_id is None:
            raise ValueError("add_bos=True needs a bos_token, the BOS to add.")
        tokenizer.add_bos = add_bos
        return tokenizer

    @classmethod
    def from_folder(cls, folder, **kwargs):
        """The tokenizer of a Hugging Face checkpoint folder.

        Reads `tokenizer.json` and, where present, the special tokens of
        `tokenizer_config.json` (`bos_token`, `eos_token`, `pad_token`: a
        str or a dict with `"content"`; `add_bos_token`), `config.json` and
        `generation_config.json` (`bos_token_id`, `eos_token_id` an int or a
        list, `pad_token_id`), and the chat template (`chat_template` of
        `tokenizer_config.json`, the "default" one of a list, else
        `chat_template.jinja`):

        - BOS and padding: `tokenizer_config.json`'s token, else the id of
          `generation_config.json`, else of `config.json`;
        - the end ids: `generation_config.json`'s `eos_token_id` (what
          transformers' `generate` stops at), else `config.json`'s, then
          `tokenizer_config.json`'s `eos_token` if not among them;
        - `add_bos`: `add_bos_token` when given, else None (the
          post-processor decides).

        Args:
            folder: str or `pathlib.Path`, the checkpoint folder.
            **kwargs: passed to the constructor.

        Returns:
            A `HuggingFaceTokenizer`.

        Raises:
            DataError: `tokenizer.json` is missing or invalid, or a config
                file is not JSON.
        """
        folder = Path(folder)
        tokenizer_config = _read_json_object(folder / "tokenizer_config.json")
        configs = [_read_json_object(folder / name) for name in ("generation_config.json", "config.json")]

        def token(key):
            value = tokenizer_config.get(key)
            return value.get("content") if isinstance(value, dict) else value

        def config_ids(key):
            for config in configs:
                value = config.get(key)
                if value is not None:
                    return list(value) if isinstance(value, (list, tuple)) else [value]
            return []

        bos = token("bos_token") or next(iter(config_ids("bos_token_id")), None)
        pad = token("pad_token") or next(iter(config_ids("pad_token_id")), None)
        eos = config_ids("eos_token_id") + ([token("eos_token")] if token("eos_token") else [])
        add_bos = tokenizer_config.get("add_bos_token")
        kwargs.setdefault("chat_template", _chat_template(tokenizer_config, folder))
        return cls.from_file(
            folder / ASSET_FILE, bos_token=bos, eos_token=eos, pad_token=pad, add_bos=add_bos, **kwargs
        )

    @classmethod
    def from_byte_level_bpe(cls, vocabulary_file, merges_file, **kwargs):
        """GPT-2's byte-level BPE with RoBERTa's and BART's special tokens,
        from a `vocab.json` and a `merges.txt`: the tokenizer.json that
        transformers' `RobertaConverter` makes of them (`BartTokenizerFast`,
        `RobertaTokenizerFast`), so its ids are `BartTokenizer`'s.

        Bytes map to GPT-2's printable characters, the text is cut by
        GPT-2's pattern (no space added in front), the merges apply in
        rank order, and `<s>` text `</s>` frame each text; `<s>`, `<pad>`,
        `</s>`, `<unk>` and `<mask>` (the ones in `vocab.json`) are special
        tokens, `<mask>` taking the space before it.

        Args:
            vocabulary_file: path to `vocab.json` ({token: id}).
            merges_file: path to `merges.txt` (an optional `#version`
                line, then one merge `a b` a line, by rank).
            **kwargs: passed to `from_file` (`generation`, ...).

        Returns:
            A `HuggingFaceTokenizer` with `<s>` as `start_token_id`, `</s>`
            as the end and `<pad>` as padding.

        Raises:
            DataError: a file is missing or not what it should be, or
                `vocab.json` lacks `<s>`, `<pad>` or `</s>`.

        References:
            Radford et al. 2019 (GPT-2), section 2.2; Liu et al. 2019
            (RoBERTa) and Lewis et al. 2020 (BART), which reuse it.
        """
        import tokenizers
        from tokenizers import AddedToken, decoders, models, pre_tokenizers, processors

        vocabulary_file, merges_file = Path(vocabulary_file), Path(merges_file)
        for path, what in ((vocabulary_file, "vocab.json"), (merges_file, "merges.txt")):
            if not path.is_file():
                raise DataError(f"{path}: does not exist; expected the byte-level BPE's {what}")
        vocabulary = _read_json_object(vocabulary_file)
        if not all(isinstance(i, int) and not isinstance(i, bool) for i in vocabulary.values()):
            raise DataError(f"{vocabulary_file}: expected {{token: int id}}")
        for token in ("<s>", "<pad>", "</s>"):
            if token not in vocabulary:
                raise DataError(f"{vocabulary_file}: has no {token!r}; expected RoBERTa's and BART's special tokens")
        merges = []
        for number, line in enumerate(merges_file.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip() or (number == 1 and line.startswith("#version")):
                continue
            pair = line.split(" ")
            if len(pair) != 2:
                raise DataError(f"{merges_file}: line {number} is {line!r}; expected two tokens, `a b`")
            merges.append(tuple(pair))
        backend = tokenizers.Tokenizer(
            models.BPE(vocab=vocabulary, merges=merges, continuing_subword_prefix="", end_of_word_suffix="",
                       fuse_unk=False)
        )
        backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        backend.decoder = decoders.ByteLevel()
        backend.post_processor = processors.RobertaProcessing(
            ("</s>", vocabulary["</s>"]), ("<s>", vocabulary["<s>"]), trim_offsets=True, add_prefix_space=False
        )
        backend.add_special_tokens([
            AddedToken(token, lstrip=token == "<mask>", normalized=False, special=True)
            for token in ("<s>", "<pad>", "</s>", "<unk>", "<mask>") if token in vocabulary
        ])
        return cls.from_file(backend, bos_token="<s>", eos_token="</s>", pad_token="<pad>", **kwargs)

    def set_tokenizer_json(self, tokenizer_json):
        """Sets the tokenizer: a path to a `tokenizer.json`, its JSON text,
        or a `tokenizers.Tokenizer`.

        Raises:
            DataError: the file is missing or not a tokenizer.json.
        """
        import tokenizers

        if isinstance(tokenizer_json, tokenizers.Tokenizer):
            text, where = tokenizer_json.to_str(), "the tokenizers.Tokenizer"
        elif isinstance(tokenizer_json, str) and tokenizer_json.lstrip().startswith("{"):
            text, where = tokenizer_json, "the tokenizer JSON"
        elif isinstance(tokenizer_json, (str, Path)):
            path = Path(tokenizer_json)
            if not path.is_file():
                raise DataError(f"{path}: does not exist; expected a Hugging Face tokenizer.json file")
            text, where = path.read_text(encoding="utf-8"), str(path)
        else:
            raise TypeError(
                "tokenizer_json: expected a path to a tokenizer.json, its JSON text or a tokenizers.Tokenizer; "
                f"got {type(tokenizer_json).__name__}."
            )
        try:
            backend = tokenizers.Tokenizer.from_str(text)
        except Exception as error:  # tokenizers raises a plain Exception for JSON and schema errors alike
            reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise DataError(f"{where}: not a Hugging Face tokenizer.json ({reason})") from None
        vocabulary = backend.get_vocab(with_added_tokens=True)
        # One more than the largest id, not the count: an embedding must hold every id, gaps included.
        size = max(vocabulary.values()) + 1 if vocabulary else 0
        for name in ("start_token_id", "pad_token_id", "end_token_ids"):
            value = getattr(self, name)
            for i in value if isinstance(value, tuple) else [value]:
                if i is not None and i >= size:
                    raise ValueError(f"{name}: id {i} is out of range; the tokenizer has ids [0, {size}).")
        self._json, self._tokenizer, self._size = text, backend, size

    def _checked(self):
        if self._tokenizer is None:
            raise ValueError(
                "HuggingFaceTokenizer has no tokenizer.json yet; pass `tokenizer_json=` or call `set_tokenizer_json`."
            )
        return self._tokenizer

    def _id_of(self, token, name):
        """The id of a special token given as a str or an int (None stays None)."""
        if token is None or isinstance(token, (int, np.integer)):
            value = _optional_id(token, name)
            if value is not None and value >= self._size:
                raise ValueError(f"{name}: id {value} is out of range; the tokenizer has ids [0, {self._size}).")
            return value
        return self.token_to_id(token)

    # --- Keras-hub's tokenizer surface ----------------------------------------

    def encode_texts(self, texts):
        backend = self._checked()
        encodings = backend.encode_batch(texts, add_special_tokens=self.add_bos is None)
        prefix = [self.start_token_id] if self.add_bos else []
        return [np.asarray(prefix + encoding.ids, dtype=np.int32) for encoding in encodings]

    def decode_rows(self, rows):
        """The texts of `rows`, the special tokens skipped."""
        return self._checked().decode_batch(rows, skip_special_tokens=True)

    def apply_chat_template(self, messages, add_generation_prompt=True, tools=None):
        """The ids of a conversation, rendered by the checkpoint's chat template
        as transformers renders it (a sandboxed Jinja2 environment with
        `trim_blocks` and `lstrip_blocks`; `messages`, `bos_token`,
        `eos_token`, `add_generation_prompt`, `raise_exception`), then
        tokenized without adding special tokens (the template writes them).

        Args:
            messages: a list of {"role": str, "content": str} dicts.
            add_generation_prompt: end with the start of an assistant turn.
            tools: OpenAI function tools for the template's `tools`, or None.

        Returns:
            A list of int ids.

        Raises:
            ValueError: the tokenizer has no chat template, or the template
                refused the messages (its `raise_exception`).
        """
        return self.tokenize_chat(self.render_chat(messages, add_generation_prompt, tools=tools))[0]

    def tokenize_chat(self, text):
        """The ids of a rendered conversation (`render_chat`'s text) as
        `apply_chat_template` makes them, and where each id is in `text`.

        Args:
            text: str, a conversation rendered by the chat template.

        Returns:
            `(ids, offsets)`: a list of int ids and a list of `(start, end)`
            character spans in `text`, one per id; a BOS added in front
            spans `(0, 0)`.
        """
        prefix = [self.start_token_id] if self.add_bos and not text.startswith(self._token(self.start_token_id)) else []
        encoding = self._checked().encode(text, add_special_tokens=False)
        return prefix + encoding.ids, [(0, 0)] * len(prefix) + [tuple(span) for span in encoding.offsets]

    def render_chat(self, messages, add_generation_prompt=True, chat_template=None, tools=None):
        """The text of `apply_chat_template`, before tokenizing; rendered by
        `chat_template` (a Jinja template) when given, else the tokenizer's
        own; `tools` are the template's `tools` (OpenAI function tools)."""
        chat_template = chat_template or self.chat_template
        if chat_template is None:
            raise ValueError(
                "the tokenizer has no chat template (tokenizer_config.json's `chat_template`); expected an "
                "instruction-tuned checkpoint, or a plain completion instead of chat"
            )
        return render_template(chat_template, messages, add_generation_prompt, tools=tools,
                               bos_token=self._token(self.start_token_id), eos_token=self._token(self.end_token_id))

    def _token(self, token_id):
        return "" if token_id is None else self.id_to_token(token_id)

    def vocabulary_size(self):
        """int. The number of token ids, the added tokens included."""
        self._checked()
        return self._size

    def get_vocabulary(self):
        """The tokens, a list of str in id order (an unused id is `""`)."""
        tokens = [""] * self.vocabulary_size()
        for token, i in self._checked().get_vocab(with_added_tokens=True).items():
            tokens[i] = token
        return tokens

    def id_to_token(self, id):
        """The token of an id."""
        token = self._checked().id_to_token(int(id))
        if token is None:
            raise ValueError(f"id {id} is out of range; expected an id in [0, {self._size}).")
        return token

    def token_to_id(self, token):
        """The id of a token."""
        i = self._checked().token_to_id(token)
        if i is None:
            raise ValueError(f"token {token!r} is not in the vocabulary of {self._size} tokens.")
        return i

    def tokenizer_json(self):
        """The tokenizer.json this tokenizer runs, as a dict."""
        self._checked()
        return json.loads(self._json)

    # --- Saving -----------------------------------------------------------------

    def save_assets(self, dir_path):
        self._checked()
        write_text(Path(dir_path) / ASSET_FILE, self._json)

    def load_assets(self, dir_path):
        self.set_tokenizer_json(Path(dir_path) / ASSET_FILE)

    def get_config(self):
        config = super().get_config()
        config.update(
            tokenizer_json=None,  # saved as an asset
            start_token_id=self.start_token_id,
            end_token_ids=list(self.end_token_ids),
            pad_token_id=self.pad_token_id,
            add_bos=self.add_bos,
            chat_template=self.chat_template,
            generation=self.generation,
        )
        return config


def _chat_template(tokenizer_config, folder):
    """The chat template of a checkpoint folder, or None."""
    template = tokenizer_config.get("chat_template")
    if isinstance(template, list):  # named templates: [{"name": "default", "template": ...}, ...]
        named = {entry.get("name"): entry.get("template") for entry in template if isinstance(entry, dict)}
        template = named.get("default")
    if template is None and (folder / "chat_template.jinja").is_file():
        template = (folder / "chat_template.jinja").read_text(encoding="utf-8")
    return template if isinstance(template, str) else None


def _optional_id(value, name):
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ValueError(f"{name}: expected a non-negative int id or None; got {value!r}.")
    return int(value)


def _read_json_object(path):
    """The JSON object of an optional config file ({} when absent)."""
    if not path.is_file():
        return {}
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as error:
        raise DataError(f"{path}: not valid JSON ({error})") from None
    if not isinstance(value, dict):
        raise DataError(f"{path}: expected a JSON object, got {type(value).__name__}")
    return value
