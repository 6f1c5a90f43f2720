"""`zoo serve TARGET`: an OpenAI-compatible HTTP server over one language model
(completions, chat) or one BERT sentence encoder (embeddings).

    zoo serve runs/gpt_char                      # a run folder holding model.keras
    zoo serve checkpoints/SmolLM2-135M-Instruct  # a Hugging Face checkpoint folder (chat through its template)
    zoo serve hf://HuggingFaceTB/SmolLM2-135M-Instruct --api-key KEY --port 8000

The official `openai` client, curl, or any OpenAI client then talks to
http://127.0.0.1:8000/v1 (`zoo.serve.app` lists the endpoints,
`zoo.serve.protocol` declares their fields, and the server's own
http://127.0.0.1:8000/docs shows them). Tokens are chosen as
`zoo.generate` chooses them (the same seed, the same text) and streamed
as they come. Concurrent requests are decoded
together where their settings allow (`zoo.serve.scheduler`).
Needs the `serve` extra (`pip install -e .[serve]`: FastAPI, pydantic,
uvicorn, Jinja2 for chat templates, llguidance for `response_format` and
forced tool calls, prometheus_client for `GET /metrics`).
"""

import os
import sys

from zoo.serve import web


def serve(target, host="127.0.0.1", port=8000, api_key=None, name=None, max_batch=8, quantize=None,
          max_request_bytes=web.MIB, read_timeout=30.0, max_queue=64, prefill_chunk=None, prefix_cache_tokens=0,
          draft=None, draft_tokens=None, prompt_lookup=None):
    """Loads `target`, serves it until Ctrl-C; returns 0.

    Args:
        target: a run folder, a `.keras` file, or a checkpoint folder or
            handle (`hf://ORG/NAME[@REVISION]`) of a decoder-only language
            model, an encoder-decoder or a BERT sentence encoder, that
            carries its tokenizer.
        host: the address to listen on (127.0.0.1: this machine only).
        port: the port; 0 picks a free one (the printed URL names it).
        api_key: the key every request must carry (`Authorization: Bearer
            KEY`); None reads `ZOO_API_KEY`, and without either the server is
            open to whoever can reach the address.
        name: the model's id in the API; by default the target as given.
        max_batch: the most requests decoded together (the slots:
            requests join and leave them at any step).
        quantize: "int8", "int4" or "float8" applied in memory after loading.
        max_request_bytes: the largest request body read (413 past it).
        read_timeout: seconds a request body may take to arrive (408 past it).
        max_queue: the most requests waiting for the model (429 past it).
        prefill_chunk: None prefills a prompt whole; N, in chunks of N
            tokens between decoding steps, so that running streams keep
            flowing while a long prompt is read.
        prefix_cache_tokens: the most prompt tokens whose keys and values
            are kept for later prompts that begin the same way (0: none;
            a decoder-only model's).
        draft: a draft model of the same tokenizer (a target as `target`):
            speculative decoding (`zoo.generation.speculative`), each
            request decoded alone, its tokens proposed by the draft and
            checked several at a time by the model, the distribution kept.
        draft_tokens: the tokens the draft proposes a round, fixed; None
            adapts them as transformers does (+2 when all are accepted, -1
            otherwise).
        prompt_lookup: speculative decoding by prompt lookup instead: the
            tokens proposed a round, taken from the request's own context.
    """
    from zoo.serve.app import create_app
    from zoo.serve.scheduler import Scheduler
    from zoo.serve.service import Service
    from zoo.targets import open_target

    limits = web.Limits(max_request_bytes, read_timeout)  # a bad limit is refused before the model loads
    if not web.is_int(max_queue) or max_queue < 1:
        raise ValueError(f"--max-queue {max_queue}: expected an integer >= 1")
    api_key = api_key or os.environ.get("ZOO_API_KEY") or None
    model = open_target(target)
    check_language_model(model, target)
    speculation = _speculation(model, draft, draft_tokens, prompt_lookup)
    if quantize is not None:
        model.quantize(quantize)
    listener = web.listen(host, port)
    scheduler = Scheduler(model, max_batch=max_batch, max_queue=max_queue, prefill_chunk=prefill_chunk,
                          prefix_cache_tokens=prefix_cache_tokens, speculation=speculation)
    service = Service(model, name or str(target), scheduler, limits)
    if not web.is_loopback(host) and api_key is None:
        print(f"zoo serve: warning: listening on {host} without an API key: anyone who can reach it may use the "
              "model (set --api-key or ZOO_API_KEY)", file=sys.stderr, flush=True)
    print(f"zoo serve: a {type(model).__name__} from {target}, as {service.name!r}")
    print(f"zoo serve: limits: bodies of at most {limits.max_request_bytes} bytes arriving within "
          f"{limits.read_timeout:g} s, prompts of at most {service.context - 1} tokens, {max_queue} requests "
          f"waiting (GET /health)")
    if scheduler.slots is not None:
        print(f"zoo serve: {max_batch} slots (continuous batching), prompts prefilled "
              f"{'whole' if prefill_chunk is None else f'in chunks of {prefill_chunk} tokens'}, a prefix cache of "
              f"{prefix_cache_tokens} tokens")
    print(f"zoo serve: {web.url(host, listener)}/v1 (Ctrl-C stops)", flush=True)
    web.run(create_app(service, api_key), listener)
    print("zoo serve: stopped", flush=True)
    return 0


def _speculation(model, draft, draft_tokens, prompt_lookup):
    """The scheduler's speculative decoding settings (None without), the
    draft loaded and checked before the server starts."""
    from zoo.generation import speculative
    from zoo.models import CausalLM
    from zoo.targets import open_target

    if draft is None and prompt_lookup is None:
        if draft_tokens is not None:
            raise ValueError("--draft-tokens: takes a --draft model")
        return None
    if draft is not None and prompt_lookup is not None:
        raise ValueError("--draft and --prompt-lookup: expected one proposer")
    if not isinstance(model, CausalLM):
        raise ValueError(f"--draft / --prompt-lookup: speculative decoding runs a decoder-only language model; "
                         f"this is a {type(model).__name__}")
    if prompt_lookup is not None:
        settings = dict(prompt_lookup_num_tokens=prompt_lookup)
    else:
        assistant = open_target(draft)
        if not isinstance(assistant, CausalLM):
            raise ValueError(f"--draft {draft}: a {type(assistant).__name__}; expected a decoder-only language model")
        speculative.check_draft(model, assistant)
        settings = dict(assistant_model=assistant)
        if draft_tokens is not None:
            settings.update(num_assistant_tokens=draft_tokens, num_assistant_tokens_schedule="constant")
    speculative.Speculation(model, 1, **settings)  # the settings checked now, not at the first request
    return settings


def check_language_model(model, target):
    """One clear line for a model `zoo serve` cannot serve."""
    from zoo.models import BertSentenceEncoder, CausalLM, EncoderDecoder

    if not isinstance(model, (CausalLM, EncoderDecoder, BertSentenceEncoder)):
        raise ValueError(
            f"{target}: a {type(model).__name__}; zoo serve serves a decoder-only language model (GPT, Llama "
            "family), an encoder-decoder (/v1/completions translates its prompt) or a BERT sentence encoder "
            "(/v1/embeddings); `zoo classify` uses the others"
        )
    if getattr(model, "tokenizer", None) is None and getattr(getattr(model, "backbone", None), "tokenizer", None) is None:
        raise ValueError(f"{target}: the model carries no tokenizer; zoo serve works on text")
