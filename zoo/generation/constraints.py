"""Constrained decoding: output that follows a JSON schema, a regular
expression, a list of choices or a grammar, as vLLM and SGLang give it,
with llguidance's matcher (MIT; `pip install 'zoo[structured]'`).

The host runs one `llguidance.LLMatcher` per constrained row. Before each
step it writes the tokens the row's grammar allows next into a packed
bitmask, (B, ceil(V/32)) int32, bit `t % 32` of word `t // 32` set where
token t is allowed (llguidance's layout), and a (B,) flag of the rows
that are constrained. Both enter the compiled step as inputs (vLLM's TPU
backend does the same): `apply` unpacks the bits with shifts and removes
the disallowed tokens' logits before the controls and the sampler, so
that greedy, every sampler and every control choose among allowed tokens
alone, and a free row's logits are untouched. The program does not
depend on the grammar: one compiled step serves every schema, and free
rows beside constrained ones.

    text = grammar(json_schema={"type": "object", "properties": {"n": {"type": "integer"}}})
    decoding = Decoding(lm, prompt_ids, 64, constraints=[text, None])  # row 1 is free

A row's stop tokens are allowed only where its grammar accepts, and the
row ends once its matcher has stopped (nothing more can follow).

llguidance reads the vocabulary as the bytes of each token (`vocabulary`):
a `tokenizer.json` as it is (byte-level BPE: GPT-2, Llama 3, Qwen;
SentencePiece's `▁` and `<0xNN>` pieces: Llama 2, Gemma), a SentencePiece
model's pieces (Marian, T5), keras-hub's byte-level `BytePairTokenizer`
and the zoo's `CharTokenizer`.

Shape letters: B rows, V vocabulary, W = ceil(V / 32) packed words.
"""

import json
import re
import weakref

import numpy as np
from keras import ops

from zoo.generation.samplers import REMOVED

INSTALL = "pip install 'zoo[structured]'"
KINDS = ("json_schema", "regex", "choices", "grammar", "json_object")

# Compact JSON (OpenAI's, no whitespace between tokens): a schema's
# "x-guidance" options override it (llguidance's `whitespace_flexible`).
JSON_OPTIONS = {"whitespace_flexible": False}


def llguidance():
    """The `llguidance` module, or an ImportError naming the extra."""
    try:
        import llguidance as module
    except ImportError:
        raise ImportError(f"Constrained decoding needs llguidance: {INSTALL}.") from None
    return module


# --- The grammar of one row ----------------------------------------------------------


def grammar(json_schema=None, regex=None, choices=None, grammar=None, json_object=False):
    """The llguidance grammar of one constraint, checked; None for none.

    Args:
        json_schema: a JSON schema, as a dict, a JSON str, or a pydantic
            model class (its `model_json_schema()`).
        regex: a regular expression (Rust's `regex` syntax) the whole
            output matches.
        choices: a list of str: the output is one of them.
        grammar: a Lark grammar, or a GBNF one (llama.cpp's), as llguidance
            reads them.
        json_object: True: any JSON object (OpenAI's `{"type": "json_object"}`).

    Returns:
        The grammar as llguidance takes it (a str), or None when no
        constraint is given. At most one may be given; a malformed one is
        refused in one line naming the argument.
    """
    given = {name: value for name, value in zip(KINDS, (json_schema, regex, choices, grammar, json_object))
             if value is not None and value is not False}
    if not given:
        return None
    if len(given) > 1:
        raise ValueError(f"Give one constraint, not {' and '.join(f'`{name}`' for name in given)}.")
    (name, value), = given.items()
    llg = llguidance()
    if name == "json_schema":
        text = llg.LLMatcher.grammar_from_json_schema(_schema(value), defaults=JSON_OPTIONS)
    elif name == "json_object":
        if value is not True:
            raise ValueError(f"`json_object` must be True or False; got {value!r}.")
        text = llg.LLMatcher.grammar_from_json_schema({"type": "object"}, defaults=JSON_OPTIONS)
    elif name == "regex":
        if not isinstance(value, str) or not value:
            raise ValueError(f"`regex` must be a non-empty str; got {value!r}.")
        text = llg.LLMatcher.grammar_from_regex(value)
    elif name == "choices":
        if (not isinstance(value, (list, tuple)) or not value
                or not all(isinstance(choice, str) and choice for choice in value)):
            raise ValueError(f"`choices` must be a non-empty list of non-empty str; got {value!r}.")
        text = llg.grammar_from("choice", list(value))
    else:
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"`grammar` must be a Lark or GBNF grammar (a str); got {value!r}.")
        try:
            text = llg.grammar_from("gbnf" if "::=" in value else "lark", value)
        except ValueError as error:
            raise ValueError(f"`grammar` is not a grammar llguidance reads: {_one_line(error)}") from None
    problem = llg.LLMatcher.validate_grammar(text)
    if problem:
        raise ValueError(f"`{name}` is refused by llguidance: {_one_line(problem)}")
    return text


