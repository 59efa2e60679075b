#!/usr/bin/env python3
"""Attention through PyTorch's SDPA, timed from CUPTI kernel records, merged into a profile.

A documented substitute for, and cross-check of, paceline-calibrate's attention family. It
measures the profile's attention grid through ``torch.nn.functional.scaled_dot_product_attention``
(what frameworks call; PyTorch dispatches it to FlashAttention-2 or cuDNN's fused kernels) and a
few bf16 ``torch.matmul`` GEMMs. Times come from ``torch.profiler`` (Kineto), which records CUPTI
activity kernel records: a call's time is the sum of the durations of the GPU kernels that start
inside the call's ``record_function`` window (the call is synchronized before its window closes),
exactly as paceline-calibrate does; the profile keeps the median and (p90 - p10) / median.

Merging (docs/profile-format.md, "attention_torch.py"):
  * when the profile has no complete ``attention`` table (absent, recorded under ``skipped``, or
    with failed or missing points), the torch measurement becomes ``attention`` with
    ``method: "torch-sdpa (<backend>) ..."`` and the note ``notes.attention`` says why; the C++
    rows, if any, are kept as ``attention_cudnn_backend``; a point where PyTorch ran a kernel
    paceline does not time (mem-efficient, math) or copied keys and values to every query head is
    a hole there (``time_s: null`` and an ``error`` saying what ran), its measurement kept in
    ``attention_crosscheck``;
  * otherwise it is written as ``attention_crosscheck`` (with ``ratio_to_attention`` per row);
  * ``gemm_crosscheck`` always gets the torch.matmul points (with ``ratio_to_gemm``).
The profile is rewritten atomically (temporary file + rename) in the same layout paceline-
calibrate writes, so paceline-calibrate can still resume it.

Needs only torch (PyYAML is used when installed). Exit status: 0 written, 1 nothing measured (no GPU, no torch
CUDA, or time ran out before the first point), 2 bad arguments or an unreadable profile.
"""

import argparse
import json
import math
import os
import re
import sys
import tempfile
import time

FORMAT = "paceline-profile/1"
CANONICAL_TABLES = ["memory_bound", "copies", "gemm", "collectives", "attention"]
ATTENTION_KEY = ["direction", "dtype", "causal", "head_dim", "group", "batch", "heads", "seq"]
# The quick grid of calibrate/grid.cc, used when the profile has no attention axes.
DEFAULT_AXES = {
    "direction": ["forward", "backward"],
    "dtype": ["bf16"],
    "causal": [True],
    "head_dim": [128],
    "group": [1, 8],
    "batch": [1],
    "heads": [8, 32, 128],
    "seq": [1024, 4096, 16384],
}
# GEMM cross-check points (m, n, k) in cuBLAS's column-major TN convention: y = x @ w.T with
# x [n, k] and w [m, k] (a Linear layer's forward); all are points of the quick GEMM grid.
GEMM_POINTS = [
    (1024, 1024, 1024),
    (4096, 4096, 4096),
    (16384, 16384, 16384),
    (4096, 16384, 4096),
    (16384, 4096, 16384),
    (1024, 16384, 4096),
]
RESERVED_WORDS = {"y", "n", "yes", "no", "on", "off", "true", "false", "null", "nan", "inf", "~"}


def fail(message, status=2):
    print(f"attention_torch.py: {message}", file=sys.stderr)
    sys.exit(status)


# ---------------------------------------------------------------------------------------------
# The profile's YAML layout (the same subset calibrate/yaml_subset.cc writes).


