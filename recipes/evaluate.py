"""`zoo evaluate`: EleutherAI's lm-evaluation-harness on a zoo model.

    zoo evaluate hf://HuggingFaceTB/SmolLM2-135M --tasks hellaswag,arc_easy --limit 200
    zoo evaluate runs/gpt_char --tasks my_task --include-path my_tasks/ --output results.json

The harness asks a model three things, and `ZooLM` answers each through
the zoo's public API: `loglikelihood` (multiple-choice tasks) through
`zoo.score`, `loglikelihood_rolling` (perplexity tasks) through
`zoo.score_rolling`, `generate_until` through `zoo.text.TextGeneration`
(the engine behind `zoo.generate`), greedy unless a task asks to sample.
The target is anything `zoo serve` takes. Needs the eval extra
(`pip install -e .[eval]`: lm-eval).
"""

import json
from pathlib import Path

from lm_eval.api.model import LM

DEFAULT_MAX_GEN_TOKS = 256  # the harness's own default
SEED = 1234  # every sampled request draws with it, as the harness seeds its hf model


def task_manager(tasks, include_path):
    """The harness's `TaskManager` that knows every name of `tasks`: the
    user's folder alone when it holds them all (the built-in tasks take
    seconds to index and need the network to download), else with the
    built-in tasks. Raises one ValueError naming an unknown task."""
    from lm_eval.tasks import TaskManager

    if include_path is not None and not Path(include_path).is_dir():
        raise ValueError(f"--include-path {include_path}: no such folder; expected a folder of task YAML files")
    if include_path is not None:
        own = TaskManager(include_path=str(include_path), include_defaults=False)
        if all(own.match_tasks([name]) for name in tasks):
            return own
    manager = TaskManager(include_path=None if include_path is None else str(include_path))
    unknown = [name for name in tasks if not manager.match_tasks([name])]
    if unknown:
        where = f" or of --include-path {include_path}" if include_path is not None else " (or pass --include-path DIR)"
        raise ValueError(
            f"unknown task {', '.join(unknown)}; expected a task or group of the harness (lm-eval ls tasks){where}"
        )
    return manager


def evaluate(target, tasks, include_path=None, num_fewshot=None, limit=None, batch_size=8, output=None):
    """Runs the harness's `simple_evaluate` on a zoo model; returns its results dict.

    Args:
        target: a run folder, a `.keras` file, a checkpoint folder or a
            handle (`hf://ORG/NAME[@REVISION]`), as `zoo serve` takes.
        tasks: a list of task (or group) names.
        include_path: a folder of the user's own task YAML files.
        num_fewshot: examples in each prompt (None: each task's own).
        limit: the most documents per task (an int), or a fraction (< 1).
        batch_size: rows per forward pass.
        output: a path: the harness's results written there as JSON.
    """
    manager = task_manager(tasks, include_path)  # before the model loads
    from lm_eval import simple_evaluate
    from lm_eval.utils import handle_non_serializable

    from recipes.run_folder import open_target

    lm = ZooLM(open_target(target), batch_size=batch_size)
    results = simple_evaluate(
        model=lm, tasks=list(tasks), num_fewshot=num_fewshot, limit=limit, task_manager=manager,
        batch_size=batch_size, log_samples=False,
    )
    if output is not None:
        Path(output).parent.mkdir(parents=True, exist_ok=True)
        Path(output).write_text(json.dumps(results, indent=2, default=handle_non_serializable), encoding="utf-8")
    return results


def tables(results):
    """The harness's tables of `results`: the tasks', then the groups' if any."""
    from lm_eval.utils import make_table

    return make_table(results) + (f"\n{make_table(results, 'groups')}" if results.get("groups") else "")


