"""Plots of paceline results with matplotlib: a step's timeline and a sweep's throughput."""

import json

import matplotlib.pyplot as plt
import numpy as np

from .timeline import timeline_frame

# A fixed color per activity, so plots compare across runs.
ACTIVITY_COLORS = {
    "compute": "#4c72b0",
    "recompute": "#8172b3",
    "optimizer": "#937860",
    "tp_communication": "#dd8452",
    "cp_communication": "#da8bc3",
    "ep_communication": "#8c8c8c",
    "dp_communication": "#55a868",
    "pp_communication": "#c44e52",
    "host_transfer": "#64b5cd",
}


def timeline(result, ax=None, kernels=False, ranks=None, start_s=None, end_s=None):
    """Draws the per-stream timeline of one simulated step: a row per (rank, stream) of the
    recorded ranks, a bar per task (per kernel with kernels=True) colored by activity; the x axis
    is simulated seconds. `ranks` limits the rows to some global ranks; start_s/end_s the window.
    Returns the Axes."""
    spans = timeline_frame(result, kernels=kernels)
    if ranks is not None:
        spans = spans[spans["rank"].isin(list(ranks))]
    if start_s is not None:
        spans = spans[spans["end_s"] >= start_s]
    if end_s is not None:
        spans = spans[spans["start_s"] <= end_s]
    spans = spans[spans["end_s"] > spans["start_s"]]
    if ax is None:
        rows = max(1, spans.groupby(["rank", "stream"], observed=True).ngroups)
        _, ax = plt.subplots(figsize=(12, 0.35 * rows + 1.2))
    lanes = sorted(spans.groupby(["rank", "stream"], observed=True).groups.keys(),
                   key=lambda lane: (lane[0], list(spans["stream"].cat.categories).index(lane[1])))
    lane_of = {lane: i for i, lane in enumerate(lanes)}
    y = np.array([lane_of[(r, s)] for r, s in zip(spans["rank"], spans["stream"])])
    for activity in spans["activity"].cat.categories:
        mask = (spans["activity"] == activity).to_numpy()
        if not mask.any():
            continue
        starts = spans["start_s"].to_numpy()[mask]
        widths = spans["end_s"].to_numpy()[mask] - starts
        ax.barh(y[mask], widths, left=starts, height=0.8, color=ACTIVITY_COLORS.get(activity, "#cccccc"),
                label=activity, linewidth=0)
    ax.set_yticks(range(len(lanes)))
    ax.set_yticklabels([f"rank {rank} · {stream}" for rank, stream in lanes])
    ax.invert_yaxis()
    ax.set_xlabel("simulated time (s)")
    ax.legend(loc="upper right", fontsize="small", ncol=2)
    ax.set_title("one training step, per stream")
    return ax


def sweep(df, x=None, y="tokens_per_s", hue=None, ax=None):
    """Plots a sweep's `y` (default tokens_per_s) against one grid column `x` (default the first),
    one line per value of `hue` (default: the other grid columns combined). Configurations that do
    not fit in memory are drawn hollow; invalid ones are left out. Returns the Axes."""
    from .sweep import METRICS

    grid_columns = [c for c in df.columns if c not in METRICS + ["error", "warnings"]]
    if x is None:
        if not grid_columns:
            raise ValueError("plot.sweep: the DataFrame has no grid column to put on the x axis")
        x = grid_columns[0]
    if hue is None:
        hue = [c for c in grid_columns if c != x]
    elif isinstance(hue, str):
        hue = [hue]
    valid = df[df["error"].isna()].copy()
    # Values that are mappings or lists (a grid over a whole section) are drawn by their JSON text,
    # which sorts and groups as they cannot.
    for column in [x] + hue:
        if valid[column].dtype == object:
            valid[column] = valid[column].map(
                lambda v: json.dumps(v, sort_keys=True) if isinstance(v, (dict, list)) else str(v))
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 5))
    groups = valid.groupby(hue if len(hue) > 1 else hue[0], sort=True) if hue else [((), valid)]
    for key, group in groups:
        key = key if isinstance(key, tuple) else (key,)
        label = ", ".join(f"{h}={k}" for h, k in zip(hue, key)) or y
        group = group.sort_values(x)
        line, = ax.plot(group[x], group[y], marker="o", label=label)
        misfit = group[~group["fits"].astype(bool)]
        if len(misfit):
            ax.scatter(misfit[x], misfit[y], s=80, facecolors="white", edgecolors=line.get_color(), zorder=3)
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    if hue:
        ax.legend(fontsize="small")
    ax.set_title(f"{y} against {x} (hollow: does not fit)")
    return ax