def yaml_scalar(value):
    """Writes one scalar as paceline-calibrate does (format_real, YamlNode::string)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return "null"
        text = repr(value)
        mantissa, _, exponent = text.partition("e")
        if "." not in mantissa:
            mantissa += ".0"
        if not exponent:
            return mantissa
        if exponent[0] not in "+-":
            exponent = "+" + exponent
        return f"{mantissa}e{exponent[0]}{int(exponent[1:]):02d}"
    text = str(value)
    if re.fullmatch(r"[a-z_][a-z0-9_.+/-]*", text) and text not in RESERVED_WORDS:
        return text
    escaped = []
    for ch in text:
        if ch == '"':
            escaped.append('\\"')
        elif ch == "\\":
            escaped.append("\\\\")
        elif ch == "\n":
            escaped.append("\\n")
        elif ch == "\t":
            escaped.append("\\t")
        elif ch == "\r":
            escaped.append("\\r")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            escaped.append(f"\\x{ord(ch):02x}")
        else:
            escaped.append(ch)
    return '"' + "".join(escaped) + '"'


def yaml_flow(value):
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {yaml_flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(yaml_flow(v) for v in value) + "]"
    return yaml_scalar(value)


def emit_profile(profile):
    """Writes a profile dict in paceline-calibrate's canonical layout (profile.cc, to_yaml)."""
    out = [
        "# paceline kernel profile: measured kernel and link times.",
        "# Format: docs/profile-format.md. Times in seconds, sizes in bytes.",
        f"format: {yaml_scalar(FORMAT)}",
    ]

    def block_mapping(name, mapping):
        if not mapping:
            out.append(f"{name}: {{}}")
            return
        out.append(f"{name}:")
        for k, v in mapping.items():
            out.append(f"  {k}: {yaml_flow(v)}")

    block_mapping("device", profile.get("device") or {})
    block_mapping("method", profile.get("method") or {})
    tables = [k for k, v in profile.items() if isinstance(v, dict) and "rows" in v]
    ordered = [t for t in CANONICAL_TABLES if t in tables] + [t for t in tables if t not in CANONICAL_TABLES]
    for name in ordered:
        table = profile[name]
        out.append(f"{name}:")
        out.append(f"  method: {yaml_scalar(table.get('method', ''))}")
        out.append(f"  key: {yaml_flow(table.get('key') or [])}")
        out.append(f"  interpolate: {yaml_flow(table.get('interpolate') or [])}")
        out.append(f"  axes: {yaml_flow(table.get('axes') or {})}")
        rows = table.get("rows") or []
        if not rows:
            out.append("  rows: []")
        else:
            out.append("  rows:")
            out.extend(f"    - {yaml_flow(row)}" for row in rows)
    block_mapping("skipped", profile.get("skipped") or {})
    if profile.get("notes"):
        block_mapping("notes", profile["notes"])
    return "\n".join(out) + "\n"


def write_atomically(path, text):
    directory = os.path.dirname(os.path.abspath(path))
    fd, temp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".tmp.", dir=directory)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(temp, 0o644)
        os.replace(temp, path)
    except BaseException:
        if os.path.exists(temp):
            os.unlink(temp)
        raise


class SubsetError(ValueError):
    pass


