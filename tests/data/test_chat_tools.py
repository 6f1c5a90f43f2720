"""Fine-tuning data with tools: a conversation's `tools`, the assistant's
`tool_calls` and the `tool` turns rendered by the family's template, and
the loss on the assistant's calls and answers only."""

import json

import pytest

from tests.checkpoints.llama_checkpoints import IM_END, QWEN_END, tokenizer_json
from tests.data.test_chat import real, reference, write
from tests.serve.tool_templates import QWEN25
from zoo.data import DataError, chat_examples, read_chat
from zoo.tokenizers import HuggingFaceTokenizer

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                           "parameters": {"type": "object",
                                                          "properties": {"city": {"type": "string"}},
                                                          "required": ["city"]}}}]
TALK = {"tools": TOOLS, "messages": [
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "tool_calls": [{"id": "call_1", "type": "function",
                                          "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": '{"celsius": 21}'},
    {"role": "assistant", "content": "21 degrees in Paris."},
]}
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


@pytest.fixture(scope="module")
def qwen():
    return HuggingFaceTokenizer.from_file(tokenizer_json("qwen2"), eos_token=[IM_END, QWEN_END], pad_token=QWEN_END,
                                          chat_template=QWEN25)


def test_the_loss_counts_the_call_and_the_answer_and_not_the_tool_result(qwen, tmp_path):
    conversation, = read_chat(write(tmp_path / "tools.jsonl", json.dumps(TALK)))
    assert conversation.tools == TOOLS
    assert conversation[1]["tool_calls"][0]["function"]["arguments"] == {"city": "Paris"}  # as templates read it
    examples = chat_examples(qwen, [conversation], 1024)
    text = qwen.render_chat(conversation, add_generation_prompt=False, tools=TOOLS)
    assert CALL in text and "# Tools" in text and "<tool_response>\n{\"celsius\": 21}" in text
    ids, mask = reference(qwen, text, [CALL, "21 degrees in Paris."], IM_END)
    assert real(examples) == (ids, mask)
    counted = qwen.detokenize([i for i, m in zip(ids, mask) if m])
    assert counted == CALL + "21 degrees in Paris."  # the end tokens count too, and are left out of the text
    assert chat_examples(qwen, [TALK], 1024).token_ids.tolist() == examples.token_ids.tolist()  # a dict, the same


@pytest.mark.parametrize("change, expected", [
    (lambda t: t["messages"][1]["tool_calls"][0]["function"].update(arguments="{city"), r"`arguments` is not JSON"),
    (lambda t: t["messages"][1]["tool_calls"][0].pop("function"), r"tool call 1 is not"),
    (lambda t: t["messages"][0].update(tool_calls=[]), r"`tool_calls` but role 'user'"),
    (lambda t: t.update(tools=[{"type": "function"}]), r"`tools` is not a list"),
    (lambda t: t["messages"][2].update(content=None), r"message 3's `content` is a NoneType"),
])
def test_a_malformed_call_or_tool_is_named(tmp_path, change, expected):
    talk = json.loads(json.dumps(TALK))
    change(talk)
    with pytest.raises(DataError, match=r"bad\.jsonl, line 1: .*" + expected):
        read_chat(write(tmp_path / "bad.jsonl", json.dumps(talk)))
