"""nanoGPT's character tokenizer as a Keras layer a model carries, with
chat templates over special tokens."""

import keras

from zoo.errors import DataError
from zoo.tokenizers.char_vocabulary import CharVocabulary
from zoo.tokenizers.chat_template import CHATML_TOKENS, render_template
from zoo.tokenizers.vocabulary_tokenizer import VocabularyTokenizer


@keras.saving.register_keras_serializable(package="zoo")
class CharTokenizer(VocabularyTokenizer):
    """A character tokenizer (nanoGPT's), as a Keras layer a model can carry.

    The same ids as `CharVocabulary`, with keras-hub's tokenizer methods.
    Saved inside a model's `.keras` file as the asset `chars.json`.

    It chats as a `HuggingFaceTokenizer` does (`render_chat`,
    `tokenize_chat`, `apply_chat_template`) once its vocabulary holds the
    markers its `chat_template` writes as special tokens: ChatML's
    (`zoo.tokenizers.CHATML`, the template of a model trained from scratch) with
    `with_special_tokens(zoo.tokenizers.CHATML_TOKENS)`. `<|im_end|>` is then its
    end token (`end_token_ids`), where `zoo.generate` on text and `zoo
    serve` stop; `detokenize` leaves the special tokens out, as
    transformers' `skip_special_tokens`.

    Args:
        vocabulary: a `CharVocabulary`, a str or sequence of distinct
            characters in id order, a path to a `chars.json` written by
            `CharVocabulary.save`, or None (set later, e.g. when loading).
        chat_template: a Jinja chat template (str), or None.

    Example:
    ```python
    tokenizer = CharTokenizer.from_text("hello world")
    tokenizer("hold")  # array([3, 5, 4, 1], dtype=int32)
    tokenizer.detokenize([3, 5, 4, 1])  # "hold"
    lm = zoo.build("gpt-nano", "causal_lm", vocabulary_size=tokenizer.vocabulary_size(), tokenizer=tokenizer)
    chat = CharTokenizer.from_text("user\nassistant\nhello").with_special_tokens(zoo.tokenizers.CHATML_TOKENS)
    chat.chat_template = zoo.tokenizers.CHATML  # the markers are ids 12 and 13, after the 12 characters
    chat.apply_chat_template([{"role": "user", "content": "hello"}])  # [12, 11, 9, 2, 8, 0, 3, 2, 5, 5, 7, 13, 0, 12, ...]
    ```
    """

    asset_file = "chars.json"
    vocabulary_class = CharVocabulary

    def __init__(self, vocabulary=None, chat_template=None, **kwargs):
        super().__init__(vocabulary, **kwargs)
        if chat_template is not None and not isinstance(chat_template, str):
            raise ValueError(f"chat_template: expected a Jinja template (a str) or None; got {type(chat_template).__name__}.")
        self.chat_template = chat_template

    @classmethod
    def from_text(cls, text, **kwargs):
        """The tokenizer of the sorted characters of `text`."""
        return cls(CharVocabulary.from_text(text), **kwargs)

    def with_special_tokens(self, tokens):
        """This tokenizer with `tokens` appended as special tokens, those it
        lacks, after its ids (which keep their meaning), and its template.

        Args:
            tokens: a sequence of str, e.g. `zoo.tokenizers.CHATML_TOKENS`.

        Returns:
            A `CharTokenizer`.
        """
        vocabulary = self._checked()
        added = [t for t in tokens if t not in vocabulary.special_tokens]
        return CharTokenizer(CharVocabulary(vocabulary.characters, vocabulary.special_tokens + added),
                             chat_template=self.chat_template)

    @property
    def special_tokens(self):
        """The special tokens, a list of str in id order (after the characters)."""
        return list(self._checked().special_tokens)

    @property
    def end_token_ids(self):
        """A tuple of int: the id of ChatML's `<|im_end|>`, the end of a turn,
        when the vocabulary has it; else empty."""
        return tuple(self.token_to_id(t) for t in CHATML_TOKENS[1:] if t in self.special_tokens)

    @property
    def end_token_id(self):
        """int or None. The first of `end_token_ids`."""
        return self.end_token_ids[0] if self.end_token_ids else None

    def render_chat(self, messages, add_generation_prompt=True, chat_template=None, tools=None):
        """A conversation's text, rendered by `chat_template` (a Jinja
        template) when given, else the tokenizer's own; `tools` are the
        template's `tools` (OpenAI function tools)."""
        chat_template = chat_template or self.chat_template
        if chat_template is None:
            raise ValueError("the tokenizer has no chat template; expected zoo.tokenizers.CHATML, the template of a model "
                             "trained from scratch (`tokenizer.chat_template = zoo.tokenizers.CHATML`)")
        return render_template(chat_template, messages, add_generation_prompt, tools=tools)

    def tokenize_chat(self, text):
        """The ids of a rendered conversation and where each id is in it.

        Args:
            text: str, a conversation rendered by the chat template.

        Returns:
            `(ids, offsets)`: a list of int ids and a list of `(start, end)`
            character spans in `text`, one per id.

        Raises:
            DataError: a character of `text` is not in the vocabulary (a
                marker the template writes that is not a special token).
        """
        try:
            ids, offsets = self._checked().encode_with_offsets(text)
        except DataError as error:
            raise DataError(f"{error}; a chat template's markers must be special tokens "
                            "(`with_special_tokens(zoo.tokenizers.CHATML_TOKENS)` for ChatML)") from None
        return ids.tolist(), [tuple(span) for span in offsets.tolist()]

    def apply_chat_template(self, messages, add_generation_prompt=True, tools=None):
        """The ids of a conversation rendered by the chat template.

        Args:
            messages: a list of {"role": str, "content": str} dicts.
            add_generation_prompt: end with the start of an assistant turn.
            tools: OpenAI function tools for the template's `tools`, or None.

        Returns:
            A list of int ids.
        """
        return self.tokenize_chat(self.render_chat(messages, add_generation_prompt, tools=tools))[0]

    def _decode(self, vocabulary, ids):
        return vocabulary.decode(ids, skip_special_tokens=True)

    def _tokens(self):
        vocabulary = self._checked()
        return vocabulary.characters + vocabulary.special_tokens

    def get_config(self):
        config = super().get_config()
        config["chat_template"] = self.chat_template
        return config
