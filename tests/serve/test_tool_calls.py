"""The tool-call formats of three families: a call rendered by the
family's chat template reads back as the same call, streamed or whole,
and the grammar of a constrained call accepts the template's own calls
and refuses arguments that do not validate."""

import json

import pytest

from tests.serve.tool_templates import LLAMA31, MISTRAL, QWEN25
from zoo.serve import tool_calls
from zoo.serve.tool_calls import Call, Stream, call_grammar, format_of, parse
from zoo.tokenizers import CHATML, render_template

WEATHER = {"name": "get_weather", "description": "The weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                           "unit": {"enum": ["celsius", "fahrenheit"]},
                                                           "days": {"type": "integer"}},
                          "required": ["city", "unit"]}}
CLOCK = {"name": "time_in", "parameters": {"type": "object", "properties": {"zone": {"type": "string"}},
                                           "required": ["zone"]}}
TOOLS = [{"type": "function", "function": WEATHER}, {"type": "function", "function": CLOCK}]
NAMES = ("get_weather", "time_in")
ENDS = ("<|im_end|>\n", "<|eot_id|>", "</s>")
# (template, family format, special tokens the template writes)
FAMILIES = [(QWEN25, "hermes", {}), (LLAMA31, "llama3_json", {"bos_token": "<|begin_of_text|>"}),
            (MISTRAL, "mistral", {"bos_token": "<s>", "eos_token": "</s>"})]


def conversation(arguments, call_id="abc123XYZ"):
    return [{"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": None,
             "tool_calls": [{"id": call_id, "type": "function",
                             "function": {"name": "get_weather", "arguments": arguments}}]}]


def answer_text(template, messages, special):
    """What the model writes for the last (assistant) turn: the text the
    turn adds after the generation prompt, less its end token."""
    before = render_template(template, messages[:-1], True, tools=TOOLS, **special)
    through = render_template(template, messages, False, tools=TOOLS, **special)
    assert through.startswith(before)
    added = through[len(before):]
    for end in ENDS:
        added = added.removesuffix(end)
    return added


@pytest.mark.parametrize("template, format, special", FAMILIES, ids=["qwen2.5", "llama3.1", "mistral"])
def test_a_call_the_template_renders_reads_back_as_the_same_call(template, format, special):
    arguments = {"city": "Paris", "unit": "celsius", "days": 3}
    text = answer_text(template, conversation(arguments), special)
    assert format_of(template) == format
    content, calls = parse(text, format, NAMES)
    assert calls == [Call("get_weather", json.dumps(arguments))] and content is None
    assert json.loads(calls[0].arguments) == arguments


@pytest.mark.parametrize("template, format, special", FAMILIES, ids=["qwen2.5", "llama3.1", "mistral"])
def test_a_streamed_call_holds_back_the_call_and_reads_the_same(template, format, special):
    text = answer_text(template, conversation({"city": "Oslo", "unit": "fahrenheit"}), special)
    for size in (1, 3, 7):
        stream = Stream(format, NAMES)
        sent = "".join(stream.feed(text[i:i + size]) for i in range(0, len(text), size))
        content, calls = stream.finish()
        assert sent.strip() == "" and content is None
        assert calls == parse(text, format, NAMES)[1]


def test_the_templates_render_tools_and_tool_results():
    messages = conversation({"city": "Paris", "unit": "celsius"}) + [
        {"role": "tool", "tool_call_id": "abc123XYZ", "content": '{"temperature": 21}'}]
    for template, _, special in FAMILIES:
        text = render_template(template, messages, True, tools=TOOLS, **special)
        assert "get_weather" in text and "time_in" in text  # the tools offered
        assert "temperature" in text  # the tool's answer
    assert format_of(CHATML) == "generic"


def test_hermes_keeps_the_text_around_the_calls_and_reads_several():
    text = ('Let me look.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome", "unit": "celsius"}}\n'
            '</tool_call>\n<tool_call>\n{"name": "time_in", "arguments": {"zone": "CET"}}\n</tool_call>')
    content, calls = parse(text, "hermes", NAMES)
    assert content.strip() == "Let me look."
    assert [c.name for c in calls] == ["get_weather", "time_in"]
    assert json.loads(calls[1].arguments) == {"zone": "CET"}
    stream = Stream("hermes", NAMES)
    sent = "".join(stream.feed(text[i:i + 2]) for i in range(0, len(text), 2))
    held, streamed = stream.finish()
    assert sent == "Let me look.\n" and streamed == calls and held is None


