"""An Ollama `Modelfile` beside a GGUF file (`zoo export ... --format gguf --ollama`).

    ollama create my-model -f Modelfile
    ollama run my-model

The Modelfile says `FROM ./<file>.gguf`; a `TEMPLATE` in Ollama's Go
template language where the GGUF's chat template is a format known here
(ChatML: Qwen, SmolLM2; Llama 3's header tokens), else a comment saying that
Ollama will choose from the GGUF's own `tokenizer.chat_template`; a
`PARAMETER stop` for each end token; the context length (`num_ctx`) and
the checkpoint's sampling settings (its `generation_config.json`'s
temperature, top_p, top_k, repetition_penalty) where the tokenizer carries
them.
"""

from pathlib import Path

from zoo.models.tensor_names import write_text

CHATML = (
    "{{- if .System }}<|im_start|>system\n{{ .System }}<|im_end|>\n{{ end }}"
    "{{- range .Messages }}<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>\n{{ end }}"
    "<|im_start|>assistant\n"
)
LLAMA3 = (
    "{{- if .System }}<|start_header_id|>system<|end_header_id|>\n\n{{ .System }}<|eot_id|>{{ end }}"
    "{{- range .Messages }}<|start_header_id|>{{ .Role }}<|end_header_id|>\n\n{{ .Content }}<|eot_id|>{{ end }}"
    "<|start_header_id|>assistant<|end_header_id|>\n\n"
)
# A chat template's marker tokens -> (format, Ollama's template, the stop token it ends a turn with).
KNOWN_TEMPLATES = (("<|im_start|>", "ChatML", CHATML, "<|im_end|>"),
                   ("<|start_header_id|>", "Llama 3", LLAMA3, "<|eot_id|>"))
# generation_config.json's keys -> Ollama's PARAMETER names.
SAMPLING = {"temperature": "temperature", "top_p": "top_p", "top_k": "top_k", "repetition_penalty": "repeat_penalty"}


def go_template(chat_template):
    """(format name, Ollama's Go template, its stop token) of a Jinja chat template; None for another format."""
    for marker, name, template, stop in KNOWN_TEMPLATES:
        if chat_template and marker in chat_template:
            return name, template, stop
    return None


def modelfile(gguf_file, generation=None):
    """The Modelfile's text for `gguf_file`, read from its metadata."""
    from zoo.checkpoints.gguf import open_reader, read_fields

    fields = read_fields(open_reader(gguf_file))
    tokens = fields.get("tokenizer.ggml.tokens", [])
    arch = fields.get("general.architecture")
    lines = [f"FROM ./{Path(gguf_file).name}", ""]
    chat_template = fields.get("tokenizer.chat_template")
    known = go_template(chat_template)
    stops = [tokens[fields[key]] for key in ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id")
             if key in fields and fields[key] < len(tokens)]
    if known:
        name, template, stop = known
        lines += [f"# The chat template is {name}'s, in Ollama's template language.", f'TEMPLATE """{template}"""', ""]
        stops.append(stop)
    elif chat_template:
        lines += ["# The chat template is not a format known here: Ollama reads the GGUF's tokenizer.chat_template",
                  "# and uses its own template when it recognises it; write a TEMPLATE here otherwise.", ""]
    else:
        lines += ["# No chat template: the model completes text (Ollama's default template passes the prompt).", ""]
    for stop in dict.fromkeys(stops):
        lines.append(f'PARAMETER stop "{stop}"')
    if f"{arch}.context_length" in fields:
        lines.append(f"PARAMETER num_ctx {fields[f'{arch}.context_length']}")
    for key, parameter in SAMPLING.items():
        if generation and generation.get(key) is not None:
            lines.append(f"PARAMETER {parameter} {generation[key]}")
    return "\n".join(lines) + "\n"


def write_modelfile(gguf_file, tokenizer=None):
    """Writes `Modelfile` beside `gguf_file`; returns its path."""
    generation = getattr(tokenizer, "generation", None)
    path = Path(gguf_file).parent / "Modelfile"
    write_text(path, modelfile(gguf_file, generation))
    return path
