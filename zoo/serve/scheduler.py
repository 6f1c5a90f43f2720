"""The model's one thread: requests decoded together, joining at any step.

Every model call of `zoo serve` runs on this thread. A model decodes in
slots (`zoo.generation.slots.Slots`, continuous batching): `max_batch`
slots, each with its own rows of one key/value cache, its own position,
sampler, seed and controls. A request is prefilled (in chunks of
`prefill_chunk` tokens between decoding steps, when set; its prompt's
first blocks copied from the prefix cache when it holds them; an
encoder-decoder's source encoded first, its encoder output then kept
beside its keys and values) and takes a free slot before the next step;
one compiled step then decodes every slot, and a request that ends or is
cancelled frees its slot at once, so no request waits for another's
batch to end. The requests beyond the free slots wait in a queue of at
most `max_queue`: one more is refused (`QueueFull`) rather than kept
waiting without end. A request cancelled while it waits leaves the
queue; one cancelled while it decodes ends its row.

Under speculative decoding (and with `continuous=False`), requests
decode by static batching: requests that arrive while the thread is
busy, or within `gather_seconds` of one another when it is idle, form a
batch, one `zoo.text.TextGeneration` per batch (right-padded prompts,
shapes rounded up, a batch of several requests to `max_batch` rows); at
most `max_batches` of them take turns, one decoding step each, beside
the slots' steps.

A `ModelJob` (a `ScoreJob`: the log-probabilities of given tokens,
`zoo.score`; an `EmbedJob`: sentence embeddings, `zoo.embed`) runs on the
same thread, whole, before the next decoding step.

Each row has its own sampler, temperature, `top_p`, seed
(`zoo.generation.Sampling`) and decoding controls (penalties, `min_p`,
`logit_bias`), and a row's draws come from its seed and position alone,
so a seeded request gets the answer it would get alone.
"""

import collections
import itertools
import queue
import threading
import time

import zoo
from zoo.generation.slots import Slots
from zoo.serve.metrics import Measures
from zoo.text.text_generation import TextRow
from zoo.text.tokens import auto_stop_ids, sampled_decoding, special_id, tokenizer_of

PIECE, END, ERROR = "piece", "end", "error"


class QueueFull(RuntimeError):
    """The scheduler's waiting queue is full; the request was not taken."""


class Job:
    """One request: its prompt ids, settings, and the events its reader takes.

    Events (on `events`, a queue): `(PIECE, text)`, then `(END, row)`
    (the `TextRow`, with `finish_reason` and token counts), or `(ERROR,
    message)`; before `END`, `token_ids` holds the new token ids. The
    reader sets `cancelled` when it goes away, and may set
    `wake`, a function called (on the model's thread) after each event.
    `constraint` is the grammar its tokens follow (None: free), its row's
    of the generation's `constraints`.
    """

    _ids = itertools.count()

    def __init__(self, prompt_ids, max_tokens, stop, sampler, temperature, top_p, seed, controls=None,
                 constraint=None):
        self.prompt_ids, self.max_tokens, self.stop = prompt_ids, max_tokens, stop
        self.constraint = constraint
        self.sampler, self.temperature, self.top_p, self.seed = sampler, temperature, top_p, seed
        self.controls = controls or {}  # the decoding controls' settings
        self.events = queue.Queue()
        self.cancelled = False
        self.wake = None
        self.token_ids = []
        self.id = next(self._ids)

    def put(self, event):
        self.events.put(event)
        if self.wake is not None:
            self.wake()

    def pieces(self):
        """The events as they come, ending with `END` or `ERROR`. Closing
        this generator (the client went away) cancels the job."""
        try:
            while True:
                event = self.events.get()
                yield event
                if event[0] != PIECE:
                    return
        finally:
            self.cancelled = True


