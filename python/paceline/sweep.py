"""Sweeps: one scenario over the cartesian product of some of its fields, as a DataFrame."""

import itertools
import math
import sys

import numpy as np
import pandas as pd

from . import _paceline
from ._scenario import source, whole_number, yaml_value

# The result columns, after the grid's keys (units in the names; fits is a bool).
METRICS = ["iteration_time_s", "tokens_per_s", "tokens_per_s_per_gpu", "mfu", "hfu", "peak_memory_bytes",
           "peak_reserved_bytes", "fits"]


class _Progress:
    """A progress bar: tqdm when it is installed, else a line rewritten on stderr."""

    def __init__(self, total, enabled):
        self.total = total
        self.done = 0
        self.bar = None
        self.enabled = enabled
        if enabled:
            try:
                from tqdm import tqdm
                self.bar = tqdm(total=total, desc="sweep", unit="config")
            except ImportError:
                self.bar = None

    def __call__(self, done, total=None):
        if done <= self.done:
            return
        if self.bar is not None:
            self.bar.update(done - self.done)
        elif self.enabled:
            print(f"\rsweep: {done}/{self.total} configurations", end="", file=sys.stderr, flush=True)
        self.done = done

    def close(self):
        if self.bar is not None:
            self.bar.close()
        elif self.enabled:
            print(file=sys.stderr)


def _columns(table):
    """A SweepTable's columns as plain (picklable, owned) arrays and lists."""
    columns = {name: np.array(getattr(table, name)) for name in METRICS}
    columns["error"] = list(table.error)
    columns["warnings"] = list(table.warnings)
    return columns


def _run_chunk(text, file, axes, begin, end, threads):
    # Runs on a Dask worker: configurations [begin, end) of the sweep.
    return _columns(_paceline.sweep(text, file, axes, begin, end, threads, None))


def _frame(keys, values, columns):
    rows = list(itertools.product(*values))
    frame = pd.DataFrame({key: [row[i] for row in rows] for i, key in enumerate(keys)}, index=range(len(rows)))
    invalid = np.array([bool(e) for e in columns["error"]], dtype=bool)
    for name in METRICS[:5]:  # the float columns
        frame[name] = columns[name]
    # Invalid configurations have no peak and no verdict: NA in nullable columns.
    for name in ["peak_memory_bytes", "peak_reserved_bytes"]:
        frame[name] = pd.arrays.IntegerArray(columns[name].astype(np.int64), invalid)
    frame["fits"] = pd.arrays.BooleanArray(columns["fits"].astype(bool), invalid)
    frame["error"] = [e if e else None for e in columns["error"]]
    frame["warnings"] = columns["warnings"]
    return frame


def sweep(base, grid, threads=None, progress=True, client=None, chunk_size=None):
    """Simulates `base` (dict, YAML string or path) for every combination of `grid`'s values.

    grid: {dotted field path: [values]}, e.g. {"parallelism.tp": [1, 2, 4], "training.micro_batch": [1, 2]};
    a value may be any YAML/JSON value (numbers, strings such as "full", dicts).

    Returns a DataFrame with one row per configuration, in the order of itertools.product over
    the grid's keys as given: a column per key, then iteration_time_s (s), tokens_per_s,
    tokens_per_s_per_gpu, mfu, hfu, peak_memory_bytes, peak_reserved_bytes (bytes), fits, error — the one-line
    reason a configuration is invalid (its metrics are then NaN/NA), None otherwise — and warnings:
    the list of the simulation's warnings (Result.warnings), empty for most configurations.
    Raises ValueError, with the first one's reason, when every configuration is invalid (a
    misspelt field path, a bad base scenario).

    threads: C++ threads (None: one per core); the GIL is released while they run, and the rows
    do not depend on the count. progress: show a progress bar (tqdm when installed).
    client: a dask.distributed.Client — chunks of the grid (chunk_size configurations each;
    default: four chunks per worker) then run on its workers, which must import paceline.
    """
    text, file = source(base)
    threads = whole_number("threads", threads, 1, 2**16)
    chunk_size = whole_number("chunk_size", chunk_size, 1, 2**63 - 1)
    if not isinstance(grid, dict):
        raise TypeError(f"sweep grid is a dict of field path to values, not {type(grid).__name__}")
    keys = list(grid)
    for key in keys:
        if not isinstance(key, str):
            raise ValueError(f"sweep grid: key {key!r} is not a field path; write a string such as 'parallelism.tp'")
        # A string is one value, not the characters to try (and a number is not a list).
        if isinstance(grid[key], (str, bytes, dict)) or not hasattr(grid[key], "__iter__"):
            raise ValueError(f"sweep grid: {key}: {grid[key]!r} is not a list of values; write "
                             f"{{'{key}': [...]}}")
    values = [list(grid[key]) for key in keys]
    for key, vals in zip(keys, values):
        if not vals:
            raise ValueError(f"sweep grid: {key} has no values")
    axes = [(key, [yaml_value(v) for v in vals]) for key, vals in zip(keys, values)]
    _paceline.check_sweep(text, file, axes)
    total = math.prod(len(v) for v in values)
    bar = _Progress(total, progress)
    try:
        if client is None:
            columns = _columns(_paceline.sweep(text, file, axes, 0, total, threads or 0, bar))
        else:
            columns = _run_distributed(client, text, file, axes, total, threads, chunk_size, bar)
    finally:
        bar.close()
    return _frame(keys, values, columns)


def _run_distributed(client, text, file, axes, total, threads, chunk_size, bar):
    from distributed import as_completed

    if chunk_size is None:
        workers = max(1, len(client.scheduler_info().get("workers", {})))
        chunk_size = max(1, math.ceil(total / (4 * workers)))
    ranges = [(begin, min(begin + chunk_size, total)) for begin in range(0, total, chunk_size)]
    futures = [client.submit(_run_chunk, text, file, axes, begin, end, threads or 0, pure=False)
               for begin, end in ranges]
    sizes = {future.key: end - begin for future, (begin, end) in zip(futures, ranges)}
    done = 0
    for future in as_completed(futures):
        done += sizes[future.key]
        bar(done)
    chunks = client.gather(futures)
    columns = {name: np.concatenate([c[name] for c in chunks]) for name in METRICS}
    columns["error"] = [e for c in chunks for e in c["error"]]
    columns["warnings"] = [w for c in chunks for w in c["warnings"]]
    return columns