def _schema(value):
    """A JSON schema dict from a dict, a JSON str or a pydantic model class."""
    if isinstance(value, type) and hasattr(value, "model_json_schema"):
        return value.model_json_schema()
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as error:
            raise ValueError(f"`json_schema` is not valid JSON: {error}.") from None
    if not isinstance(value, dict):
        raise ValueError(f"`json_schema` must be a JSON schema (a dict, a JSON str or a pydantic model class); "
                         f"got {type(value).__name__}.")
    return value


def _one_line(message):
    return " ".join(str(message).split())


def grammars(batch, json_schema=None, regex=None, choices=None, grammar=None, json_object=None):
    """B grammars (each a str, or None for a free row) from `grammar`'s
    arguments, each one value for every row or a list of one a row (None
    in it: that row free); None when no row is constrained.

    A list of str for `choices` is one choice list for every row; one a row
    is a list of B lists (or None).
    """
    per_row = {}
    for name, value in zip(KINDS, (json_schema, regex, choices, grammar, json_object)):
        if value is None or value is False:
            continue
        one_each = (isinstance(value, (list, tuple)) and
                    (name != "choices" or all(v is None or isinstance(v, (list, tuple)) for v in value)))
        if one_each and len(value) != batch:
            raise ValueError(f"`{name}` has {len(value)} values for {batch} rows; expected one, or one per row.")
        per_row[name] = list(value) if one_each else [value] * batch
    if not per_row:
        return None
    rows, seen = [], {}
    for row in range(batch):
        given = {name: values[row] for name, values in per_row.items()}
        key = repr(sorted(given.items(), key=lambda item: item[0]))
        if key not in seen:
            seen[key] = _grammar(**given)
        rows.append(seen[key])
    return rows if any(row is not None for row in rows) else None


_grammar = grammar


# --- The vocabulary as bytes -----------------------------------------------------------

_TOKENIZERS = weakref.WeakKeyDictionary()  # tokenizer -> {(V, stop ids): LLTokenizer}


def vocabulary(tokenizer, vocabulary_size, stop_token_ids):
    """llguidance's `LLTokenizer` of a zoo or keras-hub tokenizer, for a
    model of `vocabulary_size` ids (a model may have more ids than its
    tokenizer) whose `stop_token_ids` end a row (llguidance's end tokens,
    allowed where the grammar accepts). Made once per tokenizer (about a
    second for a 128k vocabulary)."""
    key = (int(vocabulary_size), tuple(stop_token_ids))
    try:
        made = _TOKENIZERS.setdefault(tokenizer, {})
    except TypeError:
        made = {}
    if key not in made:
        made[key] = _llg_tokenizer(tokenizer, *key)
    return made[key]


def _llg_tokenizer(tokenizer, vocabulary_size, stop_token_ids):
    llg = llguidance()
    kind = type(tokenizer).__name__
    if hasattr(tokenizer, "tokenizer_json"):  # HuggingFaceTokenizer
        data = tokenizer.tokenizer_json()
        if (data.get("decoder") or {}).get("type") in ("ByteLevel", "Sequence"):  # llguidance reads these itself
            try:
                return llg.LLTokenizer(json.dumps(data), n_vocab=max(vocabulary_size, tokenizer.vocabulary_size()),
                                       eos_token=list(stop_token_ids) or None)
            except ValueError:
                pass
        added = {token["id"] for token in data.get("added_tokens", ()) if token.get("special")}
        tokens, special = _sentence_piece_bytes(tokenizer.get_vocabulary(), added)  # Metaspace: `▁` and <0xNN>
    elif hasattr(tokenizer, "pieces") and hasattr(tokenizer, "unknown_token_id"):  # Marian, T5
        named = {tokenizer.pad_token_id, tokenizer.end_token_id, tokenizer.unknown_token_id}
        tokens, special = _sentence_piece_bytes(tokenizer.get_vocabulary(), named)
    elif kind == "CharTokenizer":
        tokens, special = _char_bytes(tokenizer.vocabulary)
    elif kind == "BytePairTokenizer":
        tokens, special = _byte_pair_bytes(tokenizer)
    else:
        raise ValueError(
            f"Constrained decoding reads each token's bytes, which a {kind} does not give (its tokens are not pieces "
            "of the text); expected a HuggingFaceTokenizer, MarianTokenizer, T5Tokenizer, CharTokenizer or "
            "keras-hub BytePairTokenizer."
        )
    # Ids the model has past the tokenizer's, and a stand-in end token when
    # the row has no stop token (its bit lies past V: never chosen).
    tokens += [b""] * (vocabulary_size - len(tokens))
    ends = list(stop_token_ids)
    if not ends:
        ends = [len(tokens)]
        tokens.append(b"<|end|>")
        special.append(ends[0])
    special = sorted(set(special) | set(ends))
    for i in special:  # llguidance's mark of a special token
        tokens[i] = b"\xff" + tokens[i]
    return llg.LLTokenizer(llg.TokenizerWrapper(_Greedy(tokens, special, ends[0])), eos_token=ends)