class ModelJob:
    """A request the model's thread computes whole, before the next decoding
    step (`compute(model)`); its events: `(END, result)` or `(ERROR,
    message)`."""

    _ids = Job._ids

    def __init__(self):
        self.events = queue.Queue()
        self.cancelled = False
        self.wake = None
        self.id = next(self._ids)

    put = Job.put

    def run(self, model):
        try:
            result = self.compute(model)
        except Exception as error:  # the request hears why, and the server goes on
            self.put((ERROR, f"{type(self).__name__} stopped: {type(error).__name__}: {error}"))
        else:
            self.put((END, result))


class ScoreJob(ModelJob):
    """The log-probabilities of continuations given their contexts, by
    `zoo.score` (token id lists): a list of `Score`s."""

    def __init__(self, contexts, continuations, top_logprobs):
        super().__init__()
        self.contexts, self.continuations, self.top_logprobs = contexts, continuations, top_logprobs

    def compute(self, model):
        return zoo.score(model, self.contexts, self.continuations, top_logprobs=self.top_logprobs)


class EmbedJob(ModelJob):
    """Sentence embeddings, by `zoo.embed`: an (N, d) float32 array."""

    def __init__(self, texts):
        super().__init__()
        self.texts = texts

    def compute(self, model):
        return zoo.embed(model, self.texts)


