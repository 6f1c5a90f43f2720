"""The `zoo` console command: train a recipe, then use its run folder.

    zoo train NAME [recipe flags]          run a recipe (`zoo train -h` lists them)
    zoo sample RUN "prompt" [--max-length N --temperature T --top-p P --top-k K --seed S]
                                           (sample, classify: RUN or a checkpoint folder or hf://ORG/NAME)
    zoo translate RUN "sentence" ...       beam search, one translation a line
    zoo classify RUN "sentence" ...        label and probability per sentence
    zoo eval RUN [--data DIR_OR_TFDS] [--split SPLIT]
    zoo evaluate TARGET --tasks NAMES [--include-path DIR --num-fewshot N --limit N --output FILE]
                                           the lm-evaluation-harness's tasks (hellaswag, your own YAML)
                                           (sample, translate, classify, eval, explore: --quantize int8|int4|float8)
    zoo presets [--family F]               list the presets
    zoo data list                          the data sets by name: files, sizes, sources, cached or not
    zoo data download NAME ...             fetch data sets ahead of time (checked by sha256, cached)
    zoo describe NAME                      sizes, parameters and FLOPs of a preset
    zoo explore TARGET [--port N]          a local web page: generation, attention maps, probabilities
    zoo serve TARGET [--port N --api-key K] an OpenAI-compatible server (completions, chat, streaming)
    zoo export TARGET PATH --format F      write a model for a runtime (tf_saved_model, onnx, litert) or as
                                           a checkpoint (huggingface, keras-hub); TARGET: a run folder, a
                                           .keras file, a checkpoint folder or hf://ORG/NAME

`zoo train translate --epochs 2` is `python -m recipes.translate --epochs 2`:
the same `main(argv)`, the same flags (`zoo train NAME -h` lists them).
RUN is a recipe's run folder (its --output): `RUN/model.keras` carries its
tokenizer, `RUN/run.json` names the recipe. `zoo eval` calls the recipe's own
`evaluate`, the function that computed the figure the recipe printed last.
`zoo sample` and `zoo classify` also take a causal LM or BERT classifier
checkpoint, as a folder or a handle (`hf://ORG/NAME[@REVISION]`), through
`zoo.from_pretrained`; `zoo sample` of an encoder-decoder (a checkpoint or
a translate run) samples its answer to the prompt (Flan-T5:
`zoo sample hf://google/flan-t5-small "summarize: ..."`).
"""

import argparse
import json
import sys
from pathlib import Path

from recipes.errors import REFUSED, error_line
from recipes.flags import COUNT, PORT, POSITIVE, POSITIVE_INT, Number
from recipes.startup import load_keras

# name -> one line
RECIPES = {
    "gpt_char": "character-level GPT on Tiny Shakespeare (nanoGPT's baby GPT)",
    "gpt_finetune": "fine-tune a pretrained GPT-2 (keras-hub or Hugging Face folder) on a text",
    "sft": "chat / instruction fine-tuning of a causal LM on conversations (JSONL), its template kept",
    "translate": "encoder-decoder Transformer on Multi30k, German -> English (BLEU)",
    "bert_pretrain": "pretrain a small BERT with the masked language model",
    "bert_classify": "fine-tune BERT on SST-2 sentiment (from a pretrained run or scratch)",
    "demo": "a tiny encoder-decoder learns a toy English -> German grammar (a minute)",
}
# zoo.export's formats: for runtimes (exported on TensorFlow), then checkpoints.
EXPORT_FORMATS = ("tf_saved_model", "onnx", "litert", "huggingface", "keras-hub", "gguf")
# What each recipe's model does with text, for `zoo sample/translate/classify`.
# An encoder-decoder samples an answer to its prompt too (`zoo sample`).
USES = {"gpt_char": ("sample",), "gpt_finetune": ("sample",), "sft": ("sample",), "translate": ("translate", "sample"),
        "demo": ("translate", "sample"), "bert_classify": ("classify",)}


def recipe_name(name):
    """'gpt-char' or 'gpt_char' -> 'gpt_char'; None for an unknown name."""
    name = name.replace("-", "_")
    return name if name in RECIPES else None


def _recipe_list():
    return "recipes:\n" + "\n".join(f"  {name:15s}{line}" for name, line in RECIPES.items())