class _Greedy:
    """What `llguidance.TokenizerWrapper` reads of a vocabulary given as
    bytes: the tokens, the special ids, and a tokenizer of text, here the
    longest token first (llguidance tokenizes the text a grammar forces
    with it; any tokenization of the same bytes serves)."""

    def __init__(self, tokens, special_token_ids, eos_token_id):
        self.tokens, self.special_token_ids, self.eos_token_id = tokens, special_token_ids, eos_token_id
        self.bos_token_id = None
        special = set(special_token_ids)
        self._ids = {}
        for i, token in enumerate(tokens):
            if token and i not in special:
                self._ids.setdefault(token, i)
        self._longest = max(map(len, self._ids), default=1)

    def __call__(self, text):
        data = text if isinstance(text, bytes) else text.encode("utf-8")
        ids, start = [], 0
        while start < len(data):
            for end in range(min(len(data), start + self._longest), start, -1):
                if data[start:end] in self._ids:
                    ids.append(self._ids[data[start:end]])
                    start = end
                    break
            else:
                start += 1  # a byte no token holds
        return ids


_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def _sentence_piece_bytes(pieces, named):
    """Each SentencePiece piece's bytes (`▁` a space, `<0xNN>` the byte NN),
    and the special ids: `named`, the empty pieces, `<...>` (`<pad>`,
    `</s>`, T5's sentinels) and Marian's `>>xx<<` language codes."""
    tokens, special = [], []
    for i, piece in enumerate(pieces):
        byte = _BYTE_PIECE.fullmatch(piece)
        if byte:
            tokens.append(bytes([int(byte.group(1), 16)]))
        elif i in named or not piece or (piece.startswith("<") and piece.endswith(">")) or (
                piece.startswith(">>") and piece.endswith("<<")):
            tokens.append(piece.encode())
            special.append(i)
        else:
            tokens.append(piece.replace("\u2581", " ").encode())
    return tokens, special


def _char_bytes(chars):
    """A `CharVocabulary`'s characters as UTF-8, its special tokens special."""
    tokens = [c.encode() for c in chars.characters] + [t.encode() for t in chars.special_tokens]
    return tokens, list(range(len(chars.characters), len(tokens)))


def _byte_pair_bytes(tokenizer):
    """keras-hub's byte-level `BytePairTokenizer`: each token's printable
    characters mapped back to bytes (GPT-2's `bytes_to_unicode`), its
    unsplittable tokens special."""
    byte_of = {char: byte for byte, char in _gpt2_alphabet().items()}
    unsplittable = set(getattr(tokenizer, "unsplittable_tokens", None) or ())
    tokens, special = [], []
    for i, token in enumerate(tokenizer.get_vocabulary()):
        if token in unsplittable or not all(c in byte_of for c in token):
            tokens.append(token.encode())
            special.append(i)
        else:
            tokens.append(bytes(byte_of[c] for c in token))
    return tokens, special