class Scheduler:
    """Decodes the `Job`s submitted to it on one thread.

    Args:
        model: a language model carrying its tokenizer.
        max_batch: the most requests decoding together (the slots; a
            static batch's rows).
        max_queue: the most requests waiting; `submit` refuses one more
            with `QueueFull`.
        max_batches: the most static batches decoding at once (taking turns).
        gather_seconds: an idle scheduler that got a request for a static
            batch starts it once no other came for this long (at most ten
            times it).
        prefill_chunk: None prefills a prompt whole; an int, in chunks of
            that many tokens between decoding steps (slots).
        prefix_cache_tokens: the most prompt positions whose keys and
            values the prefix cache keeps (slots of a decoder-only model);
            0 keeps none.
        speculation: None, or the settings of speculative decoding
            (`zoo.generation.speculative`: `assistant_model`, a draft
            model, or `prompt_lookup_num_tokens`, ...); each request then
            decodes in a batch of its own (no slots), its tokens proposed
            and checked several at a time.
        continuous: False decodes by static batching, without slots
            (llama.cpp server's `--no-cont-batching`: a benchmark's
            baseline).

    Attributes:
        ended: the latest ended jobs, `(job id, new tokens computed, finish
            reason, "cancelled" or "scored")`, oldest first.
        batch_sizes: the number of requests decoded together: in each of
            the latest steps of the slots, and in each of the latest static
            batches.
        waiting: the requests submitted and not yet decoding.
        running: the requests decoding now.
        slots: the `Slots`, or None (speculative decoding; `continuous=False`).
        measures: the `zoo.serve.metrics.Measures` of its requests (`GET
            /metrics`, and `GET /health`'s times to the first token).
    """

    def __init__(self, model, max_batch=8, max_queue=64, max_batches=8, gather_seconds=0.04, prefill_chunk=None,
                 prefix_cache_tokens=0, speculation=None, continuous=True):
        self.model, self.max_batch, self.max_queue = model, max_batch, max_queue
        self.speculation = speculation
        self.max_batches, self.gather_seconds = max_batches, gather_seconds
        self.slots = None
        if continuous and speculation is None and hasattr(model, "call_with_cache"):
            tokenizer = tokenizer_of(model, "zoo serve")
            self.slots = Slots(model, max_batch, prefill_chunk=prefill_chunk, prefix_cache_tokens=prefix_cache_tokens,
                               tokenizer=tokenizer, **_decoding_ends(model, tokenizer))
        self.ended = collections.deque(maxlen=1000)
        self.batch_sizes = collections.deque(maxlen=1000)
        self.waiting = self.running = 0
        self.measures = Measures(self._state)
        self.lock = threading.Lock()
        self.queue = queue.Queue()
        self.thread = threading.Thread(target=self._run, name="zoo-serve-model", daemon=True)
        self.thread.start()

    def submit(self, job):
        """Queues `job`; `QueueFull` if `max_queue` requests already wait."""
        with self.lock:
            if self.waiting >= self.max_queue:
                raise QueueFull(f"{self.waiting} requests are waiting, the most this server queues (--max-queue)")
            self.waiting += 1
        self.measures.arrived(job)
        self.queue.put(job)
        return job

    def slots_health(self):
        """What `GET /health` says of the slots, or None without them."""
        slots = self.slots
        if slots is None:
            return None
        cache, state = slots.prefix_cache, self._state()
        looked_up = state["prefix_cache_queries"]
        return dict(slots=slots.batch, in_use=slots.in_use, prefill_chunk=slots.prefill_chunk,
                    prefix_cache_tokens=0 if cache is None else cache.capacity_tokens,
                    prefix_cache_held=state["prefix_cache_tokens"],
                    prefix_cache_hit_rate=state["prefix_cache_hits"] / looked_up if looked_up else 0.0)

    def _state(self):
        """The gauges and the prefix cache's counters of `GET /metrics`."""
        slots = self.slots
        cache = None if slots is None else slots.prefix_cache
        return dict(waiting=self.waiting, running=self.running, slots=0 if slots is None else slots.batch,
                    slots_in_use=0 if slots is None else slots.in_use,
                    prefix_cache_queries=0 if cache is None else cache.hits + cache.misses,
                    prefix_cache_hits=0 if cache is None else cache.hits,
                    prefix_cache_tokens=0 if cache is None else cache.tokens)

    def _end(self, job, new_tokens, reason):
        """Records that `job` ended, with `new_tokens` computed, for `reason`
        ("stop", "length", "cancelled", "scored"; "error" is measured only)."""
        if reason != "error":
            self.ended.append((job.id, new_tokens, reason))
        self.measures.ended(job, len(getattr(job, "prompt_ids", ())), new_tokens, reason)

    def _run(self):
        active, backlog, rows = [], [], []
        while True:
            idle = not active and not backlog and not rows
            backlog.extend(self._arrivals(wait=idle, gather=self.slots is None))
            self._drop_cancelled(backlog)
            for job in [job for job in backlog if isinstance(job, ModelJob)]:
                backlog.remove(job)
                with self.lock:
                    self.waiting -= 1
                job.run(self.model)
                self._end(job, 0, "scored")
            for job in [job for job in backlog if self._in_slots(job)]:
                if len(rows) >= self.max_batch:
                    break
                backlog.remove(job)
                with self.lock:
                    self.waiting -= 1
                row = _SlotRow(self.slots, job, self._end, self.measures)
                if row.request is not None:
                    rows.append(row)
            if rows:
                self._slot_step(rows)
            static = [job for job in backlog if not self._in_slots(job)]
            while static and len(active) < self.max_batches:
                batch = self._next_batch(static)
                for job in batch.jobs:
                    backlog.remove(job)
                if batch.start():
                    active.append(batch)
            for batch in list(active):
                if not batch.step():
                    active.remove(batch)
            with self.lock:
                self.running = sum(batch.decoding for batch in active) + len(rows)

    def _in_slots(self, job):
        """Whether `job` decodes in a slot."""
        return self.slots is not None

    def _slot_step(self, rows):
        """One step of the slots; the rows that ended leave `rows`."""
        for row in [row for row in rows if row.job.cancelled]:
            row.cancel()
            rows.remove(row)
        if not rows:
            return
        try:
            gained = self.slots.step()
        except Exception as error:  # every decoding row hears why, and the server goes on
            for row in rows:
                row.fail(error)
            rows.clear()
            return
        if gained:
            self.batch_sizes.append(len(gained))
        by_request = {id(request): tokens for request, tokens in gained}
        for row in list(rows):
            if id(row.request) in by_request or row.request.finished:
                row.advance()
            if row.ended:
                rows.remove(row)

    def _drop_cancelled(self, backlog):
        """Frees the places of the waiting jobs whose clients left."""
        for job in [job for job in backlog if job.cancelled]:
            backlog.remove(job)
            self._end(job, 0, "cancelled")
            with self.lock:
                self.waiting -= 1

    def _next_batch(self, backlog):
        """The first `max_batch` waiting jobs, taken from `backlog` as one batch."""
        size = 1 if self.speculation else self.max_batch  # speculation decodes one prompt at a time
        jobs = backlog[:size]
        del backlog[:size]
        with self.lock:
            self.waiting -= len(jobs)
            self.running += len(jobs)
        self.batch_sizes.append(len(jobs))
        return _Batch(self.model, jobs, self._end, self.measures, self.max_batch, self.speculation)

    def _arrivals(self, wait, gather=True):
        """The jobs queued now. An idle scheduler first waits for one, then
        (for static batches, `gather`) for more while they keep coming (each
        within `gather_seconds` of the last, for at most ten times that, or
        until a batch is full)."""
        jobs = []
        if wait:
            jobs.append(self.queue.get())
            deadline = time.monotonic() + 10 * self.gather_seconds
            while gather and len(jobs) < self.max_batch and time.monotonic() < deadline:
                try:
                    jobs.append(self.queue.get(timeout=self.gather_seconds))
                except queue.Empty:
                    break
        while True:
            try:
                jobs.append(self.queue.get_nowait())
            except queue.Empty:
                return jobs


