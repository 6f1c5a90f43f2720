"""`zoo explore TARGET`: a local web page over one model, for learning and
teaching attention.

    zoo explore runs/gpt_char              # a run folder holding model.keras
    zoo explore model.keras --port 8000    # a .keras file
    zoo explore checkpoints/gpt2           # a checkpoint zoo.from_pretrained reads
    zoo explore hf://openai-community/gpt2 # the same by handle, downloaded and cached

It loads the model once, serves the page on http://HOST:PORT/ until
Ctrl-C, and shows by the model's kind: a language model's tokens as they
are generated, each token's attention over its context for every block
and head and the next-token probabilities there; a translator's
cross-attention; a classifier's label probabilities and [CLS] attention.
Needs the `explore` extra (`pip install -e .[explore]`: FastAPI and
uvicorn; its requests are pydantic models on `zoo serve`'s, validated and
refused as `zoo serve` refuses them: `zoo.serve.protocol`,
`zoo.serve.validation` and `zoo.serve.web` are the parts it shares); the
page is static HTML, CSS and JavaScript, with no network.
"""


def serve(target, host="127.0.0.1", port=8000, labels=None, quantize=None, max_request_bytes=None,
          read_timeout=30.0):
    """Loads `target`, serves its page until Ctrl-C; returns 0.

    Args:
        target: a run folder, a `.keras` file, or a checkpoint folder or
            handle (`hf://ORG/NAME[@REVISION]`).
        host: the address to listen on (127.0.0.1: this machine only).
        port: the port; 0 picks a free one (the printed URL names it).
        labels: a classifier's class names, in class order.
        quantize: a quantization mode ("int8", "int4", "float8") applied
            to the model in memory after it loads; None keeps it as saved.
        max_request_bytes: the largest request body read (413 past it);
            None: 1 MiB.
        read_timeout: seconds a request body may take to arrive (408 past it).
    """
    from zoo.explore.app import create_app
    from zoo.explore.explorer import Explorer, open_target, run_record
    from zoo.serve import web

    limits = web.Limits(max_request_bytes or web.MIB, read_timeout)  # refused before the model loads
    model = open_target(target)
    if quantize is not None:
        model.quantize(quantize)
    explorer = Explorer(model, name=target, labels=labels, run=run_record(target))
    listener = web.listen(host, port)
    print(f"zoo explore: a {type(explorer.model).__name__} ({explorer.kind.replace('_', ' ')}) from {target}")
    print(f"zoo explore: limits: bodies of at most {limits.max_request_bytes} bytes arriving within "
          f"{limits.read_timeout:g} s")
    print(f"zoo explore: {web.url(host, listener)}/ (Ctrl-C stops)", flush=True)
    web.run(create_app(explorer, limits), listener)
    print("zoo explore: stopped", flush=True)
    return 0
