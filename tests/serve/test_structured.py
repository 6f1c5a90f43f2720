"""Answers that follow a structure through `zoo serve` and the official
`openai` client, on a random-weight model (nothing but the grammar keeps
it valid): `response_format` and `parse()`, vLLM's `guided_*` and
`structured_outputs`, and calls forced by `tool_choice`, streamed and
whole; malformed structures refused before decoding."""

import json
import re
from typing import Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field

import zoo
from tests.serve.conftest import Server
from tests.serve.tool_templates import QWEN25

pytest.importorskip("llguidance")
jsonschema = pytest.importorskip("jsonschema")


class Weather(BaseModel):
    model_config = ConfigDict(extra="forbid")  # no other keys: a random model would write long ones
    city: Literal["Paris", "Oslo", "Lima"]
    days: int = Field(ge=1, le=7)
    rain: bool


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The forecast of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 6},
                                                    "unit": {"enum": ["celsius", "fahrenheit"]},
                                                    "days": {"type": "integer", "minimum": 1, "maximum": 9}},
                   "required": ["city", "unit", "days"], "additionalProperties": False}}}
CLOCK = {"type": "function", "function": {
    "name": "time_in", "parameters": {"type": "object", "properties": {"zone": {"enum": ["UTC", "CET"]}},
                                      "required": ["zone"], "additionalProperties": False}}}
ASK = [{"role": "user", "content": "Weather?"}]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from tests.checkpoints.llama_checkpoints import hf_folder

    folder = hf_folder(tmp_path_factory.mktemp("qwen") / "qwen2", "qwen2", max_position_embeddings=2048)
    settings = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**settings, "chat_template": QWEN25}))
    served = Server(zoo.from_pretrained(folder), name="qwen")
    yield served
    served.stop()


def test_parse_returns_the_pydantic_object_of_a_schema(server):
    client = server.client()
    for seed in range(3):
        answer = client.chat.completions.parse(model="qwen", messages=ASK, response_format=Weather, max_tokens=120,
                                               temperature=1.0, seed=seed)
        parsed = answer.choices[0].message.parsed
        assert isinstance(parsed, Weather), answer.choices[0].message.content
        assert Weather.model_validate_json(answer.choices[0].message.content) == parsed


def test_json_object_and_vllm_structures_on_completions_and_chat(server):
    client = server.client()
    answer = client.chat.completions.create(model="qwen", messages=ASK, response_format={"type": "json_object"},
                                            max_tokens=60, temperature=1.0, seed=1)
    if answer.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(answer.choices[0].message.content), dict)
    choices = ["yes", "no", "maybe later"]
    for extra in ({"guided_choice": choices}, {"structured_outputs": {"choice": choices}}):
        for seed in range(3):
            text = client.completions.create(model="qwen", prompt="Is it?", max_tokens=10, temperature=1.0,
                                             seed=seed, extra_body=extra).choices[0].text
            assert text in choices
    for extra in ({"guided_regex": r"[0-9]{3}-[a-c]{2}"}, {"structured_outputs": {"regex": r"[0-9]{3}-[a-c]{2}"}}):
        text = client.chat.completions.create(model="qwen", messages=ASK, max_tokens=10, temperature=1.0, seed=2,
                                              extra_body=extra).choices[0].message.content
        assert re.fullmatch(r"[0-9]{3}-[a-c]{2}", text)
    for extra in ({"guided_grammar": 'start: "up" | "down" NUMBER\nNUMBER: /[0-9]/'},
                  {"structured_outputs": {"grammar": 'root ::= "up" | "down" [0-9]'}}):  # Lark, then GBNF
        text = client.completions.create(model="qwen", prompt="Where?", max_tokens=10, temperature=1.0, seed=4,
                                         extra_body=extra).choices[0].text
        assert re.fullmatch(r"up|down[0-9]", text)
    schema = Weather.model_json_schema()
    for extra in ({"guided_json": schema}, {"structured_outputs": {"json": json.dumps(schema)}}):
        answer = client.completions.create(model="qwen", prompt="{", max_tokens=120, temperature=1.0, seed=3,
                                           extra_body=extra).choices[0]
        assert answer.finish_reason == "stop", answer.text
        Weather.model_validate_json(answer.text)


def test_malformed_or_doubled_structures_are_refused_in_one_line(server):
    import openai

    client = server.client()
    cases = [
        (dict(response_format={"type": "json_schema", "json_schema": {"name": "w", "schema": {"type": "objekt"}}}),
         "response_format"),
        (dict(extra_body={"guided_regex": "(unclosed"}), "guided_regex"),
        (dict(extra_body={"guided_choice": []}), "guided_choice"),
        (dict(response_format={"type": "json_object"}, extra_body={"guided_regex": "a+"}), "guided_regex"),
        (dict(extra_body={"structured_outputs": {"regex": "a", "choice": ["a"]}}), "structured_outputs"),
        (dict(tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "rm"}}), "tool_choice"),
        (dict(tool_choice="required"), "tool_choice"),
        (dict(response_format={"type": "xml"}), "response_format"),
        (dict(tools=[{"type": "function", "function": {"name": "bad name"}}]), "tools"),
        (dict(tools=[WEATHER], tool_choice="always"), "tool_choice"),
        (dict(tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": 3}}}],
              tool_choice="required"), "tools"),
        (dict(tools=[WEATHER], tool_choice="required", response_format={"type": "json_object"}), "tool_choice"),
    ]
    for arguments, param in cases:
        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.create(model="qwen", messages=ASK, max_tokens=5, **arguments)
        error = refused.value.body
        assert error["param"] == param and "\n" not in error["message"], error