def parser():
    """The `zoo` argument parser (every flag with its help)."""
    formatter = argparse.RawDescriptionHelpFormatter
    top = argparse.ArgumentParser(prog="zoo", description=__doc__.split("\n\n")[0], formatter_class=formatter)
    commands = top.add_subparsers(dest="command", required=True, metavar="COMMAND")

    train = commands.add_parser(
        "train", help="run a training recipe", formatter_class=formatter,
        description="Run a recipe: `zoo train NAME [flags]` is `python -m recipes.NAME [flags]`.",
        epilog=_recipe_list() + "\n\n`zoo train NAME -h` lists a recipe's own flags.",
    )
    train.add_argument("recipe", metavar="NAME", help="the recipe (hyphens or underscores): " + ", ".join(RECIPES))

    sample = commands.add_parser("sample",
                                 help="continue a prompt with a trained language model or a causal-LM checkpoint; "
                                      "sample an encoder-decoder's answer to it")
    sample.add_argument("run", metavar="RUN", help="a run folder of gpt_char, gpt_finetune, sft or translate, or a "
                        "causal-LM or encoder-decoder checkpoint: a folder or a handle (hf://ORG/NAME[@REVISION])")
    sample.add_argument("prompt", nargs="?", default="\n", help="the text to continue (default: a newline)")
    sample.add_argument("--max-length", type=POSITIVE_INT, default=500,
                        help="tokens (gpt_char: characters) of prompt plus continuation; past the context a sliding "
                             "window (an encoder-decoder: of its answer, within its context)")
    sample.add_argument("--temperature", type=POSITIVE, default=0.8, help="divides the logits (> 0)")
    sample.add_argument("--top-p", type=Number(float, above=0, maximum=1), default=None,
                        help="nucleus sampling: the smallest set of mass P")
    sample.add_argument("--top-k", type=POSITIVE_INT, default=None, help="sample from the K most likely tokens")
    sample.add_argument("--seed", type=int, default=None, help="random seed, for a reproducible sample")
    _add_quantize(sample)

    translate = commands.add_parser(
        "translate",
        help="translate sentences with a trained run (translate, demo) or a Marian checkpoint; summarize with BART's",
    )
    translate.add_argument("run", metavar="RUN", help="the run folder of translate or demo, or a Marian or BART "
                           "checkpoint folder or handle (hf://Helsinki-NLP/opus-mt-de-en, hf://facebook/bart-large-cnn)")
    translate.add_argument("sentences", nargs="+", metavar="SENTENCE", help="sentences to translate")
    translate.add_argument("--beam-size", type=POSITIVE_INT, default=None,
                           help="beams (1: greedy); default: the run's own --beam-size (6; demo: 1)")
    translate.add_argument("--length-penalty", type=Number(float), default=None,
                           help="beam score log_prob / length ** L; default: the run's own")
    _add_quantize(translate)

    classify = commands.add_parser("classify", help="label sentences with a trained classifier or a BERT classifier checkpoint")
    classify.add_argument("run", metavar="RUN", help="a run folder of bert_classify, or a BERT classifier "
                          "checkpoint: a folder or a handle (hf://ORG/NAME[@REVISION])")
    classify.add_argument("sentences", nargs="+", metavar="SENTENCE", help="sentences to classify")
    classify.add_argument("--labels", default=None,
                          help="comma-separated class names in class order, e.g. negative,positive (default: the "
                          "names saved with the model)")
    classify.add_argument("--pair", action="append", default=None, metavar="SENTENCE",
                          help="the second sentence of a pair, once for each SENTENCE (a sentence-pair classifier)")
    classify.add_argument("--all", action="store_true", help="print every class's probability, not only the best")
    _add_quantize(classify)

    evaluate = commands.add_parser(
        "eval", help="the run's own metric on any split",
        description="The run's own metric: val loss (gpt_char, bert_pretrain), BLEU (translate), "
        "accuracy (bert_classify: after each class's precision, recall and F1; demo). On the run's own data and validation split it is the figure "
        "the recipe printed last. The field's benchmarks (EleutherAI's lm-evaluation-harness: hellaswag, arc_easy, "
        "wikitext, your own task files) run with `zoo evaluate`.",
    )
    evaluate.add_argument("run", metavar="RUN", help="a run folder")
    evaluate.add_argument("--data", default=None, help="a local path (a CSV, TSV or JSONL file with the run's "
                          "columns for bert_classify) or tfds:NAME; default: the run's own --data")
    evaluate.add_argument("--split", default=None,
                          help="default: the run's validation split (val; dev for bert_classify)")
    _add_quantize(evaluate)

    harness = commands.add_parser(
        "evaluate", help="a language model on the lm-evaluation-harness's tasks (hellaswag, your own YAML files)",
        description="Run EleutherAI's lm-evaluation-harness (needs the eval extra: pip install -e .[eval]) on a "
        "causal LM or an encoder-decoder and print its table; docs/evaluating.md shows tasks of your own.",
    )
    harness.add_argument("target", metavar="TARGET",
                         help="a run folder (holding model.keras), a .keras file, or a checkpoint: a folder "
                         "or a handle (hf://ORG/NAME[@REVISION])")
    harness.add_argument("--tasks", required=True,
                         help="comma-separated task or group names, e.g. hellaswag,arc_easy (built-in tasks "
                         "download their data sets)")
    harness.add_argument("--include-path", default=None, metavar="DIR",
                         help="a folder of your own task YAML files (the harness's format)")
    harness.add_argument("--num-fewshot", type=COUNT, default=None, help="examples in each prompt (default: the task's)")
    harness.add_argument("--limit", type=POSITIVE, default=None,
                         help="the most documents per task (an integer), or a fraction of them (below 1)")
    harness.add_argument("--batch-size", type=POSITIVE_INT, default=8, help="rows per forward pass")
    harness.add_argument("--output", default=None, metavar="FILE", help="write the harness's results JSON here")

    data = commands.add_parser(
        "data", help="the data sets the recipes read by name: list them, download them ahead of time",
        description="Data sets by name: fetched from their public homes (or $ZOO_DATA_MIRROR), checked by "
        "sha256, cached in ~/.cache/zoo/datasets ($ZOO_HOME); $ZOO_DATA=DIR is a local copy laid out as DIR/NAME/FILE.",
    )
    data_commands = data.add_subparsers(dest="data_command", required=True, metavar="ACTION")
    data_commands.add_parser("list", help="names, files, sizes, sources, and whether each is cached")
    download = data_commands.add_parser("download", help="fetch data sets now (checked by sha256, cached)")
    download.add_argument("names", nargs="+", metavar="NAME", help="data set names (`zoo data list`)")

    export = commands.add_parser(
        "export", help="write a model for TF Serving, onnxruntime or LiteRT, or as a checkpoint folder",
        description="Writes TARGET's model to the folder PATH: a SavedModel, model.onnx or model.tflite "
        "(exported on the TensorFlow backend, which this command uses), with the tokenizer's files beside "
        "it; or a Hugging Face or keras-hub checkpoint; or a GGUF file for llama.cpp, Ollama and LM Studio "
        "(PATH.gguf, or PATH/model.gguf). See docs/deploying.md.",
    )
    export.add_argument("target", metavar="TARGET",
                        help="a run folder, a .keras file, or a checkpoint folder or handle (hf://ORG/NAME[@REVISION])")
    export.add_argument("path", metavar="PATH", help="the folder to write (for gguf: a .gguf file or a folder)")
    export.add_argument("--format", required=True, choices=EXPORT_FORMATS, help="what to write")
    export.add_argument("--overwrite", action="store_true", help="replace the files of an existing folder")
    export.add_argument("--outtype", default=None, choices=("f32", "f16", "bf16", "q8_0", "q4_0"),
                        help="gguf: the weight matrices' type (default q8_0 for an int8 model, q4_0 for int4, "
                             "f16 otherwise)")
    export.add_argument("--ollama", action="store_true", help="gguf: also write an Ollama Modelfile beside the file")
    _add_quantize(export)

    presets = commands.add_parser("presets", help="list the presets")
    presets.add_argument("--family", default=None, help="only this family (gpt, llama, gemma, bert, transformer)")
    describe = commands.add_parser("describe", help="sizes, parameters and FLOPs of a preset")
    describe.add_argument("name", help="a preset name (`zoo presets`)")

    explore = commands.add_parser(
        "explore", help="a local web page over a model: generation, attention maps, probabilities",
        description="Serve a page over one model (needs the explore extra: pip install -e .[explore]); "
        "docs/explore.md shows what it does.",
    )
    explore.add_argument("target", metavar="TARGET",
                         help="a run folder (holding model.keras), a .keras file, or a checkpoint: a folder "
                         "or a handle (hf://ORG/NAME[@REVISION])")
    explore.add_argument("--port", type=PORT, default=8000, help="the port (0: a free one)")
    explore.add_argument("--host", default="127.0.0.1", help="the address to listen on (127.0.0.1: this machine)")
    explore.add_argument("--labels", default=None,
                         help="a classifier's class names in class order, e.g. negative,positive")
    _add_quantize(explore)
    _add_limits(explore)

    serve = commands.add_parser(
        "serve", help="an OpenAI-compatible HTTP server over a language model (completions, chat, streaming)",
        description="Serve /v1/models, /v1/completions and /v1/chat/completions over one language model "
        "(needs the serve extra: pip install -e .[serve]); docs/serving.md shows clients.",
    )
    serve.add_argument("target", metavar="TARGET",
                       help="a run folder (holding model.keras), a .keras file, or a checkpoint: a folder "
                       "or a handle (hf://ORG/NAME[@REVISION])")
    serve.add_argument("--port", type=PORT, default=8000, help="the port (0: a free one)")
    serve.add_argument("--host", default="127.0.0.1", help="the address to listen on (127.0.0.1: this machine)")
    serve.add_argument("--api-key", default=None,
                       help="the key clients must send (Authorization: Bearer KEY); default: $ZOO_API_KEY")
    serve.add_argument("--name", default=None, help="the model's id in the API (default: TARGET)")
    serve.add_argument("--max-batch", type=POSITIVE_INT, default=8, help="the most requests decoded together")
    serve.add_argument("--max-queue", type=POSITIVE_INT, default=64,
                       help="the most requests waiting for the model; one more gets 429 with Retry-After")
    serve.add_argument("--prefill-chunk", type=POSITIVE_INT, default=None,
                       help="prefill long prompts in chunks of this many tokens between decoding steps "
                       "(default: a prompt whole)")
    serve.add_argument("--prefix-cache-tokens", type=Number(int, minimum=0), default=0,
                       help="the most prompt tokens whose keys and values are kept for prompts that begin "
                       "the same way (default 0: none)")
    serve.add_argument("--draft", metavar="MODEL", default=None,
                       help="speculative decoding: a draft model of the same tokenizer proposes tokens that the "
                            "model checks several at a time (the same distribution; each request decoded alone)")
    serve.add_argument("--draft-tokens", type=POSITIVE_INT, default=None,
                       help="the tokens the draft proposes a round (default: adapted, +2 when all are accepted, -1 "
                            "otherwise)")
    serve.add_argument("--prompt-lookup", type=POSITIVE_INT, default=None, metavar="N",
                       help="speculative decoding by prompt lookup: N tokens a round, copied from where the "
                            "context's last tokens appeared before")
    _add_quantize(serve)
    _add_limits(serve)
    return top