class _SlotRow:
    """A job decoding in a slot: its `SlotRequest` and its text (`TextRow`:
    pieces never half a character nor the start of a stop string)."""

    def __init__(self, slots, job, end, measures):
        self.slots, self.job, self.end, self.measures = slots, job, end, measures
        self.ended, self.request = False, None
        tokenizer = tokenizer_of(slots.model, "zoo serve")
        try:
            sampling = dict(sampler=job.sampler, temperature=job.temperature, top_p=job.top_p, seed=job.seed)
            controls = {name: value for name, value in job.controls.items() if value is not None}
            prompt, budget, source = job.prompt_ids, job.max_tokens, None
            if slots.encoder_decoder:  # the prompt is the source; the decoder starts as `zoo.generate` starts it
                prompt, _, settled = sampled_decoding(tokenizer)
                source, controls = job.prompt_ids, {**settled, **controls}
                budget = min(budget, slots.window - len(prompt))
            self.request = slots.add(prompt, budget, sampling, controls, job.constraint, source=source)
            self.text = TextRow(tokenizer, prompt if source is None else [], len(job.prompt_ids), tuple(job.stop),
                                slots.stop_token_ids)
        except Exception as error:  # the request hears why, and the server goes on
            self.fail(error)

    def advance(self):
        """Gives out the text its new tokens make; ends the job when its request has finished."""
        request = self.request
        if request.error is not None:
            self.fail(request.error)
            return
        self.measures.gained(self.job, len(request.new_tokens))
        piece = self.text.update(request.new_tokens, request.finish_reason)
        if self.text.finish_reason is not None and not request.finished:
            self.slots.finish(request)  # a stop string: the slot is free at once
        if piece:
            self.job.put((PIECE, piece))
        if request.finished:
            self.ended = True
            self.job.token_ids = list(request.new_tokens)
            self.text.cached_tokens = request.cached_tokens
            self.job.put((END, self.text))
            self.end(self.job, self.text.completion_tokens, self.text.finish_reason)

    def cancel(self):
        self.slots.finish(self.request)
        self.ended = True
        self.end(self.job, len(self.request.new_tokens), "cancelled")

    def fail(self, error):
        if self.request is not None:
            self.slots.finish(self.request)
        self.ended = True
        self.job.put((ERROR, f"generation stopped: {type(error).__name__}: {error}"))
        self.end(self.job, 0 if self.request is None else len(self.request.new_tokens), "error")