def test_text_that_is_not_a_call_stays_content():
    for text, format in [('<tool_call>\n{"name": "rm_rf", "arguments": {}}\n</tool_call>', "hermes"),
                         ('{"name": "get_weather", "parameters": "not an object"}', "llama3_json"),
                         ("[TOOL_CALLS] [not json", "mistral"), ("Just words {", "generic"),
                         ('{"city": "Paris"}', "generic"), ("Sunny, 21 degrees.", "llama3_json")]:
        assert parse(text, format, NAMES) == (text, [])
        stream = Stream(format, NAMES)
        sent = "".join(stream.feed(c) for c in text)
        held, calls = stream.finish()
        assert sent + (held or "") == text and calls == []


def test_llama_reads_several_calls_and_its_python_tag():
    text = ('<|python_tag|>{"name": "time_in", "parameters": {"zone": "UTC"}}; '
            '{"name": "get_weather", "parameters": {"city": "Lima", "unit": "celsius"}}')
    assert [c.name for c in parse(text, "llama3_json", NAMES)[1]] == ["time_in", "get_weather"]


def test_mistral_reads_calls_without_its_marker_a_decoder_leaves_out():
    text = '[{"name": "time_in", "arguments": {"zone": "UTC"}, "id": "a1b2c3d4e"}]'
    assert parse(text, "mistral", NAMES) == (None, [Call("time_in", '{"zone": "UTC"}')])
    assert len(tool_calls.call_id("mistral")) == 9 and tool_calls.call_id("hermes").startswith("call_")


def test_the_generic_format_reads_a_fenced_call_after_text():
    text = 'Calling it.\n```json\n{"name": "time_in", "arguments": {"zone": "PST"}}\n```'
    content, calls = parse(text, "generic", NAMES)
    assert content == "Calling it.\n" and calls == [Call("time_in", '{"zone": "PST"}')]


@pytest.fixture(scope="module")
def llg_tokenizer(tmp_path_factory):
    llguidance = pytest.importorskip("llguidance")
    from tests.checkpoints.llama_checkpoints import hf_folder

    folder = hf_folder(tmp_path_factory.mktemp("qwen") / "qwen2", "qwen2")
    return llguidance.LLTokenizer((folder / "tokenizer.json").read_text(encoding="utf-8"))


def accepts(tokenizer, grammar, text):
    import llguidance

    matcher = llguidance.LLMatcher(tokenizer, grammar)
    return matcher.consume_tokens(tokenizer.tokenize_str(text)) and matcher.is_accepting()


@pytest.mark.parametrize("template, format, special", FAMILIES, ids=["qwen2.5", "llama3.1", "mistral"])
def test_the_call_grammar_accepts_the_templates_call_and_refuses_bad_arguments(llg_tokenizer, template, format,
                                                                                special):
    grammar = call_grammar([WEATHER], format)
    good = answer_text(template, conversation({"city": "Paris", "unit": "celsius"}), special)
    good = good.removesuffix(', "id": "abc123XYZ"}]') + "}]" if format == "mistral" else good
    assert accepts(llg_tokenizer, grammar, good)
    for arguments in ({"city": "Paris"}, {"city": "Paris", "unit": "kelvin"}, {"city": 3, "unit": "celsius"}):
        bad = answer_text(template, conversation(arguments), special)
        bad = bad.removesuffix(', "id": "abc123XYZ"}]') + "}]" if format == "mistral" else bad
        assert not accepts(llg_tokenizer, grammar, bad)
    either = call_grammar([WEATHER, CLOCK], format)
    assert accepts(llg_tokenizer, either, good)


def test_mistrals_marker_is_its_special_token_where_the_tokenizer_has_one(llg_tokenizer):
    from tests.checkpoints.llama_checkpoints import IM_START, tokenizer_json
    from zoo.tokenizers import HuggingFaceTokenizer

    marker = HuggingFaceTokenizer.from_file(tokenizer_json("qwen2")).token_to_id(IM_START)  # a special token
    grammar = call_grammar([CLOCK], "mistral", marker_id=marker)
    import llguidance

    call = ' [{"name": "time_in", "arguments": {"zone": "UTC"}}]'
    matcher = llguidance.LLMatcher(llg_tokenizer, grammar)
    assert matcher.consume_tokens([marker] + llg_tokenizer.tokenize_str(call)) and matcher.is_accepting()
    assert not accepts(llg_tokenizer, grammar, "[TOOL_CALLS]" + call)  # the marker as text is not the token
