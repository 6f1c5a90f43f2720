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
Needs the `explore` extra (`pip install -e .[explore]`: Starlette and
uvicorn); the page is static HTML, CSS and JavaScript, with no network.
"""


def serve(target, host="127.0.0.1", port=8000, labels=None, quantize=None):
    """Loads `target`, serves its page until Ctrl-C; returns 0.

    Args:
        target: a run folder, a `.keras` file, or a checkpoint folder or
            handle (`hf://ORG/NAME[@REVISION]`).
        host: the address to listen on (127.0.0.1: this machine only).
        port: the port; 0 picks a free one (the printed URL names it).
        labels: a classifier's class names, in class order.
        quantize: a quantization mode ("int8", "int4", "float8") applied
            to the model in memory after it loads; None keeps it as saved.
    """
    import socket

    import uvicorn

    from recipes.explore.app import create_app
    from recipes.explore.engine import Explorer, open_target, run_record

    model = open_target(target)
    if quantize is not None:
        model.quantize(quantize)
    explorer = Explorer(model, name=target, labels=labels, run=run_record(target))
    listener = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((host, port))
    except OSError as error:
        listener.close()
        raise ValueError(f"--host {host} --port {port}: cannot listen there ({error.strerror}); "
                         "expected a free port (--port 0 picks one)") from None
    listener.listen()  # from here a browser's connection waits in the backlog until the server starts
    port = listener.getsockname()[1]
    config = uvicorn.Config(create_app(explorer), log_level="warning", timeout_graceful_shutdown=2)
    print(f"zoo explore: a {type(explorer.model).__name__} ({explorer.kind.replace('_', ' ')}) from {target}")
    print(f"zoo explore: http://{host}:{port}/ (Ctrl-C stops)", flush=True)
    try:
        uvicorn.Server(config).run(sockets=[listener])
    except KeyboardInterrupt:  # uvicorn shuts down, then raises the Ctrl-C it caught again
        pass
    print("zoo explore: stopped", flush=True)
    return 0