class _Batch:
    """Jobs decoded together by one `TextGeneration`."""

    def __init__(self, model, jobs, end, measures, max_batch, speculation=None):
        self.model, self.jobs, self.end, self.measures, self.max_batch = model, jobs, end, measures, max_batch
        self.speculation = speculation
        self.ended = [False] * len(jobs)
        self.speculated = (0, 0, 0)  # the rounds, proposed and accepted tokens measured

    @property
    def decoding(self):
        """How many of its jobs have not ended."""
        return self.ended.count(False)

    def start(self):
        """Builds the generation; False (each job told why) if it cannot start."""
        jobs = self.jobs
        try:
            self.generation = zoo.text.TextGeneration(
                self.model,
                [job.prompt_ids for job in jobs],
                [job.max_tokens for job in jobs],
                stop=[list(job.stop) for job in jobs],
                sampler=[job.sampler for job in jobs],
                seed=[job.seed for job in jobs],
                temperature=[job.temperature for job in jobs],
                top_p=[job.top_p for job in jobs],
                bucket=self.max_batch if len(self.jobs) > 1 else True,  # two batch shapes: 1 and max_batch
                controls=_row_controls(self.jobs),
                speculation=self.speculation,
                **_row_constraints(self.jobs),
            )
            self.steps = self.generation.steps(every_token=True)
        except Exception as error:  # every job of the batch hears why, and the server goes on
            self._fail(error)
            return False
        return True

    def step(self):
        """One decoding step; False once the batch is over."""
        for row, job in enumerate(self.jobs):
            if job.cancelled and not self.ended[row]:
                self.generation.end(row)
                self.ended[row] = True
                self.end(job, len(self.generation.decoding.new_tokens[row]), "cancelled")
        try:
            pieces = next(self.steps, None)
        except Exception as error:
            self._fail(error)
            return False
        self._measure()
        for row, piece in pieces or ():
            self.jobs[row].put((PIECE, piece))
        for row, text_row in enumerate(self.generation.rows):
            if not self.ended[row] and (text_row.finish_reason is not None or pieces is None):
                self.ended[row] = True
                self.jobs[row].token_ids = [int(t) for t in self.generation.decoding.new_tokens[row]]
                self.jobs[row].put((END, text_row))
                self.end(self.jobs[row], text_row.completion_tokens, text_row.finish_reason)
        return pieces is not None and not all(self.ended)

    def _measure(self):
        """The rows' new tokens, and the speculation's rounds since the last step."""
        decoding = self.generation.decoding
        for row, job in enumerate(self.jobs):
            self.measures.gained(job, len(decoding.new_tokens[row]))
        speculation = decoding.speculation
        if speculation is not None:
            now = (speculation.rounds, speculation.drafted, speculation.accepted)
            self.measures.speculated(*(a - b for a, b in zip(now, self.speculated)))
            self.speculated = now

    def _fail(self, error):
        message = f"generation stopped: {type(error).__name__}: {error}"
        for row, job in enumerate(self.jobs):
            if not self.ended[row]:
                self.ended[row] = True
                job.put((ERROR, message))
                self.end(job, 0, "error")


def _decoding_ends(model, tokenizer):
    """The slots' stop ids and suppressed ids, as `zoo.text.TextGeneration`
    decodes the model: an encoder-decoder stops at its `[END]` and never
    chooses what its checkpoint bars (Marian's `<pad>`)."""
    if not getattr(model, "is_encoder_decoder", False):
        return dict(stop_token_ids=auto_stop_ids(tokenizer))
    return dict(stop_token_ids=[special_id(tokenizer, "end")], suppress_token_ids=sampled_decoding(tokenizer)[1])


# What a row without a control gets: the control's off value.
_OFF = {"repetition_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0, "min_p": 0.0, "logit_bias": None}


def _row_controls(jobs):
    """The batch's controls, one value a row, for each control a job sets."""
    names = sorted({name for job in jobs for name in job.controls})
    return {name: [job.controls.get(name, _OFF[name]) for job in jobs] for name in names} or None


def _row_constraints(jobs):
    """The batch's grammars, one a row (None: free), where any job has one."""
    constraints = [job.constraint for job in jobs]
    return {"constraints": constraints} if any(c is not None for c in constraints) else {}