def _add_limits(command):
    command.add_argument("--max-request-bytes", type=Number(int, minimum=1024), default=2**20,
                         help="the largest request body read; a larger one gets 413 (default: 1 MiB)")
    command.add_argument("--read-timeout", type=POSITIVE, default=30.0,
                         help="seconds a request body may take to arrive; a slower one gets 408")


def _add_quantize(command):
    command.add_argument(
        "--quantize", metavar="MODE", type=_quantization_mode, default=None,
        help="quantize the run's model in memory first: int8, int4 or float8 (docs/quantization.md); "
        "the run's files are not changed",
    )


def _quantization_mode(mode):
    """argparse type of --quantize: the mode, checked before the model loads."""
    load_keras()
    from zoo.models import check_quantization_mode

    try:
        check_quantization_mode(mode)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error).removeprefix("quantize: ")) from None
    return mode


def main(argv=None):
    """Runs `zoo ...`; returns the exit status (0 ok, `REFUSED` (2) a refused input)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["train"] and len(argv) > 1 and recipe_name(argv[1]):
        # Everything after the recipe's name belongs to the recipe's own parser.
        return _train(recipe_name(argv[1]), argv[2:])
    top = parser()
    args = top.parse_args(argv)
    if args.command == "train":
        names = ", ".join(RECIPES)
        top.error(f"zoo train {args.recipe}: unknown recipe; expected one of {names}")
    if args.command == "export" and args.format in EXPORT_FORMATS[:3]:
        import os

        os.environ["KERAS_BACKEND"] = "tensorflow"  # Keras' exports for runtimes convert TensorFlow graphs
    load_keras()
    try:
        return COMMANDS[args.command](args)
    except Exception as error:
        line = str(error) if isinstance(error, ValueError) else error_line(error)
        if line is None:
            raise
        print(f"zoo {args.command}: error: {line}", file=sys.stderr)
        return REFUSED


def recipe_module(name):
    """The module of recipe `name` (a key of `RECIPES`), imported on first use:
    each recipe imports what its training needs."""
    if name == "gpt_char":
        from recipes import gpt_char as recipe
    elif name == "gpt_finetune":
        from recipes import gpt_finetune as recipe
    elif name == "sft":
        from recipes import sft as recipe
    elif name == "translate":
        from recipes import translate as recipe
    elif name == "bert_pretrain":
        from recipes import bert_pretrain as recipe
    elif name == "bert_classify":
        from recipes import bert_classify as recipe
    elif name == "demo":
        from recipes import demo as recipe
    else:
        raise KeyError(f"{name}: unknown recipe; expected one of {', '.join(RECIPES)}")
    return recipe


def _train(name, recipe_argv):
    recipe = recipe_module(name)
    try:
        recipe.main(recipe_argv)
    except Exception as error:
        line = error_line(error)
        if line is None:
            raise
        print(f"zoo train {name}: error: {line}", file=sys.stderr)
        return REFUSED
    return 0


def open_run(folder, use=None, quantize=None):
    """(recipe name, recipe module, model) of a run folder; `use` ("sample",
    "translate", "classify") refuses a run whose model does something else;
    `quantize` (a mode) quantizes the model after loading."""
    from zoo.data import DataError

    from recipes.run_folder import load_model, read_run

    record = read_run(folder)
    name = record.get("recipe")
    if name not in RECIPES:
        raise DataError(f"{folder}/run.json: unknown recipe {name!r}; expected one of {', '.join(RECIPES)}")
    if use is not None and use not in USES.get(name, ()):
        fits = [n for n, uses in USES.items() if use in uses]
        raise DataError(f"{folder}: a {name} run; `zoo {use}` needs a run of {' or '.join(fits)}")
    model = load_model(folder)
    if quantize is not None:
        model.quantize(quantize)
    return name, recipe_module(name), model


def is_checkpoint(target):
    """Whether `target` is a checkpoint folder or handle (what
    `zoo.from_pretrained` reads) rather than a run folder."""
    import zoo

    from recipes.run_folder import RUN

    if zoo.checkpoints.is_handle(target):
        return True
    if zoo.checkpoints.gguf.is_gguf_file(target):
        return True
    return zoo.checkpoints.is_checkpoint_folder(target) and not (Path(target) / RUN).is_file()


# What `zoo sample` and `zoo classify` need of a checkpoint: (model class, in words).
CHECKPOINT_MODELS = {
    "sample": (("CausalLM", "EncoderDecoder"),
               "a causal LM (GPT-2, the Llama family or Gemma 3) or an encoder-decoder (Marian, BART, T5 / Flan-T5)"),
    "classify": (("BertClassifier",),
                 "a BERT classifier (BertForSequenceClassification or keras-hub's BertTextClassifier)"),
    "translate": (("EncoderDecoder",), "an encoder-decoder (a Marian opus-mt, BART or T5 / Flan-T5 checkpoint)"),
}


def open_model(target, use, quantize=None):
    """The model of a run folder (`open_run`), or of a checkpoint folder or
    handle (`zoo.from_pretrained`), refused unless it is what `use`
    ("sample", "classify") needs; `quantize` (a mode) quantizes it after
    loading."""
    import zoo
    from zoo.data import DataError

    if not is_checkpoint(target):
        return open_run(target, use, quantize)[2]
    model = zoo.from_pretrained(target)
    names, what = CHECKPOINT_MODELS[use]
    if not isinstance(model, tuple(getattr(zoo.models, name) for name in names)):
        raise DataError(f"{target}: a {type(model).__name__} checkpoint; `zoo {use}` needs {what}")
    if quantize is not None:
        model.quantize(quantize)
    return model


def refuse_checkpoint(target, command):
    """`zoo translate` and `zoo eval` read a run's own settings and data: a checkpoint is one line."""
    from zoo.data import DataError

    if is_checkpoint(target):
        raise DataError(
            f"{target}: a checkpoint, not a run folder; `zoo {command}` needs a run folder written by a recipe "
            "(`zoo train NAME --output DIR`)"
        )


