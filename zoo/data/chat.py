"""Chat and instruction data for supervised fine-tuning (SFT).

A conversation is what the OpenAI and Hugging Face chat formats hold: a
JSON object `{"messages": [{"role": "system" | "user" | "assistant",
"content": str}, ...]}`, or an instruction pair `{"prompt": ...,
"completion": ...}` (two strings: a user turn and the assistant's answer;
or two lists of messages, TRL's conversational shape). A chat file is JSON
Lines: one conversation a line.

A conversation that uses tools carries them as OpenAI's chat requests do:
`"tools": [{"type": "function", "function": {...}}]` beside its
messages, assistant turns with `"tool_calls": [{"type": "function",
"function": {"name": ..., "arguments": ...}}]` (their `content` null or
absent), and `"role": "tool"` turns with the calls' results. The template
renders the tools and the calls in its family's format (transformers'
`tools` argument, each call's `arguments` an object), and the loss counts
the assistant's calls as it counts its answers.

`chat_examples` renders each conversation with the tokenizer's chat
template, through the renderer `zoo serve` uses
(`HuggingFaceTokenizer.render_chat`), tokenizes it as serving does
(`tokenize_chat`), and marks the tokens the loss counts: those of the
assistant turns, each with its end token (`<|im_end|>`, `<|eot_id|>`,
EOS), and nothing of the system or user turns or of the template's own
text. An assistant turn's span is found as TRL and axolotl find it: the
conversation is rendered up to the turn with the generation prompt
(`messages[:i]`) and through the turn (`messages[:i + 1]`); the text the
turn adds, up to its last end token, is the span, and the tokens whose
characters fall in it count. The span is what a model must generate after
the prompt it is served: the answer, then the token that stops it.

Shapes: N conversations, L = `sequence_length` tokens.

Example:
```python
tokenizer.chat_template = zoo.tokenizers.CHATML  # a tokenizer without a template of its own
examples = chat_examples(tokenizer, [{"messages": [{"role": "user", "content": "Hi"},
                                                   {"role": "assistant", "content": "Hello!"}]}], 64)
examples.token_ids, examples.loss_mask  # (1, 64) each: the ids, 1 on "Hello!<|im_end|>"
```
"""

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from zoo.errors import DataError, at

ROLES = ("system", "user", "assistant", "tool")


class Conversation(list):
    """A conversation's messages (a list of dicts), with the `tools` it
    offers (OpenAI function tools, or None) as an attribute."""

    def __init__(self, messages, tools=None):
        super().__init__(messages)
        self.tools = tools

@dataclass(frozen=True)
class ChatExamples:
    """Conversations as token ids, padded on the right, with the loss mask.

    Attributes:
        token_ids: int32 (N, L), each conversation's ids, 0 after its end.
        padding_mask: int32 (N, L), 1 on the conversation's tokens.
        loss_mask: int32 (N, L), 1 on the tokens the loss counts (the
            assistant turns with their end tokens; every token with
            `train_on_prompt`).
        truncated: int, how many conversations were longer than L tokens
            and were cut to L.
    """

    token_ids: np.ndarray
    padding_mask: np.ndarray
    loss_mask: np.ndarray
    truncated: int

    def __len__(self):
        return len(self.token_ids)


def read_chat(paths):
    """The conversations of JSON Lines chat files, each checked.

    Args:
        paths: a path, or a list of them (str or `pathlib.Path`); a str
            may name several, comma-separated.

    Returns:
        A list of `Conversation`s, each a list of `{"role", "content"}`
        dicts (instruction pairs become a user turn and an assistant turn)
        with its `tools`.

    Raises:
        DataError: naming the file and line: a missing or empty file, a line
            that is not a JSON object, a message without a `role` or a
            string `content`, an unknown role, a conversation without an
            assistant turn.
    """
    if isinstance(paths, (str, Path)):
        paths = [p for p in str(paths).split(",") if p.strip()]
    conversations = []
    for path in map(Path, paths):
        if not path.is_file():
            reason = "is a folder" if path.is_dir() else "does not exist"
            raise DataError(f"{path}: {reason}; expected a JSON Lines chat file, one conversation a line")
        try:
            lines = path.read_text(encoding="utf-8").split("\n")
        except UnicodeDecodeError as error:
            raise DataError(f"{path}: expected UTF-8 text, got an undecodable byte at offset {error.start}") from None
        found = 0
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError as error:
                raise DataError(f"{at(path, number)}: not JSON ({error.msg}); expected one conversation a line, "
                                '{"messages": [{"role": ..., "content": ...}, ...]}') from None
            conversations.append(conversation_messages(record, at(path, number)))
            found += 1
        if not found:
            raise DataError(f"{path}: empty; expected one conversation a line, "
                            '{"messages": [...]} or {"prompt": ..., "completion": ...}')
    return conversations