class ZooLM(LM):
    """A zoo model as the harness's `LM`: a causal LM (or an
    encoder-decoder) carrying its tokenizer.

    Args:
        model: the zoo model.
        batch_size: rows per forward pass.
    """

    def __init__(self, model, batch_size=8):
        import zoo

        super().__init__()
        if not isinstance(model, (zoo.models.CausalLM, zoo.models.EncoderDecoder)):
            raise ValueError(
                f"the target holds a {type(model).__name__}, not a language model; expected a causal LM (GPT, "
                "Llama, Gemma 3) or an encoder-decoder carrying its tokenizer"
            )
        if getattr(model, "tokenizer", None) is None:
            raise ValueError("the model carries no tokenizer; expected one saved with it (model.tokenizer)")
        self.model, self.batch_size = model, batch_size

    def loglikelihood(self, requests, disable_tqdm=False):
        import zoo

        contexts, continuations = zip(*(request.args for request in requests))
        scores = zoo.score(self.model, list(contexts), list(continuations), batch_size=self.batch_size)
        return [(score.logprob, score.is_greedy) for score in scores]

    def loglikelihood_rolling(self, requests, disable_tqdm=False):
        import zoo

        texts = [request.args[0] for request in requests]
        return [result.logprob for result in zoo.score_rolling(self.model, texts, batch_size=self.batch_size)]

    def generate_until(self, requests, disable_tqdm=False):
        from zoo.tokenizers import token_id_lists
        from zoo.models import EncoderDecoder
        from zoo.text import TextGeneration

        model = self.model
        prompts = [request.args[0] for request in requests]
        settings = [_generation_settings(request.args[1]) for request in requests]
        if isinstance(model, EncoderDecoder):  # the prompt is the source; the decoder stops within its window
            window = model.max_sequence_length
            rows = [row[:window] for row in token_id_lists(model.source_tokenizer or model.tokenizer, prompts)]
            for setting in settings:
                setting["budget"] = min(setting["budget"], window - 1)
        else:
            rows = token_id_lists(model.tokenizer, prompts)
        for i, row in enumerate(rows):
            if not row:
                raise ValueError(f"request {i} has an empty prompt; expected at least one token to continue")
        outputs = [None] * len(requests)
        # Longest first (as the harness's hf model orders them); each row samples by its own settings and
        # seed, so requests of any settings share a batch and each gets the text it would get alone.
        order = sorted(range(len(rows)), key=lambda i: -len(rows[i]))
        for first in range(0, len(order), self.batch_size):
            chunk = order[first: first + self.batch_size]
            sampling = [dict(settings[i]["sampling"]) for i in chunk]
            generation = TextGeneration(
                model, [rows[i] for i in chunk], [settings[i]["budget"] for i in chunk],
                stop=[list(settings[i]["until"]) for i in chunk],
                **{name: [row.get(name, default) for row in sampling] for name, default in SAMPLING_DEFAULTS.items()},
            )
            for i, text in zip(chunk, generation.run()):
                outputs[i] = text
        return outputs


# A row's sampler settings where its request names none (greedy reads none of them).
SAMPLING_DEFAULTS = {"sampler": "greedy", "temperature": 1.0, "top_k": 50, "top_p": 0.9, "seed": SEED}


def _generation_settings(kwargs):
    """A request's `generate_until` arguments: its stop strings, its budget
    and its sampler (greedy unless `do_sample` or a temperature above 0)."""
    kwargs = dict(kwargs or {})
    until = kwargs.pop("until", None) or []
    until = [until] if isinstance(until, str) else list(until)
    budget = int(kwargs.pop("max_gen_toks", DEFAULT_MAX_GEN_TOKS))
    temperature = float(kwargs.pop("temperature", 0.0) or 0.0)
    sample = bool(kwargs.pop("do_sample", False)) or temperature > 0
    sampling = {"sampler": "greedy"}
    if sample:
        sampling = {"sampler": "temperature", "temperature": temperature or 1.0}
        if kwargs.get("top_p") is not None:
            sampling.update(sampler="top_p", top_p=float(kwargs["top_p"]))
        elif kwargs.get("top_k") is not None:
            sampling.update(sampler="top_k", top_k=int(kwargs["top_k"]))
    return {"until": tuple(s for s in until if s), "budget": budget, "sampling": tuple(sorted(sampling.items()))}
