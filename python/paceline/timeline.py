"""A simulated step's spans as a pandas DataFrame."""

import pandas as pd

from . import _paceline


def timeline_frame(result, kernels=False):
    """The spans of `result` (a Result, or a Timeline) as a DataFrame, one row per task (per
    kernel with kernels=True): rank, stage, stream, start_s, end_s (simulated seconds), name,
    activity (compute, recompute, tp_communication, ...), microbatch (-1: step-level work)."""
    if isinstance(result, _paceline.Timeline):
        t = result
    elif isinstance(result, _paceline.Result):
        t = result.timeline(kernels=kernels)
    else:
        raise TypeError(f"timeline_frame takes a Result or a Timeline, not {type(result).__name__}")
    return pd.DataFrame({
        "rank": t.rank,
        "stage": t.stage,
        "stream": pd.Categorical.from_codes(t.stream, categories=t.stream_names),
        "start_s": t.start_s,
        "end_s": t.end_s,
        "name": pd.Categorical.from_codes(t.name, categories=t.names),
        "activity": pd.Categorical.from_codes(t.activity, categories=t.activity_names),
        "microbatch": t.microbatch,
    })