def conversation_messages(record, where):
    """One conversation's messages, checked.

    Args:
        record: `{"messages": [...]}` or `{"prompt": ..., "completion": ...}`.
        where: str, where it comes from, for the error ("chat.jsonl, line 3").

    Returns:
        A `Conversation`: a list of `{"role": str, "content": str}` dicts
        (an assistant turn's `tool_calls` and a tool turn's `tool_call_id`
        kept, each call's `arguments` an object) and the record's `tools`.

    Raises:
        DataError: a message without a role or a string content, an unknown
            role, a malformed call or tool, or no assistant turn.
    """
    if isinstance(record, dict) and "messages" in record:
        messages = record["messages"]
    elif isinstance(record, dict) and "prompt" in record and "completion" in record:
        prompt, completion = record["prompt"], record["completion"]
        if isinstance(prompt, str) and isinstance(completion, str):
            messages = [{"role": "user", "content": prompt}, {"role": "assistant", "content": completion}]
        elif isinstance(prompt, list) and isinstance(completion, list):
            messages = prompt + completion
        else:
            raise DataError(f"{where}: expected `prompt` and `completion` both strings or both lists of messages")
    else:
        keys = ", ".join(map(repr, record)) if isinstance(record, dict) else type(record).__name__
        raise DataError(f'{where}: expected {{"messages": [...]}} or {{"prompt": ..., "completion": ...}}; got {keys}')
    if not isinstance(messages, list) or not messages:
        raise DataError(f"{where}: `messages` is not a non-empty list; expected a list of {{role, content}} objects")
    checked = []
    for i, message in enumerate(messages):
        calls = message.get("tool_calls") if isinstance(message, dict) else None
        if not isinstance(message, dict) or "role" not in message or ("content" not in message and not calls):
            raise DataError(f"{where}: message {i + 1} has no `role` or no `content`; expected "
                            '{"role": ..., "content": ...}')
        if message["role"] not in ROLES:
            raise DataError(f"{where}: message {i + 1} has role {message['role']!r}; expected one of "
                            f"{', '.join(ROLES)}")
        content = message.get("content")
        if not isinstance(content, str) and not (calls and content is None):
            raise DataError(f"{where}: message {i + 1}'s `content` is a {type(content).__name__}; "
                            "expected a string (null only beside `tool_calls`)")
        one = {"role": message["role"], "content": "" if content is None else content}
        if calls is not None:
            if message["role"] != "assistant":
                raise DataError(f"{where}: message {i + 1} has `tool_calls` but role {message['role']!r}; "
                                "expected them on an assistant turn")
            one["tool_calls"] = [_call(call, f"{where}: message {i + 1}'s tool call {j + 1}")
                                 for j, call in enumerate(calls)]
        for key in ("tool_call_id", "name"):
            if message["role"] == "tool" and isinstance(message.get(key), str):
                one[key] = message[key]
        checked.append(one)
    if not any(m["role"] == "assistant" for m in checked):
        raise DataError(f"{where}: no assistant turn; expected at least one message with role 'assistant', "
                        "the text the model learns to write")
    tools = record.get("tools")
    if tools is not None and not (isinstance(tools, list) and all(
            isinstance(t, dict) and isinstance(t.get("function"), dict) and isinstance(t["function"].get("name"), str)
            for t in tools)):
        raise DataError(f'{where}: `tools` is not a list of {{"type": "function", "function": {{"name": ..., '
                        '"parameters": ...}}}} objects')
    return Conversation(checked, tools)


def _call(call, where):
    """One assistant call as a template reads it: `{"type": "function",
    "function": {"name", "arguments": object}}` (OpenAI's JSON text of the
    arguments parsed), its `id` kept."""
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise DataError(f'{where} is not {{"type": "function", "function": {{"name": ..., "arguments": ...}}}}')
    arguments = function.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            raise DataError(f"{where}: `arguments` is not JSON; expected an object or its JSON text") from None
    if not isinstance(arguments, dict):
        raise DataError(f"{where}: `arguments` is a {type(arguments).__name__}; expected an object")
    checked = {"type": "function", "function": {"name": function["name"], "arguments": arguments}}
    if isinstance(call.get("id"), str):
        checked["id"] = call["id"]
    return checked