def _sample(args):
    import zoo

    model = open_model(args.run, "sample", args.quantize)
    # An encoder-decoder answers the prompt (its source): --max-length counts the answer's tokens.
    length = (dict(max_new_tokens=args.max_length) if isinstance(model, zoo.models.EncoderDecoder)
              else dict(max_length=max(args.max_length, len(args.prompt) + 1)))
    text = zoo.generate(
        model, args.prompt, **length,
        temperature=args.temperature, seed=args.seed, **zoo.generation.sampler_options(args.top_p, args.top_k),
    )
    print(text)
    return 0


def _translate(args):
    import zoo

    if is_checkpoint(args.run):  # decoded as its generation_config.json says, unless a flag says otherwise
        model, beams, penalty = open_model(args.run, "translate", args.quantize), args.beam_size, args.length_penalty
    else:
        name, _, model = open_run(args.run, "translate", args.quantize)
        run = json.loads((Path(args.run) / "run.json").read_text(encoding="utf-8"))["args"]
        beams = args.beam_size or run.get("beam_size", 1)
        penalty = args.length_penalty if args.length_penalty is not None else run.get("length_penalty", 0.6)
    for translation in zoo.translate(model, args.sentences, num_beams=beams, length_penalty=penalty):
        print(translation)
    return 0


