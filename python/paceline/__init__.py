"""paceline: predicts how long a large-model training step takes on a GPU cluster, and why.

A scenario — a dict, a YAML string or a path to a YAML file, in the format of paceline's
README ("Scenario format") — goes in; results come out in SI units with the unit in the name
(``iteration_time_s``, ``peak_memory_bytes``, ``tokens_per_s``).

    >>> import paceline
    >>> r = paceline.simulate("scenarios/gpt3-175b-1024xa100.yaml")
    >>> r.iteration_time_s, r.to_dict()["memory"]["fits"]
    >>> df = paceline.sweep(base, grid={"parallelism.tp": [1, 2, 4], "training.micro_batch": [1, 2]})
    >>> best = paceline.search(base, top=5).top
    >>> paceline.plot.timeline(r)

Bad input raises ValueError whose message starts with file:line:col.
"""

import importlib as _importlib
import math as _math
import numbers as _numbers
import os as _os

# An installed package carries paceline's data folders (catalogs, profiles, scenarios) in
# paceline/data; a build-tree module finds them in the source tree it was built from.
_DATA = _os.path.join(_os.path.dirname(__file__), "data")
if _os.path.isdir(_os.path.join(_DATA, "models", "catalog")):
    _os.environ.setdefault("PACELINE_DATA_DIR", _DATA)

from . import _paceline  # noqa: E402
from ._paceline import MemoryTimeline, Result, SimulationLimitError, SweepTable, Timeline  # noqa: E402
from ._scenario import source as _source  # noqa: E402
from .search import SearchResult, search  # noqa: E402
from .sweep import sweep  # noqa: E402
from .timeline import timeline_frame  # noqa: E402

__all__ = [
    "MemoryTimeline", "Result", "SearchResult", "SimulationLimitError", "SweepTable", "Timeline", "data_path",
    "estimate_cost", "gpus", "load_scenario",
    "models", "plot", "search", "simulate", "sweep", "timeline_frame",
]


def _finite(value):
    try:
        return _math.isfinite(float(value))
    except OverflowError:  # an int past the doubles
        return False


def simulate(scenario, *, timeout_s=None, max_events=None, max_memory_bytes=None):
    """Simulates one training step of `scenario` (dict, YAML string or path).

    Returns a Result: ``iteration_time_s`` (s), ``tokens_per_s``, ``mfu``, ``peak_memory_bytes``
    (bytes), ``fits``, ``warnings`` (the lines of ``sim.warnings``), ``to_dict()`` with every key
    of the result contract, ``timeline()``, ``memory_timeline()``.
    The GIL is released while it runs; Ctrl-C (a notebook's interrupt) stops it with
    KeyboardInterrupt. Raises ValueError (file:line:col: ...) on bad input.

    Limits only ever stop a run, never change its result: a scenario whose estimate
    (estimate_cost) exceeds ``timeout_s`` or ``max_memory_bytes`` is refused before it starts,
    and one that still overruns ``timeout_s`` or ``max_events`` is stopped; both raise
    SimulationLimitError with the estimate. ``timeout_s`` and ``max_events``: None, no limit;
    ``max_memory_bytes``: None, this machine's memory (or less where a cgroup or ulimit -v allows
    less), as ``paceline run`` (0: no limit).
    """
    text, file = _source(scenario)
    for name, value in (("timeout_s", timeout_s), ("max_events", max_events), ("max_memory_bytes", max_memory_bytes)):
        if value is not None and not (isinstance(value, _numbers.Real) and value >= 0 and _finite(value)):
            raise ValueError(f"{name} = {value!r} must be a finite number of at least 0 (or None)")
    if max_events is not None and (max_events >= 2**64 or int(max_events) != max_events):
        raise ValueError(f"max_events = {max_events!r} must be a whole number of events below 2**64 (or None)")
    if max_memory_bytes is None:
        max_memory_bytes = _paceline.machine_memory_bytes()
    return _paceline.simulate(text, file, timeout_s or 0.0, int(max_events or 0), max_memory_bytes or 0.0)


def estimate_cost(scenario):
    """What simulating `scenario` would take, without simulating it: a dict of engine_tasks,
    tasks_per_rank, simulated_ranks, memory_bytes, wall_time_s (on this machine), full_fidelity
    and a one-line description."""
    text, file = _source(scenario)
    return _paceline.estimate_cost(text, file)


def load_scenario(scenario):
    """Reads and validates `scenario`; returns it resolved as a dict, every default filled in
    (quantities in seconds, bytes and bytes/s), which simulate() takes back as the same
    scenario. Raises ValueError on bad input."""
    text, file = _source(scenario)
    return _paceline.load_scenario(text, file)


def models():
    """The model catalog: a list of dicts (name, layers, hidden, heads, kv_heads, parameters,
    active_parameters), sorted by name."""
    return _paceline.models()


def gpus():
    """The GPU catalog: a list of dicts (name, description, bf16_flop_per_s and fp8_flop_per_s in
    FLOP/s, memory_bytes, memory_bandwidth_bytes_per_s), sorted by name."""
    return _paceline.gpus()


def data_path(*parts):
    """A path inside paceline's data folder (catalogs, profiles, scenarios), e.g.
    data_path("scenarios", "gpt3-175b-1024xa100.yaml")."""
    return _os.path.join(_paceline.data_root(), *parts)


def __getattr__(name):
    # paceline.plot imports matplotlib, so it loads on first use.
    if name == "plot":
        return _importlib.import_module(".plot", __name__)
    raise AttributeError(f"module 'paceline' has no attribute {name!r}")