def _gpt2_alphabet():
    """GPT-2's `bytes_to_unicode`: {byte: the printable character that stands for it}."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(
        range(ord("®"), ord("ÿ") + 1))
    characters, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            characters[byte] = chr(byte)
        else:
            characters[byte] = chr(256 + extra)
            extra += 1
    return characters


# --- The rows' matchers and the mask --------------------------------------------------


class Matcher:
    """One row's llguidance matcher: `fill` writes the tokens allowed next
    into a packed bitmask row, `consume` advances by a chosen token.

    Args:
        llg_tokenizer: `vocabulary`'s LLTokenizer.
        grammar: a grammar of `grammar`.
    """

    def __init__(self, llg_tokenizer, grammar):
        llg = llguidance()
        from llguidance.numpy import fill_next_token_bitmask

        self._fill = fill_next_token_bitmask
        self.matcher = llg.LLMatcher(llg_tokenizer, grammar, log_level=0)
        if self.matcher.is_error():
            raise ValueError(f"The constraint is refused by llguidance: {_one_line(self.matcher.get_error())}")

    def fill(self, bitmask, row):
        """Writes row `row` of the (B, W) int32 `bitmask`."""
        self._fill(self.matcher, bitmask, row)

    def consume(self, token):
        """Advances by `token`; a RuntimeError if the grammar did not allow it."""
        if not self.matcher.consume_token(int(token)):
            raise RuntimeError(f"Token {token} was chosen against the row's grammar: "
                               f"{_one_line(self.matcher.get_error())}")

    @property
    def stopped(self):
        """Whether nothing more can follow (the grammar is complete, or an end token came)."""
        return self.matcher.is_stopped()

    @property
    def accepting(self):
        """Whether the text so far is a whole match."""
        return self.matcher.is_accepting()


class Constraints:
    """The constrained rows of one decoding: their matchers, the packed
    bitmask (B, W) int32 and the (B,) flag that enter the compiled step.

    Args:
        tokenizer: the model's tokenizer (`vocabulary` reads it).
        vocabulary_size: V, the model's ids.
        stop_token_ids: the decoding's stop ids.
        grammars: B grammars (`grammar`'s str) or None (a free row).
    """

    def __init__(self, tokenizer, vocabulary_size, stop_token_ids, grammars):
        self.vocabulary_size = int(vocabulary_size)
        self.llg_tokenizer = vocabulary(tokenizer, vocabulary_size, stop_token_ids)
        self.matchers = [None if text is None else Matcher(self.llg_tokenizer, text) for text in grammars]
        self.flags = np.array([m is not None for m in self.matchers])
        self.bitmask = np.full((len(grammars), words(self.llg_tokenizer.vocab_size)), -1, "int32")
        for row, matcher in enumerate(self.matchers):
            if matcher is not None:
                matcher.fill(self.bitmask, row)

    def arrays(self):
        """(bitmask, flags): what the next step's tokens may be."""
        return self.bitmask, self.flags

    def consume(self, row, token):
        """Advances row `row` by its chosen `token` and writes its next
        mask; True when the row has ended: its matcher has stopped, or it
        accepts and allows none of the model's ids (only an end token the
        row does not have)."""
        matcher = self.matchers[row]
        if matcher is None:
            return False
        matcher.consume(token)
        if matcher.stopped:
            if not matcher.accepting:
                raise ValueError(f"Row {row}'s constraint cannot be completed: no token of the vocabulary continues "
                                 f"its text; expected a grammar the tokenizer's tokens can spell.")
            return True
        matcher.fill(self.bitmask, row)
        return matcher.accepting and not self.allowed(row).any()

    def allowed(self, row):
        """(V,) bool: the ids row `row` may choose next (NumPy's `unpack`)."""
        bits = (self.bitmask[row][:, None] >> np.arange(32, dtype="int32")) & 1  # (W, 32)
        return bits.reshape(-1)[: self.vocabulary_size] > 0


def words(vocabulary_size):
    """W: the packed int32 words of a bitmask over `vocabulary_size` ids."""
    return (int(vocabulary_size) + 31) // 32


def unpack(bitmask, vocabulary_size):
    """(B, V) bool from the packed (B, W) int32 `bitmask`: token t is
    allowed where bit t % 32 of word t // 32 is set."""
    shifts = ops.arange(32, dtype="int32")
    bits = ops.bitwise_and(ops.right_shift(ops.expand_dims(bitmask, -1), shifts), 1)  # (B, W, 32)
    return ops.reshape(bits, (bitmask.shape[0], -1))[:, :vocabulary_size] > 0


def apply(logits, bitmask, constrained):
    """(B, V) logits with each constrained row's disallowed tokens removed
    (at `REMOVED`, as the suppressed ids); a free row's untouched.

    Args:
        logits: (B, V) float32.
        bitmask: (B, W) int32, packed (`unpack`); W * 32 >= V.
        constrained: (B,) bool, the rows whose mask applies.
    """
    allowed = unpack(bitmask, logits.shape[-1])
    keep = ops.logical_or(allowed, ops.logical_not(ops.expand_dims(constrained, 1)))
    return ops.where(keep, logits, ops.cast(REMOVED, logits.dtype))