def _classify(args):
    import zoo

    if args.pair is not None and len(args.pair) != len(args.sentences):
        raise ValueError(f"--pair given {len(args.pair)} times for {len(args.sentences)} sentences; expected one "
                         "--pair for each SENTENCE")
    model = open_model(args.run, "classify", args.quantize)
    names = args.labels.split(",") if args.labels else None
    sentences = list(zip(args.sentences, args.pair)) if args.pair else args.sentences
    result = zoo.classify(model, sentences, label_names=names)
    names = names or getattr(model, "label_names", None) or [str(c) for c in range(model.num_classes)]
    for sentence, label, probabilities in zip(sentences, result.labels, result.probabilities):
        text = sentence if isinstance(sentence, str) else "\t".join(sentence)
        if args.all:
            shown = " ".join(f"{name}={float(p):.4f}" for name, p in zip(names, probabilities))
            print(f"{label}\t{shown}\t{text}")
        else:
            print(f"{label}\t{float(probabilities.max()):.4f}\t{text}")
    return 0


def _eval(args):
    from recipes.recipe import validation_split
    from recipes.run_folder import final_line, record_figures

    refuse_checkpoint(args.run, "eval")
    name, recipe, model = open_run(args.run, quantize=args.quantize)
    split = args.split or validation_split(recipe)
    figures = recipe.evaluate(args.run, data=args.data, split=split, model=model)
    if args.quantize is None:  # run.json keeps the run's own model's figures
        record_figures(args.run, split, figures, data=args.data)
    for metric, value in figures.items():  # the run's own figure last
        final_line(metric, value)
    return 0


