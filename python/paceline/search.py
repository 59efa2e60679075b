"""Layout search: every valid parallel layout of a scenario's model on its cluster, ranked."""

import copy
import sys

import pandas as pd

from . import _paceline
from ._scenario import source, whole_number


# The columns of SearchResult.top, which a search that finds no layout has too.
COLUMNS = ["rank", "tp", "pp", "dp", "cp", "ep", "virtual_stages", "schedule", "micro_batch", "recompute", "zero",
           "sequence_parallel", "iteration_time_s", "tokens_per_s", "tokens_per_s_per_gpu", "mfu", "hfu",
           "peak_memory_bytes", "peak_reserved_bytes", "capacity_bytes", "fits", "warnings"]


class SearchResult:
    """What paceline.search() found.

    top: DataFrame of the best layouts, best first (rank, tp, pp, dp, cp, ep, virtual_stages,
    schedule, micro_batch, recompute, zero, sequence_parallel, iteration_time_s (s),
    tokens_per_s, tokens_per_s_per_gpu, mfu, hfu, peak_memory_bytes, peak_reserved_bytes,
    capacity_bytes (bytes), fits,
    warnings: the list of the layout's Result.warnings).
    Counts: considered (valid layouts), pruned_memory, pruned_bound, simulated (ranked by a
    simulation's result), shared (of those, by the result of a layout that simulates alike), fit;
    wall_s: the search's own time in seconds.
    """

    def __init__(self, report):
        self.report = report
        for key in ["name", "model", "gpu", "gpus", "global_batch", "considered", "pruned_memory",
                    "pruned_bound", "simulated", "shared", "fit", "wall_s"]:
            setattr(self, key, report[key])
        self.top = pd.DataFrame(report["layouts"], columns=COLUMNS)

    def to_dict(self):
        """The report as `paceline search --json` prints it (a copy)."""
        return copy.deepcopy(self.report)

    def __repr__(self):
        return (f"SearchResult({self.model} on {self.gpus} × {self.gpu}: {self.considered} layouts considered, "
                f"{self.pruned_memory} pruned by memory, {self.pruned_bound} by "
                f"throughput bound, {self.simulated} simulated ({self.shared} shared), {self.fit} fit, "
                f"{self.wall_s:.2f} s)")


def search(scenario, gpus=None, top=10, threads=None, progress=False):
    """Ranks every valid layout of `scenario`'s model on its cluster — or on `gpus` GPUs of the
    same kind — by simulated tokens/s, keeping its global batch (see `paceline search --help`).
    Returns a SearchResult; the ranking equals simulating every layout, on any thread count.
    progress: show on stderr how far the search is (layer graphs built, layouts bounded, layouts
    simulated). Ctrl-C (a notebook's
    interrupt) stops the search with KeyboardInterrupt."""
    text, file = source(scenario)
    top = whole_number("top", top, 1, 2**31 - 1, none_allowed=False)
    gpus = whole_number("gpus", gpus, 1, 2**20)
    threads = whole_number("threads", threads, 1, 2**16)

    shown = 0

    def show(line):
        nonlocal shown  # spaces over what is left of a longer line before it
        print(f"\r{line}{' ' * (shown - len(line))}", end="", file=sys.stderr, flush=True)
        shown = len(line)

    try:
        report = _paceline.search(text, file, gpus or 0, top, threads or 0, show if progress else None)
    finally:
        if progress:
            print(file=sys.stderr)
    return SearchResult(report)