def test_a_named_tool_choice_returns_a_call_whose_arguments_validate(server):
    client = server.client()
    parameters = WEATHER["function"]["parameters"]
    named = {"type": "function", "function": {"name": "get_weather"}}
    for seed in range(3):
        answer = client.chat.completions.create(model="qwen", messages=ASK, tools=[WEATHER, CLOCK],
                                                tool_choice=named, max_tokens=160, temperature=1.0, seed=seed)
        choice = answer.choices[0]
        assert choice.finish_reason == "tool_calls", choice.message.content
        call, = choice.message.tool_calls
        assert call.type == "function" and call.id.startswith("call_") and call.function.name == "get_weather"
        jsonschema.validate(json.loads(call.function.arguments), parameters)
        chunks = list(client.chat.completions.create(model="qwen", messages=ASK, tools=[WEATHER, CLOCK],
                                                     tool_choice=named, max_tokens=160, temperature=1.0, seed=seed,
                                                     stream=True))
        deltas = [d for c in chunks for d in (c.choices[0].delta.tool_calls or [])]
        assert [d.function.name for d in deltas] == ["get_weather"]
        assert deltas[0].function.arguments == call.function.arguments  # the same seed, the same call
        assert chunks[-1].choices[0].finish_reason == "tool_calls"
        assert not "".join(c.choices[0].delta.content or "" for c in chunks).strip()
    with client.chat.completions.stream(model="qwen", messages=ASK, tools=[WEATHER, CLOCK], tool_choice=named,
                                        max_tokens=160, temperature=1.0, seed=0) as stream:
        final = stream.get_final_completion()  # the client's own accumulation of the deltas
    assert final.choices[0].finish_reason == "tool_calls"
    jsonschema.validate(json.loads(final.choices[0].message.tool_calls[0].function.arguments), parameters)


def test_a_required_call_is_one_of_the_tools_and_validates(server):
    client = server.client()
    tools = {t["function"]["name"]: t["function"]["parameters"] for t in (WEATHER, CLOCK)}
    for seed in range(4):
        call, = client.chat.completions.create(model="qwen", messages=ASK, tools=[WEATHER, CLOCK],
                                               tool_choice="required", max_tokens=160, temperature=1.0,
                                               seed=seed).choices[0].message.tool_calls
        jsonschema.validate(json.loads(call.function.arguments), tools[call.function.name])


def test_tool_messages_and_earlier_calls_are_rendered_through_the_template(server):
    client = server.client()
    messages = ASK + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Oslo", "unit": "celsius", "days": 2}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temperature": -3}'}]
    answer = client.chat.completions.create(model="qwen", messages=messages, tools=[WEATHER], max_tokens=3,
                                            temperature=0)
    tokenizer = server.service.tokenizer
    rendered = [dict(m) for m in messages]
    rendered[1] = {**rendered[1], "tool_calls": [{**rendered[1]["tool_calls"][0], "function": {
        "name": "get_weather", "arguments": {"city": "Oslo", "unit": "celsius", "days": 2}}}]}
    text = tokenizer.render_chat(rendered, tools=[WEATHER])
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"' in text
    assert "<tool_response>\n{\"temperature\": -3}\n</tool_response>" in text
    assert answer.usage.prompt_tokens == len(tokenizer.apply_chat_template(rendered, tools=[WEATHER]))


def test_auto_and_none_answer_text_streamed_as_whole(server):
    client = server.client()
    for choice in ("auto", "none"):
        settings = dict(model="qwen", messages=ASK, tools=[WEATHER, CLOCK], tool_choice=choice, max_tokens=12,
                        temperature=1.0, seed=5)
        answer = client.chat.completions.create(**settings).choices[0]
        assert answer.message.tool_calls is None and answer.finish_reason in ("stop", "length")
        chunks = list(client.chat.completions.create(**settings, stream=True))
        assert "".join(c.choices[0].delta.content or "" for c in chunks) == answer.message.content
        assert chunks[-1].choices[0].finish_reason == answer.finish_reason


def test_a_constrained_and_a_free_request_share_a_batch_and_the_free_one_is_unchanged(server):
    from concurrent.futures import ThreadPoolExecutor

    lm, client = server.service.model, server.client()
    server.service.scheduler.gather_seconds = 0.3  # both arrive before the batch starts
    try:
        with ThreadPoolExecutor(max_workers=2) as pool:
            free = pool.submit(client.completions.create, model="qwen", prompt="The cat", max_tokens=8, temperature=0)
            held = pool.submit(client.completions.create, model="qwen", prompt="The dog", max_tokens=8, temperature=0,
                               extra_body={"guided_choice": ["sat", "ran"]})
            free, held = free.result().choices[0].text, held.result().choices[0].text
    finally:
        server.service.scheduler.gather_seconds = 0.04
    assert server.service.scheduler.batch_sizes[-1] == 2
    assert free == zoo.generate(lm, "The cat", max_new_tokens=8)[len("The cat"):]
    assert held in ("sat", "ran")
