"""A checked completions or chat request (a `Plan`) answered: its jobs'
events awaited without holding a thread, then OpenAI's answer, whole or
streamed as server-sent events (`data: {chunk}` ... `data: [DONE]`).

A client that leaves cancels its jobs, which frees their places in the
queue or stops their decoding.
"""

import asyncio
import math
import queue
import time
import uuid

import numpy as np
from starlette.responses import Response, StreamingResponse

from zoo.serve import protocol, tool_calls, validation
from zoo.serve.scheduler import END, ERROR, PIECE, ScoreJob
from zoo.serve.service import submit

LEFT = 499  # the client left: nobody reads this status


def json_response(answer):
    """The response of a `protocol.Response` model."""
    return Response(answer.model_dump_json(), media_type="application/json")


class Events:
    """A job's events, awaited without holding a thread: the model's
    thread wakes this loop after each event."""

    def __init__(self, job):
        loop, self.job, self.ready = asyncio.get_running_loop(), job, asyncio.Event()
        job.wake = lambda: loop.call_soon_threadsafe(self.ready.set)

    async def next(self, disconnected=None):
        """The next `(kind, value)`; None once the future `disconnected` is done."""
        while True:
            self.ready.clear()
            try:
                return self.job.events.get_nowait()
            except queue.Empty:
                pass
            if disconnected is None:
                await self.ready.wait()
                continue
            wake = asyncio.ensure_future(self.ready.wait())
            await asyncio.wait({wake, disconnected}, return_when=asyncio.FIRST_COMPLETED)
            wake.cancel()
            if disconnected.done():
                return None


async def result(job, disconnected):
    """`(END, (text, value))` or `(ERROR, message)` of a job, its pieces
    joined; None once the client has left."""
    events, text = Events(job), []
    while True:
        event = await events.next(disconnected)
        if event is None:
            return None
        kind, value = event
        if kind == PIECE:
            text.append(value)
        else:
            return (END, ("".join(text), value)) if kind == END else event


async def disconnected(request):
    """Returns once the client has gone away."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def answer(request, service, plan):
    """The response to a `Plan` whose jobs are queued: streamed, or whole."""
    if plan.stream:
        job = plan.jobs[0][0]
        return StreamingResponse(_stream(job, service.name, plan), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache"})
    return await _complete(request, service, plan)


async def _complete(request, service, plan):
    """The non-streamed answer: each prompt's samples, then (for
    `logprobs` or `best_of`) one `ScoreJob` for the tokens of them all, and
    the `n` choices of each prompt."""
    left = asyncio.ensure_future(disconnected(request))
    jobs = [job for jobs in plan.jobs for job in jobs]
    try:
        samples, completion_tokens = [], 0  # samples[p]: (text, new ids, finish reason) of each
        for ids, prompt_jobs in zip(plan.prompt_ids, plan.jobs):
            samples.append([("", [], "length")] * plan.n if not prompt_jobs else [])
            for job in prompt_jobs:
                outcome = await result(job, left)
                if outcome is None:
                    return Response(status_code=LEFT)
                if outcome[0] == ERROR:
                    return validation.server_error(outcome[1])
                text, row = outcome[1]
                prompt = [] if service.translator else ids  # a translation's text is its own
                samples[-1].append((text, _answer_ids(service, prompt, job.token_ids, row, text), row.finish_reason))
                completion_tokens += row.completion_tokens
        scores = [[None] * len(prompt_samples) for prompt_samples in samples]
        ranked = any(len(prompt_samples) > plan.n for prompt_samples in samples)
        if plan.logprobs is not None or ranked:
            pairs = []
            for p, (ids, prompt_samples) in enumerate(zip(plan.prompt_ids, samples)):
                for c, (_, new_ids, _) in enumerate(prompt_samples):
                    full, split = ids + new_ids, 1 if plan.echo else len(ids)
                    if len(full) > split:
                        pairs.append((p, c, full[:split], full[split:]))
            if pairs:
                job = ScoreJob([pair[2] for pair in pairs], [pair[3] for pair in pairs], plan.logprobs or 0)
                jobs.append(job)
                submit(service.scheduler, [job])
                outcome = await result(job, left)
                if outcome is None:
                    return Response(status_code=LEFT)
                if outcome[0] == ERROR:
                    return validation.server_error(outcome[1])
                for (p, c, _, _), score in zip(pairs, outcome[1][1]):
                    scores[p][c] = score
        choices = []
        for p, prompt_samples in enumerate(samples):
            order = sorted(range(len(prompt_samples)),
                           key=lambda c: -_per_token(scores[p][c], len(prompt_samples[c][1])))[: plan.n]
            for c in order if ranked else range(len(prompt_samples)):
                choices.append(_choice(service, plan, p, len(choices), prompt_samples[c], scores[p][c]))
        prompt_tokens = sum(len(ids) for ids in plan.prompt_ids)
        usage = protocol.Usage(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                               total_tokens=prompt_tokens + completion_tokens)
        kind = protocol.ChatResponse if plan.chat else protocol.CompletionResponse
        return json_response(kind(id=_id(plan.chat), created=int(time.time()), model=service.name, choices=choices,
                                  usage=usage))
    finally:
        left.cancel()
        for job in jobs:
            job.cancelled = True


def _id(chat):
    return ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex


def _per_token(score, new_tokens):
    """A sample's log-probability per token of its answer (-inf for none)."""
    if score is None or not new_tokens:
        return -math.inf
    return float(np.mean(score.token_logprobs[-new_tokens:]))


