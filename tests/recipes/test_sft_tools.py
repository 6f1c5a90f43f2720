"""`zoo train sft` on conversations that call tools: the calls are
rendered by the template the run carries and counted by the loss, and the
run, served, calls a named tool with arguments that validate."""

import contextlib
import io
import json

import numpy as np
import pytest

import zoo
from recipes import sft
from tests.checkpoints.llama_checkpoints import hf_folder
from tests.serve.tool_templates import HERMES_SHORT
from zoo.data import chat_examples, read_chat

CITIES = ["Paris", "Oslo", "Lima", "Rome"]
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"enum": CITIES}},
                                          "required": ["city"], "additionalProperties": False}}}


def conversations(n, seed):
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        city = str(rng.choice(CITIES))
        arguments = json.dumps({"city": city})
        rows.append({"tools": [WEATHER], "messages": [
            {"role": "user", "content": f"weather in {city}?"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": arguments}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
            {"role": "assistant", "content": f"sunny in {city}"}]})
    return rows


@pytest.mark.integration  # trains, then serves the run
def test_a_tool_use_fine_tune_counts_the_calls_and_its_run_calls_through_zoo_serve(tmp_path):
    from tests.serve.conftest import Server

    folder = hf_folder(tmp_path / "qwen2", "qwen2", max_position_embeddings=512)  # no template: --chat-template
    data = tmp_path / "tools.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in conversations(16, 0)), encoding="utf-8")
    (tmp_path / "hermes.jinja").write_text(HERMES_SHORT, encoding="utf-8")
    with contextlib.redirect_stdout(io.StringIO()):
        sft.main(["--pretrained", str(folder), "--data", str(data), "--chat-template", str(tmp_path / "hermes.jinja"),
                  "--output", str(tmp_path / "run"), "--steps", "4", "--batch-size", "4", "--sequence-length", "384",
                  "--steps-per-epoch", "2", "--warmup-steps", "0", "--eval-batches", "1", "--sample-length", "4",
                  "--jit-compile", "false"])
    lm = zoo.load(tmp_path / "run" / "model.keras")
    assert lm.tokenizer.chat_template == HERMES_SHORT
    conversation = read_chat(data)[0]
    examples = chat_examples(lm, [conversation], 384)
    counted = lm.tokenizer.detokenize(examples.token_ids[0][examples.loss_mask[0] == 1])
    city = conversation[1]["tool_calls"][0]["function"]["arguments"]["city"]
    # The call and the answer, each with its <|im_end|> (left out of the text); not the tool's result.
    assert counted == f'<tool_call>\n{{"name": "get_weather", "arguments": {{"city": "{city}"}}}}\n</tool_call>' \
        f"sunny in {city}"
    server = Server(lm, name="run")
    try:
        answer = server.client().chat.completions.create(
            model="run", messages=[{"role": "user", "content": "weather in Oslo?"}], tools=[WEATHER], max_tokens=120,
            tool_choice={"type": "function", "function": {"name": "get_weather"}}, temperature=1.0, seed=0)
        call, = answer.choices[0].message.tool_calls
        assert json.loads(call.function.arguments)["city"] in CITIES
    finally:
        server.stop()
