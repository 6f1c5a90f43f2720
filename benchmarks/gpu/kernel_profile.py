"""Where a compiled program's time goes, from a `jax.profiler` trace.

    from kernel_profile import dump_flags, trace_summary
    os.environ["XLA_FLAGS"] = dump_flags(dump_dir)        # before JAX starts, to name each kernel's part
    summary = trace_summary(run, steps=3, dump_dir=dump_dir, parts=train_parts)

`trace_summary` runs `run()` under `jax.profiler.trace` and sums the
kernels the device ran, per step (`steps`: the steps `run` takes):

- `launches`: kernels per step;
- `busy_ms`: their time per step (the device is idle for the rest of the
  step: the host, launches, synchronisation);
- `top`: the `count` kernels with the most time, as [(ms per step, name)];
- `parts`: {part: ms per step} (and `part_launches`: {part: kernels per
  step}), when the compiler's optimised programs were
  dumped to `dump_dir` (`dump_flags`): each kernel's HLO instruction (the
  trace's `hlo_op` and `program_id`) is looked up in its program and named
  by `parts(op_name)` from the JAX scope of its metadata (for a train step:
  forward, backward, optimizer).

On a GPU the kernels are the device's stream events; on a CPU (where the
tests run it) they are XLA's CPU thunks, which run on several threads, so
`busy_ms` may exceed the step.
"""

import glob
import os
import re
import tempfile

_COMPUTATION = re.compile(r"^(?:ENTRY )?%?([\w.\-]+) .*\{$")
_INSTRUCTION = re.compile(r"^\s*(ROOT )?%?([\w.\-]+) = ")
_OP_NAME = re.compile(r'op_name="([^"]*)"')
_CALLS = re.compile(r"calls=%?([\w.\-]+)")
_OPERAND = re.compile(r"%([\w.\-]+)")
_CONTROL = re.compile(r"^(while|conditional|call)(\.\d+)?$")


def dump_flags(dump_dir):
    """The XLA_FLAGS that write every optimised program to `dump_dir` as text."""
    return f"--xla_dump_to={dump_dir} --xla_dump_hlo_as_text"


def train_parts(op_name, optimizer_scope="adam_w"):
    """The part of a Keras train step an op belongs to, from its JAX scope:
    the optimizer's name scope, the backward pass (`transpose(jvp(...))`),
    the forward pass (`jvp(...)`, the loss included), or other (the metrics)."""
    if f"/{optimizer_scope}/" in op_name or op_name.endswith(f"/{optimizer_scope}"):
        return "optimizer"
    if "transpose(" in op_name:
        return "backward"
    if "jvp(" in op_name:
        return "forward"
    return "other"


def loop_parts(op_name):
    """A decoding program's ops: inside its `while` loop (the new tokens) or before it (the prompt)."""
    return "loop" if "while/body" in op_name else "prompt"


def _kernel_events(trace_dir):
    """[(name, ns, hlo_op, program_id)] of the trace's kernels: the GPU's
    stream events, else (no GPU plane) the CPU's XLA thunks."""
    from jax.profiler import ProfileData

    paths = glob.glob(os.path.join(trace_dir, "**", "*.xplane.pb"), recursive=True)
    if not paths:
        return []
    planes = list(ProfileData.from_file(sorted(paths)[-1]).planes)
    gpu = [plane for plane in planes if plane.name.startswith("/device:GPU")]
    events, seen = [], set()
    for plane in gpu or [plane for plane in planes if plane.name.startswith("/host:CPU")]:
        for line in plane.lines:
            if gpu and "stream" not in line.name.lower():
                continue
            for event in line.events:
                stats = _annotated(dict(event.stats))
                if not gpu and ("hlo_op" not in stats or _CONTROL.match(str(stats["hlo_op"]))):
                    continue  # a host event, or a CPU loop's or call's thunk around the kernels it runs
                key = (event.name, event.start_ns, line.name if not gpu else None)
                if key in seen:  # a kernel shown on more than one stream line
                    continue
                seen.add(key)
                events.append((event.name, event.duration_ns, stats.get("hlo_op"), stats.get("program_id")))
    return events


def _annotated(stats):
    """An event's stats, with the `hlo_op`, `hlo_module` and `program_id`
    of XLA's kernel annotation ("name:#hlo_op=fusion.3,program_id=44#") where
    the trace keeps them in one string stat instead."""
    if "hlo_op" in stats:
        return stats
    for value in list(stats.values()):
        if isinstance(value, str) and "hlo_op=" in value:
            for pair in value.split("#")[1].split(",") if value.count("#") >= 2 else value.split(","):
                key, _, item = pair.partition("=")
                if key.strip() in ("hlo_op", "hlo_module", "program_id"):
                    stats[key.strip()] = item.strip()
            break
    return stats