def _evaluate(args):
    try:
        from recipes import evaluate
    except ImportError as error:
        raise ValueError(f"{error.name} is not installed; expected the eval extra: pip install -e .[eval]") from None
    tasks = [name.strip() for name in args.tasks.split(",") if name.strip()]
    if not tasks:
        raise ValueError(f"--tasks {args.tasks!r} names no task; expected comma-separated names, e.g. hellaswag,arc_easy")
    limit = int(args.limit) if args.limit is not None and args.limit >= 1 else args.limit
    results = evaluate.evaluate(args.target, tasks, include_path=args.include_path, num_fewshot=args.num_fewshot,
                                limit=limit, batch_size=args.batch_size, output=args.output)
    print(evaluate.tables(results))
    return 0


def _data(args):
    from zoo.data import dataset_info, fetch_dataset, is_cached, list_datasets
    from zoo.data.registry import cache_folder, file_url, local_copy

    if args.data_command == "download":
        datasets = [dataset_info(name) for name in args.names]  # every name checked before any download
        for dataset in datasets:
            print(f"{dataset.name}: {fetch_dataset(dataset.name)}")
        return 0
    for name in list_datasets():
        dataset = dataset_info(name)
        if local_copy(name) is not None:
            where = f"local copy in {local_copy(name)} (ZOO_DATA)"
        else:
            where = f"cached in {cache_folder(name)}" if is_cached(name) else "not cached"
        print(f"{name}: {dataset.description}; {dataset.size / 1e6:.1f} MB, {where}")
        for file in dataset.files:
            print(f"  {file.name:10s} {file.size:>10,} bytes  sha256 {file.sha256[:16]}...  {file_url(dataset, file)}")
        print(f"  licence: {dataset.licence}")
        print(f"  source: {dataset.provenance}")
    return 0