def _choice(service, plan, p, index, sample, score):
    """One choice of the answer: prompt `p`'s `sample` and its `Score`."""
    text, new_ids, finish_reason = sample
    ids, prompt_text = plan.prompt_ids[p], plan.texts[p]
    if plan.chat:
        logprobs = None if plan.logprobs is None else chat_logprobs(service, score)
        message = protocol.AssistantMessage(content=text)
        if plan.tools is not None:
            content, calls = tool_calls.parse(text, plan.tools.format, plan.tools.names)
            if calls:
                message = protocol.AssistantMessage(content=content, tool_calls=_called(plan.tools, calls))
                finish_reason = "tool_calls"
        return protocol.ChatChoice(index=index, message=message, finish_reason=finish_reason, logprobs=logprobs)
    logprobs = None
    if plan.logprobs is not None:
        logprobs = completion_logprobs(service, prompt_text, ids, new_ids, score, plan.echo)
    if plan.echo:
        text = (prompt_text if prompt_text is not None else service.decode(ids)) + text
    return protocol.CompletionChoice(index=index, text=text, finish_reason=finish_reason, logprobs=logprobs)


def _called(parsing, calls):
    """OpenAI's `tool_calls` of the `Call`s read from an answer."""
    return [protocol.CalledTool(id=tool_calls.call_id(parsing.format),
                                function=protocol.CalledFunction(name=call.name, arguments=call.arguments))
            for call in calls]


def completion_logprobs(service, text, ids, new_ids, score, echo):
    """OpenAI's legacy `logprobs` object of one choice: `text` the
    prompt's (None for token ids), `score` the `Score` of the choice's
    tokens (None where there are none)."""
    prompt_text = text if text is not None else service.decode(ids)
    shown, before = (ids if echo else []) + new_ids, [] if echo else ids
    missing = len(shown) - (0 if score is None else len(score.token_ids))
    token_logprobs, top_logprobs = [None] * missing, [None] * missing
    for i, (token, value) in enumerate(zip(*(() if score is None else (score.token_ids, score.token_logprobs)))):
        alternatives = {service.decode([int(t)]): float(v) for t, v in zip(score.top_ids[i], score.top_logprobs[i])}
        alternatives.setdefault(service.decode([int(token)]), float(value))
        token_logprobs.append(float(value))
        top_logprobs.append(alternatives)
    start = 0 if echo else len(prompt_text)
    return protocol.CompletionLogprobs(tokens=[service.decode([t]) for t in shown], token_logprobs=token_logprobs,
                                       top_logprobs=top_logprobs,
                                       text_offset=[start + o for o in _offsets(service, before, shown)])


def chat_logprobs(service, score):
    """OpenAI's chat `logprobs` object of one choice's answer."""
    def entry(token, value):
        text = service.decode([int(token)])
        return dict(token=text, logprob=float(value), bytes=list(text.encode("utf-8")))

    content = []
    if score is not None:
        for i, (token, value) in enumerate(zip(score.token_ids, score.token_logprobs)):
            top = [protocol.TopLogprob(**entry(t, v)) for t, v in zip(score.top_ids[i], score.top_logprobs[i])]
            content.append(protocol.TokenLogprob(**entry(token, value), top_logprobs=top))
    return protocol.ChatLogprobs(content=content)