def _op_names(dump_dir, program_id):
    """{instruction name: op_name} of the optimised program `program_id` in
    `dump_dir`. An instruction without metadata of its own (a fusion, an
    instruction the compiler made) takes its fused computation's (the root's,
    else the last one given in it), else its first operand's."""
    try:
        number = int(program_id)
    except (TypeError, ValueError):
        return {}
    own, calls, operands, root_names, last_names = {}, {}, {}, {}, {}
    for path in glob.glob(os.path.join(dump_dir, f"module_{number:04d}.*after_optimizations.txt")):
        computation = None
        with open(path) as file:
            for line in file:
                header = _COMPUTATION.match(line)
                if header:
                    computation = header.group(1)
                    continue
                match = _INSTRUCTION.match(line)
                if not match:
                    continue
                root, name = match.groups()
                op_name, called = _OP_NAME.search(line), _CALLS.search(line)
                if op_name:
                    own[name] = op_name.group(1)
                    (root_names if root else last_names)[computation] = op_name.group(1)
                if called:
                    calls[name] = called.group(1)
                arguments = line.split("(", 1)[1] if "(" in line.split(" = ", 1)[1] else ""
                operands[name] = _OPERAND.findall(arguments.split(")", 1)[0])

    def resolve(name, depth=0):
        if name in own:
            return own[name]
        called = calls.get(name)
        if called in root_names or called in last_names:
            return root_names.get(called, last_names.get(called))
        if depth < 8 and operands.get(name):
            return resolve(operands[name][0], depth + 1)
        return None

    names = {}
    for name in operands:
        op_name = resolve(name)
        if op_name is not None:
            names[name] = op_name
    return names


def summarize(events, steps, dump_dir=None, parts=None, count=5):
    """The summary of `events` (from `_kernel_events`) over `steps` steps."""
    if not events:
        return {"launches": 0, "busy_ms": 0.0, "top": [], "parts": {}, "part_launches": {}}
    totals = {}
    for name, ns, _, _ in events:
        totals[name] = totals.get(name, 0.0) + ns
    top = sorted(totals.items(), key=lambda item: -item[1])[:count]
    result = {
        "launches": len(events) / steps,
        "busy_ms": sum(ns for _, ns, _, _ in events) / 1e6 / steps,
        "top": [(ns / 1e6 / steps, name) for name, ns in top],
        "parts": {},
        "part_launches": {},
    }
    if dump_dir and parts:
        programs, by_part, launches = {}, {}, {}
        for _, ns, hlo_op, program_id in events:
            if program_id not in programs:
                programs[program_id] = _op_names(dump_dir, program_id)
            op_name = programs[program_id].get(hlo_op)
            part = "unnamed" if op_name is None else parts(op_name)
            by_part[part] = by_part.get(part, 0.0) + ns / 1e6 / steps
            launches[part] = launches.get(part, 0) + 1 / steps
        result["parts"] = dict(sorted(by_part.items(), key=lambda item: -item[1]))
        result["part_launches"] = {part: launches[part] for part in result["parts"]}
    return result


def trace(run):
    """Runs `run()` (which must wait for the device) under the profiler: its kernel events, for `summarize`
    and `kinds`."""
    import jax

    trace_dir = tempfile.mkdtemp()
    with jax.profiler.trace(trace_dir):
        run()
    return _kernel_events(trace_dir)


def trace_summary(run, steps, dump_dir=None, parts=None, count=5):
    """Runs `run()` (which must wait for the device) under the profiler: `summarize`'s dict."""
    return summarize(trace(run), steps, dump_dir, parts, count)


def kinds(events, steps, dump_dir=None, parts=None, part=None):
    """[(kind, ms per step, kernels per step)] of `events`, most time first:
    a kind is a kernel's name without its number (`ffi_call`, `dot`,
    `copy_bitcast_fusion`). With `part`, only the kernels `parts` names so
    (the programs dumped to `dump_dir`), or "unnamed": those without a JAX
    op name (the copies XLA inserts)."""
    programs, time, launches = {}, {}, {}
    for name, ns, hlo_op, program_id in events:
        if part is not None:
            if program_id not in programs:
                programs[program_id] = _op_names(dump_dir, program_id)
            op_name = programs[program_id].get(hlo_op)
            if ("unnamed" if op_name is None else parts(op_name)) != part:
                continue
        kind = re.sub(r"\.\d+$", "", name)
        time[kind] = time.get(kind, 0.0) + ns / 1e6 / steps
        launches[kind] = launches.get(kind, 0) + 1 / steps
    return [(kind, ms, launches[kind]) for kind, ms in sorted(time.items(), key=lambda item: -item[1])]


def describe(summary, step="step"):
    """The summary as lines of text (without the top kernels)."""
    if not summary["launches"]:
        return ["no kernel events in the trace"]
    line = f"{summary['launches']:.0f} kernels per {step}, {summary['busy_ms']:.2f} ms of kernel time per {step}"
    parts = summary.get("parts") or {}
    if parts:
        line += "; " + ", ".join(f"{part} {ms:.2f} ms" for part, ms in parts.items())
    return [line]