def chat_examples(model_or_tokenizer, conversations, sequence_length, train_on_prompt=False, chat_template=None):
    """Conversations as padded token ids and the loss mask of fine-tuning.

    Each conversation is one row: rows never share a sequence, so no token
    attends to another conversation's (the right padding is masked by
    `padding_mask`, and causal attention never looks right).

    Args:
        model_or_tokenizer: a `HuggingFaceTokenizer` or a `CharTokenizer`
            (with `CHATML_TOKENS` among its special tokens), or a model
            carrying one (`model.tokenizer`).
        conversations: a list of `{"messages": [...]}` or `{"prompt": ...,
            "completion": ...}` dicts, or of message lists (`read_chat`'s).
        sequence_length: int, L; a longer conversation is cut to its first
            L tokens and counted in `truncated`.
        train_on_prompt: bool; True counts every token, the system and user
            turns and the template's text too.
        chat_template: a Jinja template (str) to render with, e.g.
            `zoo.tokenizers.CHATML`; None uses the tokenizer's own.

    Returns:
        A `ChatExamples`.

    Raises:
        DataError: a malformed conversation (`conversation_messages`).
        ValueError: no chat template, a tokenizer that cannot render one,
            or a template that does not render a conversation prefix by
            prefix (the earlier turns' text changing as turns are added).
    """
    tokenizer = getattr(model_or_tokenizer, "tokenizer", None) or model_or_tokenizer
    if not hasattr(tokenizer, "tokenize_chat"):
        raise ValueError(f"chat_examples: a {type(tokenizer).__name__} cannot render a chat template; expected a "
                         "zoo.tokenizers.HuggingFaceTokenizer (a tokenizer.json) or CharTokenizer, or a model carrying one")
    if (chat_template or tokenizer.chat_template) is None:
        raise ValueError("chat_examples: the tokenizer has no chat template; expected chat_template=... "
                         "(zoo.tokenizers.CHATML for a model trained from scratch)")
    if not isinstance(sequence_length, int) or sequence_length < 2:
        raise ValueError(f"sequence_length: expected an int >= 2; got {sequence_length!r}")
    shape = (len(conversations), sequence_length)
    token_ids, padding_mask, loss_mask = (np.zeros(shape, "int32") for _ in range(3))
    truncated = 0
    for row, conversation in enumerate(conversations):
        messages = conversation if isinstance(conversation, list) else conversation_messages(
            conversation, f"conversations[{row}]")
        text, spans = assistant_spans(tokenizer, messages, chat_template, getattr(messages, "tools", None))
        ids, offsets = tokenizer.tokenize_chat(text)
        counted = [train_on_prompt or any(start < e and end > s for s, e in spans) for start, end in offsets]
        if len(ids) > sequence_length:
            truncated += 1
        n = min(len(ids), sequence_length)
        token_ids[row, :n], padding_mask[row, :n], loss_mask[row, :n] = ids[:n], 1, counted[:n]
    return ChatExamples(token_ids, padding_mask, loss_mask, truncated)


def assistant_spans(tokenizer, messages, chat_template=None, tools=None):
    """The rendered conversation and the character spans of its assistant
    turns, each up to and including its end token.

    Args:
        tokenizer: a `HuggingFaceTokenizer` or `CharTokenizer` (its template
            renders; its end tokens end a turn).
        messages: a list of `{"role", "content"}` dicts.
        chat_template: a Jinja template, or None for the tokenizer's own.
        tools: the template's `tools` (OpenAI function tools), or None.

    Returns:
        `(text, spans)`: the whole conversation rendered without a
        generation prompt, and a list of `(start, end)` character spans.
    """
    def render(part, add_generation_prompt):
        return tokenizer.render_chat(part, add_generation_prompt, chat_template=chat_template, tools=tools)

    ends = [tokenizer.id_to_token(i) for i in tokenizer.end_token_ids]
    text = render(messages, False)
    spans = []
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        before, through = render(messages[:i], True), render(messages[: i + 1], False)
        if not (through.startswith(before) and text.startswith(through)):
            raise ValueError(
                "the chat template does not render the conversation prefix by prefix (its earlier turns' text "
                f"changes as turn {i + 1} is added), so the assistant's tokens cannot be told apart; expected a "
                "template whose rendering of a conversation begins with the rendering of each of its beginnings"
            )
        added = through[len(before):]
        cut = max((added.rfind(end) + len(end) for end in ends if end and end in added), default=len(added))
        spans.append((len(before), len(before) + cut))
    return text, spans