def _answer_ids(service, prompt_ids, new_ids, row, text):
    """The answer's token ids that its text holds: less an end token, and
    less those past a stop string."""
    ids = list(new_ids)
    if ids and ids[-1] in row.stop_token_ids:
        ids.pop()
    prompt_text = service.decode(prompt_ids)
    while ids and len(service.decode(prompt_ids + ids)) - len(prompt_text) > len(text):
        ids.pop()
    return ids


def _offsets(service, before, ids):
    """Where each of `ids` starts in the text of `before + ids`, counted
    from the end of the text of `before`."""
    base, pieces = service.decode(before), [service.decode([t]) for t in ids]
    if service.decode(before + ids) == base + "".join(pieces):
        offsets, at = [], 0
        for piece in pieces:
            offsets.append(at)
            at += len(piece)
        return offsets
    return [len(service.decode(before + ids[:i])) - len(base) for i in range(len(ids))]


class _Chunks:
    """OpenAI's chunks of one streamed answer, as server-sent events."""

    def __init__(self, model, chat, prompt_tokens):
        self.model, self.chat, self.prompt_tokens = model, chat, prompt_tokens
        self.id, self.created = _id(chat), int(time.time())

    def event(self, text=None, finish_reason=None, role=False, row=None, calls=None):
        """The event of a piece of `text`, of the `finish_reason`, of the
        assistant's `role` (chat's first), of the usage of `row`, or of
        `calls` (OpenAI's `tool_calls` deltas, each whole)."""
        kind = protocol.ChatChunk if self.chat else protocol.CompletionChunk
        common = dict(id=self.id, object=kind.model_fields["object"].default, created=self.created, model=self.model,
                      choices=[])
        if row is not None:
            common["usage"] = protocol.Usage(prompt_tokens=self.prompt_tokens, completion_tokens=row.completion_tokens,
                                             total_tokens=self.prompt_tokens + row.completion_tokens)
        elif self.chat:
            if role:
                delta = protocol.Delta(role="assistant", content="")
            elif calls is not None:
                delta = protocol.Delta(tool_calls=[
                    protocol.ToolCallDelta(index=i, id=call.id, type="function",
                                           function=protocol.FunctionDelta(name=call.function.name,
                                                                           arguments=call.function.arguments))
                    for i, call in enumerate(calls)])
            else:
                delta = protocol.Delta(content=text) if text is not None else protocol.Delta()
            common["choices"] = [protocol.ChatChunkChoice(index=0, delta=delta, finish_reason=finish_reason,
                                                          logprobs=None)]
        else:
            common["choices"] = [protocol.CompletionChoice(index=0, text=text or "", finish_reason=finish_reason,
                                                           logprobs=None)]
        # Only the fields set: a delta holds what it carries, and only the last chunk the usage.
        return "data: " + kind(**common).model_dump_json(exclude_unset=True) + "\n\n"


async def _stream(job, model, plan):
    """The server-sent events of a streamed answer. Leaving early (the
    client went away: Starlette cancels this) cancels the job, which stops
    its decoding."""
    events, chunks = Events(job), _Chunks(model, plan.chat, len(job.prompt_ids))
    # With tools offered, the text that may be a call is held back, and sent as `tool_calls` at the end.
    reading = None if plan.tools is None else tool_calls.Stream(plan.tools.format, plan.tools.names)
    try:
        if plan.chat:
            yield chunks.event(role=True)
        while True:
            kind, value = await events.next()
            if kind == PIECE:
                if reading is not None:
                    value = reading.feed(value)
                if reading is None or value:
                    yield chunks.event(value)
                continue
            finish_reason = getattr(value, "finish_reason", None)
            if reading is not None and kind != ERROR:
                content, calls = reading.finish()
                if content:
                    yield chunks.event(content)
                if calls:
                    yield chunks.event(calls=_called(plan.tools, calls))
                    finish_reason = "tool_calls"
            if kind == ERROR:
                error = protocol.ErrorResponse(error=protocol.ErrorInfo(message=value, type="server_error", param=None,
                                                                        code=None))
                yield "data: " + error.model_dump_json() + "\n\n"
            else:
                yield chunks.event(finish_reason=finish_reason)
                if plan.include_usage:
                    yield chunks.event(row=value)
            break
        yield "data: [DONE]\n\n"
    finally:
        job.cancelled = True