def _presets(args):
    import zoo

    for name in zoo.list_presets(args.family):
        info = zoo.preset_info(name)
        print(f"{name:20s} {info['family']:12s} {info['description']}")
    return 0


def _export(args):
    import zoo

    target = Path(args.target)
    if target.suffix == ".keras":
        model = zoo.load(target)
        if args.quantize is not None:
            model.quantize(args.quantize)
    elif is_checkpoint(args.target):
        model = zoo.from_pretrained(args.target, quantize=args.quantize)
    else:
        model = open_run(args.target, quantize=args.quantize)[2]
    options = dict(outtype=args.outtype, ollama=args.ollama) if args.format == "gguf" else {}
    written = zoo.export(model, args.path, format=args.format, overwrite=args.overwrite, **options)
    print(f"{args.format}: {written}")
    folder = written.parent if written.is_file() else written
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            print(f"  {path.relative_to(folder)}  {path.stat().st_size:,} bytes")
    return 0


def _describe(args):
    import zoo

    info = zoo.describe(args.name)
    print(f"{info['name']} ({info['family']}): {info['description']}")
    print(f"  parameters:               {info['parameters']:,}")
    print(f"  non-embedding parameters: {info['non_embedding_parameters']:,}")
    print(f"  training FLOPs per token: {info['training_flops_per_token']:,}")
    print("  config: " + json.dumps(info["config"]))
    return 0


def _explore(args):
    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401

        from zoo.explore import serve
    except ImportError as error:
        raise ValueError(f"{error.name} is not installed; expected the explore extra: pip install -e .[explore]") from None
    labels = args.labels.split(",") if args.labels else None
    return serve(args.target, host=args.host, port=args.port, labels=labels, quantize=args.quantize,
                 max_request_bytes=args.max_request_bytes, read_timeout=args.read_timeout)


def _serve(args):
    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401

        from zoo.serve import serve
    except ImportError as error:
        raise ValueError(f"{error.name} is not installed; expected the serve extra: pip install -e .[serve]") from None
    return serve(args.target, host=args.host, port=args.port, api_key=args.api_key, name=args.name,
                 max_batch=args.max_batch, quantize=args.quantize, max_request_bytes=args.max_request_bytes,
                 read_timeout=args.read_timeout, max_queue=args.max_queue, prefill_chunk=args.prefill_chunk,
                 prefix_cache_tokens=args.prefix_cache_tokens, draft=args.draft, draft_tokens=args.draft_tokens,
                 prompt_lookup=args.prompt_lookup)


COMMANDS = {
    "sample": _sample,
    "translate": _translate,
    "classify": _classify,
    "eval": _eval,
    "evaluate": _evaluate,
    "data": _data,
    "presets": _presets,
    "describe": _describe,
    "explore": _explore,
    "serve": _serve,
    "export": _export,
}


if __name__ == "__main__":
    sys.exit(main())