def parse_subset(text, name="profile"):
    """Reads the profile's YAML subset (calibrate/yaml_subset.h) without PyYAML: block mappings
    by indentation, block sequences of one-line items, flow collections, plain and double-quoted
    scalars, comments."""
    lines = []
    for number, raw in enumerate(text.split("\n"), 1):
        body, in_quotes, i = raw.rstrip("\r"), False, 0
        while i < len(body):  # strip a comment outside quotes
            c = body[i]
            if in_quotes and c == "\\":
                i += 1
            elif c == '"':
                in_quotes = not in_quotes
            elif c == "#" and not in_quotes and (i == 0 or body[i - 1] == " "):
                body = body[:i]
                break
            i += 1
        stripped = body.strip()
        if stripped and stripped not in ("---", "..."):
            lines.append((number, len(body) - len(body.lstrip(" ")), stripped))

    def scalar(token, quoted):
        if quoted:
            return token
        if token in ("true", "True", "TRUE"):
            return True
        if token in ("false", "False", "FALSE"):
            return False
        if token in ("null", "Null", "NULL", "~", ""):
            return None
        if re.fullmatch(r"[-+]?[0-9]+", token):
            return int(token)
        if re.fullmatch(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?", token):
            return float(token)
        return token

    def flow(s, pos, number):
        while pos < len(s) and s[pos] == " ":
            pos += 1
        if pos >= len(s):
            raise SubsetError(f"{name}:{number}: expected a value")
        if s[pos] == '"':
            out, pos = [], pos + 1
            escapes = {'"': '"', "\\": "\\", "n": "\n", "t": "\t", "r": "\r", "/": "/", "0": "\0"}
            while pos < len(s) and s[pos] != '"':
                if s[pos] == "\\":
                    e = s[pos + 1]
                    if e == "x":
                        out.append(chr(int(s[pos + 2:pos + 4], 16)))
                        pos += 4
                        continue
                    out.append(escapes[e])
                    pos += 2
                else:
                    out.append(s[pos])
                    pos += 1
            return "".join(out), pos + 1
        if s[pos] in "[{":
            closing, mapping = ("]", []) if s[pos] == "[" else ("}", {})
            pos += 1
            while True:
                while pos < len(s) and s[pos] == " ":
                    pos += 1
                if s[pos] == closing:
                    return mapping, pos + 1
                if closing == "}":
                    key, pos = flow(s, pos, number)
                    if s[pos] != ":":
                        raise SubsetError(f"{name}:{number}: expected ':' in a flow mapping")
                    mapping[str(key)], pos = flow(s, pos + 1, number)
                else:
                    value, pos = flow(s, pos, number)
                    mapping.append(value)
                while pos < len(s) and s[pos] == " ":
                    pos += 1
                if s[pos] == ",":
                    pos += 1
        end = pos
        while end < len(s) and s[end] not in ",]}" and not (s[end] == ":" and (end + 1 == len(s) or s[end + 1] == " ")):
            end += 1
        return scalar(s[pos:end].strip(), False), end

    def value_of(text_value, number):
        value, end = flow(text_value, 0, number)
        if text_value[end:].strip():
            raise SubsetError(f"{name}:{number}: unexpected text after a value")
        return value

    def block(index, indent):
        if lines[index][2].startswith("- ") or lines[index][2] == "-":
            items = []
            while index < len(lines) and lines[index][1] == indent and lines[index][2].startswith("-"):
                items.append(value_of(lines[index][2][1:].strip(), lines[index][0]))
                index += 1
            return items, index
        mapping = {}
        while index < len(lines) and lines[index][1] == indent and not lines[index][2].startswith("- "):
            number, _, content = lines[index]
            match = re.match(r"([A-Za-z0-9_.-]+):(?: (.*))?$", content)
            if not match:
                raise SubsetError(f"{name}:{number}: expected 'key: value'")
            key, rest = match.group(1), (match.group(2) or "").strip()
            index += 1
            if rest:
                mapping[key] = value_of(rest, number)
            elif index < len(lines) and (lines[index][1] > indent or
                                         (lines[index][1] == indent and lines[index][2].startswith("-"))):
                mapping[key], index = block(index, lines[index][1])
            else:
                mapping[key] = None
        return mapping, index

    if not lines:
        return {}
    try:
        document, index = block(0, 0)
    except (IndexError, KeyError, ValueError) as e:
        raise SubsetError(f"{name}: {e}") from e
    if index != len(lines):
        raise SubsetError(f"{name}:{lines[index][0]}: unexpected indentation")
    return document


def load_profile(path, yaml):
    """Reads a profile with PyYAML when it is installed, else with parse_subset."""
    try:
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        return None
    try:
        profile = yaml.safe_load(text) if yaml is not None else parse_subset(text, path)
    except Exception as e:  # yaml.YAMLError or SubsetError
        fail(f"{path}: not readable as YAML: {e}")
    if not isinstance(profile, dict) or profile.get("format") != FORMAT:
        fail(f"{path}: format is {profile.get('format') if isinstance(profile, dict) else None!r}; "
             f"expected {FORMAT}")
    return profile


# ---------------------------------------------------------------------------------------------
# Timing from Kineto's CUPTI records.


def summarize(samples):
    """Median and (p90 - p10) / median, percentiles interpolated as in calibrate/stats.cc."""
    data = sorted(samples)

    def percentile(p):
        if len(data) == 1:
            return data[0]
        rank = p / 100 * (len(data) - 1)
        lower = math.floor(rank)
        upper = min(lower + 1, len(data) - 1)
        return data[lower] + (data[upper] - data[lower]) * (rank - lower)

    median = percentile(50)
    spread = (percentile(90) - percentile(10)) / median if median > 0 else 0.0
    return median, spread


def time_calls(torch, launch, warmup, repetitions, trace_dir):
    """Runs warm-up calls, then profiled calls; returns per-call GPU seconds and kernel names.

    Each profiled call runs inside record_function("paceline_call_<i>") and is synchronized
    before the range closes; a GPU activity belongs to the call whose range contains its start
    (Kineto puts CPU ranges and CUPTI records on one clock)."""
    from torch.profiler import ProfilerActivity, profile, record_function

    for _ in range(warmup):
        launch()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for i in range(repetitions):
            with record_function(f"paceline_call_{i}"):
                launch()
                torch.cuda.synchronize()
    path = os.path.join(trace_dir, "trace.json")
    prof.export_chrome_trace(path)
    with open(path) as f:
        trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    windows = {}
    activities = []
    for e in events:
        if e.get("ph") != "X":
            continue
        name = e.get("name", "")
        category = e.get("cat", "")
        if category in ("user_annotation", "cpu_instant_event", "python_function", "cpu_op") and name.startswith(
                "paceline_call_"):
            windows[int(name.rsplit("_", 1)[1])] = (float(e["ts"]), float(e["ts"]) + float(e["dur"]))
        elif category in ("kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"):
            activities.append((float(e["ts"]), float(e["dur"]), name))
    if len(windows) != repetitions:
        raise RuntimeError(f"the trace has {len(windows)} of {repetitions} call ranges")
    seconds, names, counts = [], {}, []
    for i in range(repetitions):
        begin, end = windows[i]
        inside = [(d, n) for (ts, d, n) in activities if begin <= ts <= end]
        if not inside:
            raise RuntimeError(f"no GPU activity recorded for call {i + 1}")
        seconds.append(sum(d for d, _ in inside) * 1e-6)  # Kineto durations are microseconds
        counts.append(len(inside))
        for d, n in inside:
            names[n] = names.get(n, 0.0) + d
    kernel = max(names, key=names.get)
    return seconds, kernel, counts[0]


def backend_of(kernel):
    lowered = kernel.lower()
    if "cudnn" in lowered or "sdpa" in lowered:
        return "cudnn"
    if "flash" in lowered:
        return "flash"
    if "fmha" in lowered or "cutlass" in lowered or "mem_eff" in lowered or "efficient" in lowered:
        return "efficient"
    return "other"


# ---------------------------------------------------------------------------------------------
# Measurements.


def attention_points(axes):
    points = []
    for causal in axes["causal"]:
        for head_dim in axes["head_dim"]:
            for group in axes["group"]:
                for seq in sorted(axes["seq"]):
                    for heads in sorted(axes["heads"]):
                        for direction in axes["direction"]:
                            if heads % group == 0:
                                points.append(dict(direction=direction, dtype="bf16", causal=causal, head_dim=head_dim,
                                                   group=group, batch=1, heads=heads, kv_heads=heads // group, seq=seq))
    return points


def measure_attention(torch, point, backend, warmup, repetitions, trace_dir):
    """Times one SDPA call (forward) or one backward of it (dQ, dK, dV) on random bf16 data."""
    import torch.nn.functional as F

    b, h, hk, s, d = point["batch"], point["heads"], point["kv_heads"], point["seq"], point["head_dim"]
    device = torch.device("cuda")

    def rand(heads):
        return (torch.rand(b, heads, s, d, device=device, dtype=torch.bfloat16) * 2 - 1).requires_grad_(
            point["direction"] == "backward")

    q, k, v = rand(h), rand(hk), rand(hk)
    kv_layout = "native"

    def sdpa():
        if hk == h:
            return F.scaled_dot_product_attention(q, k, v, is_causal=point["causal"])
        if kv_layout == "native":
            return F.scaled_dot_product_attention(q, k, v, is_causal=point["causal"], enable_gqa=True)
        return F.scaled_dot_product_attention(q, k.repeat_interleave(h // hk, dim=1),
                                              v.repeat_interleave(h // hk, dim=1), is_causal=point["causal"])

    context = backend_context(torch, backend)
    with context:
        try:
            out = sdpa()
        except (RuntimeError, TypeError):
            if hk == h:
                raise
            # No native GQA for this backend (or torch < 2.5): repeat K and V heads, as
            # frameworks without GQA kernels do; the row says so.
            kv_layout = "expanded"
            out = sdpa()
        if point["direction"] == "forward":
            with torch.no_grad():
                seconds, kernel, count = time_calls(torch, sdpa, warmup, repetitions, trace_dir)
        else:
            grad = torch.rand_like(out) * 2 - 1

            def backward():
                torch.autograd.grad(out, (q, k, v), grad, retain_graph=True)

            seconds, kernel, count = time_calls(torch, backward, warmup, repetitions, trace_dir)
    median, spread = summarize(seconds)
    return median, spread, kernel, count, kv_layout


def backend_context(torch, backend):
    """sdpa_kernel restricted to one backend, or a no-op for PyTorch's own choice."""
    import contextlib

    if backend == "default":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    chosen = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}[backend]
    return sdpa_kernel([chosen])


def measure_gemm(torch, m, n, k, warmup, repetitions, trace_dir):
    x = torch.rand(n, k, device="cuda", dtype=torch.bfloat16) * 2 - 1
    w = torch.rand(m, k, device="cuda", dtype=torch.bfloat16) * 2 - 1
    seconds, kernel, count = time_calls(torch, lambda: torch.matmul(x, w.t()), warmup, repetitions, trace_dir)
    median, spread = summarize(seconds)
    return median, spread, kernel, count


def attention_flop(point):
    """4·b·h·s²·d FLOP forward, halved when causal, 2.5× backward (as calibrate/grid.cc)."""
    flop = 4.0 * point["batch"] * point["heads"] * point["seq"] ** 2 * point["head_dim"]
    if point["causal"]:
        flop /= 2
    if point["direction"] == "backward":
        flop *= 2.5
    return flop


def row_key(row, key):
    return tuple(str(row.get(k)).lower() for k in key)


# The kernels paceline times from a profile's attention rows (docs/profile-format.md).
TIMED_BACKENDS = ("flash", "cudnn")


def as_attention_row(row):
    """The row as the attention table keeps it: a measurement paceline cannot time from (another
    kernel, or keys and values copied to every query head) becomes a hole saying what ran, since
    the profile loader refuses such a row and with it the whole profile."""
    if row.get("time_s") is None:
        return row
    if row["backend"] not in TIMED_BACKENDS:
        why = f"PyTorch ran {row['backend']} kernel {row['kernel']}, which paceline does not time"
    elif row.get("kv_layout", "native") != "native":
        why = "no grouped-query kernel: keys and values were copied to every query head"
    else:
        return row
    hole = {k: row[k] for k in ATTENTION_KEY + ["kv_heads"]}
    hole.update(time_s=None, error=why, backend=row["backend"])
    return hole


def attention_complete(profile, points):
    """Whether the profile's own attention table has every point, none failed, none skipped."""
    table = profile.get("attention")
    skipped = profile.get("skipped") or {}
    if not isinstance(table, dict) or "attention" in skipped:
        return False, skipped.get("attention", "no attention table")
    rows = {row_key(r, ATTENTION_KEY): r for r in table.get("rows") or []}
    failed = [r for r in rows.values() if r.get("time_s") is None]
    missing = [p for p in points if row_key(p, ATTENTION_KEY) not in rows]
    if failed or missing:
        return False, f"{len(failed)} failed and {len(missing)} missing points"
    return True, ""


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", required=True, help="profile YAML to merge into (created if absent)")
    parser.add_argument("--budget-s", type=float, default=90.0, help="wall-clock budget in seconds (default 90)")
    parser.add_argument("--warmup", type=int, default=None, help="warm-up calls (default: the profile's method)")
    parser.add_argument("--repetitions", type=int, default=None, help="timed calls (default: the profile's method)")
    parser.add_argument("--device", type=int, default=0, help="CUDA device (default 0)")
    parser.add_argument("--no-crosscheck-backends", action="store_true",
                        help="measure only PyTorch's default backend, not also flash and cuDNN explicitly")
    args = parser.parse_args()
    start = time.monotonic()
    deadline = start + args.budget_s

    try:
        import yaml
    except ImportError:
        yaml = None  # the profile's subset is read by parse_subset
    profile = load_profile(args.profile, yaml)
    try:
        import torch
    except ImportError:
        fail("PyTorch is not installed", status=1)
    if not torch.cuda.is_available():
        fail("PyTorch sees no CUDA GPU; nothing measured", status=1)
    torch.cuda.set_device(args.device)
    props = torch.cuda.get_device_properties(args.device)
    print(f"attention_torch.py: torch {torch.__version__} (CUDA {torch.version.cuda}, cuDNN "
          f"{torch.backends.cudnn.version()}) on {props.name}", flush=True)

    if profile is None:
        profile = {"format": FORMAT, "device": {"name": props.name,
                                                "compute_capability": f"{props.major}.{props.minor}"},
                   "method": {}, "skipped": {}}
    method = profile.get("method") or {}
    warmup = args.warmup if args.warmup is not None else int(method.get("warmup", 3))
    repetitions = args.repetitions if args.repetitions is not None else int(method.get("repetitions", 10))
    table = profile.get("attention") if isinstance(profile.get("attention"), dict) else {}
    axes = dict(DEFAULT_AXES)
    for name, values in (table.get("axes") or {}).items():
        if name in axes and isinstance(values, list) and values:
            axes[name] = values
    points = attention_points(axes)
    complete, why = attention_complete(profile, points)
    torch_method = (f"torch {torch.__version__} F.scaled_dot_product_attention, bf16 BHSD, timed with "
                    f"torch.profiler (Kineto/CUPTI kernel records), calibrate/attention_torch.py")

    backends = ["default"] if args.no_crosscheck_backends else ["default", "flash", "cudnn"]
    measured = {b: [] for b in backends}
    stopped = ""
    with tempfile.TemporaryDirectory() as trace_dir:
        # PyTorch's own choice for every point first, then the explicit backends while time lasts.
        for backend in backends:
            for point in points:
                if time.monotonic() > deadline:
                    stopped = f"time budget of {args.budget_s:.0f} s reached"
                    break
                row = dict(point)
                try:
                    median, spread, kernel, count, kv_layout = measure_attention(
                        torch, point, backend, warmup, repetitions, trace_dir)
                    row.update(time_s=median, spread=spread, kernels=count, kernel=kernel[:120],
                               backend=backend_of(kernel), flop_per_s=attention_flop(point) / median)
                    if kv_layout != "native":
                        row["kv_layout"] = kv_layout
                except Exception as e:  # one failing point must not stop the others
                    row.update(time_s=None, error=f"{type(e).__name__}: {str(e).splitlines()[0][:200]}",
                               backend=backend)
                    torch.cuda.empty_cache()
                measured[backend].append(row)
                print(f"  attention {backend:7s} {point['direction']:8s} h={point['heads']:<4d} "
                      f"kv={point['kv_heads']:<4d} s={point['seq']:<6d} "
                      f"{row.get('time_s') or row.get('error')}", flush=True)
            if stopped:
                break

        gemm_rows = []
        gemm_table = profile.get("gemm") if isinstance(profile.get("gemm"), dict) else {}
        cublaslt = {(r.get("dtype"), r.get("transa"), r.get("transb"), r.get("m"), r.get("n"), r.get("k")): r
                    for r in gemm_table.get("rows") or []}
        for m, n, k in GEMM_POINTS:
            if time.monotonic() > deadline:
                stopped = stopped or f"time budget of {args.budget_s:.0f} s reached"
                break
            row = {"dtype": "bf16", "transa": "T", "transb": "N", "m": m, "n": n, "k": k}
            try:
                median, spread, kernel, count = measure_gemm(torch, m, n, k, warmup, repetitions, trace_dir)
                row.update(time_s=median, spread=spread, kernels=count, kernel=kernel[:120],
                           flop_per_s=2.0 * m * n * k / median)
                reference = cublaslt.get(("bf16", "T", "N", m, n, k))
                if reference and reference.get("time_s"):
                    row["ratio_to_gemm"] = median / reference["time_s"]
            except Exception as e:
                row.update(time_s=None, error=f"{type(e).__name__}: {str(e).splitlines()[0][:200]}")
            gemm_rows.append(row)
            print(f"  gemm bf16 TN {m}x{n}x{k} {row.get('time_s') or row.get('error')}", flush=True)

    # Re-read the profile just before writing: it is merged, never overwritten blindly.
    latest = load_profile(args.profile, yaml) or profile
    notes = latest.get("notes") or {}
    skipped = latest.get("skipped") or {}
    attention_axes = {k: axes[k] for k in ATTENTION_KEY}
    default_rows = [r for r in measured["default"] if r.get("time_s") is not None]
    if not default_rows and not gemm_rows:
        fail(f"nothing measured ({stopped or 'every point failed'})", status=1)

    attention_rows = [as_attention_row(r) for r in measured["default"]]
    timed_rows = [r for r in attention_rows if r.get("time_s") is not None]
    replaced = not complete and timed_rows
    if replaced:
        backends_seen = sorted({r["backend"] for r in timed_rows})
        if isinstance(latest.get("attention"), dict) and latest["attention"].get("rows"):
            latest["attention_cudnn_backend"] = latest.pop("attention")
        latest["attention"] = {
            "method": f"torch-sdpa ({', '.join(backends_seen)}): " + torch_method,
            "key": ATTENTION_KEY, "interpolate": ["heads", "seq"], "axes": attention_axes,
            "rows": attention_rows}
        skipped.pop("attention", None)
        notes["attention"] = (f"measured by calibrate/attention_torch.py because paceline-calibrate's own "
                              f"attention was incomplete: {why}")
        if stopped or len(timed_rows) < len(points):
            skipped["attention"] = (f"attention_torch.py: {len(timed_rows)} of {len(points)} points measured"
                                    + (f"; {stopped}" if stopped else ""))
    crosscheck_rows = []
    reference = {row_key(r, ATTENTION_KEY): r for r in (latest.get("attention") or {}).get("rows") or []}
    for backend in backends:
        rows = measured[backend]
        if backend == "default" and replaced:
            # The attention table holds these rows, but for the measurements it keeps as holes.
            rows = [r for r, kept in zip(rows, attention_rows) if r is not kept]
        for row in rows:
            row = dict(row, backend_requested=backend)
            ref = reference.get(row_key(row, ATTENTION_KEY))
            if row.get("time_s") and ref and ref.get("time_s"):
                row["ratio_to_attention"] = row["time_s"] / ref["time_s"]
            crosscheck_rows.append(row)
    if crosscheck_rows:
        latest["attention_crosscheck"] = {
            "method": "torch-sdpa per backend (backend_requested: default = PyTorch's choice): " + torch_method,
            "key": ATTENTION_KEY + ["backend_requested"], "interpolate": ["heads", "seq"],
            "axes": dict(attention_axes, backend_requested=[b for b in backends
                                                             if any(r["backend_requested"] == b for r in crosscheck_rows)]),
            "rows": crosscheck_rows}
    if gemm_rows:
        latest["gemm_crosscheck"] = {
            "method": f"torch {torch.__version__} torch.matmul(x, w.t()) bf16 (cuBLAS TN m=out, n=tokens, k=in), "
                      f"timed with torch.profiler; ratio_to_gemm = time_s / gemm.time_s",
            "key": ["dtype", "transa", "transb", "m", "n", "k"], "interpolate": ["m", "n", "k"],
            "axes": {"dtype": ["bf16"], "transa": ["T"], "transb": ["N"],
                     "m": sorted({p[0] for p in GEMM_POINTS}), "n": sorted({p[1] for p in GEMM_POINTS}),
                     "k": sorted({p[2] for p in GEMM_POINTS})},
            "rows": gemm_rows}
    latest["skipped"] = skipped
    if notes:
        latest["notes"] = notes
    write_atomically(args.profile, emit_profile(latest))
    print(f"attention_torch.py: wrote {args.profile} in {time.monotonic() - start:.0f} s"
          + (f" ({stopped})" if stopped else ""), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
