"""Chat templates: a conversation's text, rendered as transformers renders
it, and ChatML, the template of a model trained from scratch.

A chat template is a Jinja template a tokenizer carries (Hugging Face
checkpoints ship theirs in `tokenizer_config.json`); `render_template`
runs it in transformers' sandbox. `CHATML` is the template to give a
tokenizer without one, and `CHATML_TOKENS` its markers, which such a
tokenizer holds as special tokens.

Example:
```python
render_template(CHATML, [{"role": "user", "content": "Hi"}], add_generation_prompt=True)
# "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
```
"""

import json

# ChatML (OpenAI; Qwen's and SmolLM2-Instruct's template): the template of
# choice for a model trained from scratch, whose tokenizer has none.
CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + "
    "'\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
# ChatML's markers: a tokenizer trained from scratch (`CharTokenizer.with_special_tokens`) holds each as
# one token of its own; the second ends an assistant turn, and so a served answer.
CHATML_TOKENS = ("<|im_start|>", "<|im_end|>")


def render_template(template, messages, add_generation_prompt, tools=None, **special_tokens):
    """A conversation rendered by a Jinja chat template as transformers'
    `render_jinja_template` renders it: an immutable sandbox, Jinja's loop
    controls, `raise_exception`, `strftime_now` and its `tojson`; `tools`
    (a list of OpenAI function tools, `{"type": "function", "function":
    {...}}`, or None) is the template's `tools` variable; `special_tokens`
    are the template's variables `bos_token` and `eos_token`."""
    try:
        import jinja2
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError:
        raise ValueError("a chat template needs jinja2; expected the serve extra: pip install -e .[serve]") from None
    import datetime

    if not isinstance(messages, list) or not all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), (str, type(None)))
        for m in messages
    ):
        raise ValueError('messages: expected a list of {"role": str, "content": str} objects')
    if tools is not None and not (isinstance(tools, list) and all(isinstance(t, dict) for t in tools)):
        raise ValueError('tools: expected a list of {"type": "function", "function": {...}} objects')

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                extensions=["jinja2.ext.loopcontrols"])
    environment.filters["tojson"] = tojson
    environment.globals["raise_exception"] = raise_exception
    environment.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
    try:
        return environment.from_string(template).render(
            messages=messages, tools=tools, add_generation_prompt=add_generation_prompt, **special_tokens
        )
    except jinja2.exceptions.TemplateError as error:
        raise ValueError(f"the chat template refused the messages: {error}") from None
