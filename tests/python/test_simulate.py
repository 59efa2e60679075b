"""paceline.simulate / load_scenario / models / gpus: the forms a scenario takes, the result
contract, and errors as ValueError with file:line:col."""

import concurrent.futures
import json
import multiprocessing
import os
import pathlib
import pickle
import re
import signal
import subprocess
import threading

import pytest
import yaml

import paceline

CLI = os.environ.get("PACELINE_CLI")


def test_every_form_of_a_scenario_gives_the_same_result(scenario_path):
    with open(scenario_path) as f:
        text = f.read()
    expected = paceline.simulate(scenario_path).iteration_time_s
    assert paceline.simulate(pathlib.Path(scenario_path)).iteration_time_s == expected
    assert paceline.simulate(text).iteration_time_s == expected
    assert paceline.simulate(yaml.safe_load(text)).iteration_time_s == expected


def test_result_attributes_match_its_dict(gpt_8gpus):
    r = paceline.simulate(gpt_8gpus)
    d = r.to_dict()
    assert r.iteration_time_s == d["iteration_time_s"]
    assert r.tokens_per_s == d["tokens_per_s"]
    assert r.mfu == d["mfu"]
    assert r.peak_memory_bytes == d["memory"]["peak_bytes"]
    assert r.peak_reserved_bytes == d["memory"]["peak_reserved_bytes"] >= r.peak_memory_bytes
    assert r.fits == d["memory"]["fits"]
    # tokens/s = global batch 16 × 1024 tokens / iteration time.
    assert r.tokens_per_s == pytest.approx(16 * 1024 / r.iteration_time_s, rel=1e-12)
    assert json.loads(r.to_json()) == d
    assert "iteration time" in repr(r)
    assert r.warnings == d["sim"]["warnings"] == []


def test_a_result_pickles_as_its_json_and_draws_the_same_timeline(gpt_8gpus):
    r = paceline.simulate({**gpt_8gpus, "parallelism": {"tp": 2, "pp": 2}})
    again = pickle.loads(pickle.dumps(r))
    assert again.to_json() == r.to_json()
    assert repr(again) == repr(r)
    assert (again.iteration_time_s, again.peak_memory_bytes, again.fits) == (r.iteration_time_s, r.peak_memory_bytes,
                                                                            r.fits)
    # The spans are not pickled: the read-back result simulates its scenario again for them.
    assert paceline.timeline_frame(again, kernels=True).equals(paceline.timeline_frame(r, kernels=True))


def test_the_memory_timeline_rises_to_the_peak_each_stage_reports(gpt_8gpus):
    r = paceline.simulate({**gpt_8gpus, "parallelism": {"tp": 2, "pp": 2}})
    memory = r.memory_timeline()
    assert isinstance(memory, paceline.MemoryTimeline)
    assert len(memory) == len(memory.rank) == len(memory.stage) == len(memory.time_s) == len(memory.bytes) > 100
    stages = r.to_dict()["memory"]["stages"]
    assert sorted(set(memory.stage.tolist())) == [0, 1]
    for stage in stages:
        rows = memory.stage == stage["stage"]
        times = memory.time_s[rows]
        # In order of time from time zero, one row an instant, never above the stage's peak.
        assert times[0] == 0.0
        assert (times[1:] > times[:-1]).all()
        assert memory.bytes[rows].max() <= stage["peak_bytes"]
        assert memory.bytes[rows].max() > 0.9 * stage["peak_bytes"]
        assert memory.bytes[rows][0] <= stage["peak_bytes"]
        assert 0.0 <= stage["peak_at"]["time_s"] <= r.iteration_time_s
    # The ranks the spans are of (global ranks: on 8 GPUs at tp 2, pp 2, stage 1's first is not 1).
    assert set(memory.rank.tolist()) == set(r.timeline().rank.tolist()) == {0, 4}
    # A pickled result simulates its scenario again for the same rows.
    again = pickle.loads(pickle.dumps(r)).memory_timeline()
    assert (again.rank == memory.rank).all()
    assert (again.bytes == memory.bytes).all() and (again.time_s == memory.time_s).all()


def test_results_come_back_from_other_processes(gpt_8gpus):
    scenarios = [{**gpt_8gpus, "training": {**gpt_8gpus["training"], "global_batch": batch}} for batch in (8, 16)]
    with concurrent.futures.ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        results = list(pool.map(paceline.simulate, scenarios))

    def prediction(result):  # all but the simulator's own wall time
        d = result.to_dict()
        del d["sim"]["wall_s"]
        return d

    assert [prediction(r) for r in results] == [prediction(paceline.simulate(s)) for s in scenarios]


def test_a_pickle_that_is_not_a_result_is_refused(gpt_8gpus):
    state = paceline.simulate(gpt_8gpus).__getstate__()
    assert isinstance(state, tuple) and len(state) == 1
    broken = json.loads(state[0])
    broken["memory"]["peak_bytes"] = "a lot"
    with pytest.raises(ValueError, match=r"^pickled Result:\d+:\d+: memory.peak_bytes"):
        paceline.Result.__new__(paceline.Result).__setstate__((json.dumps(broken),))
    with pytest.raises(ValueError, match="holds one string"):
        paceline.Result.__new__(paceline.Result).__setstate__((1, 2))


def test_warnings_say_where_symmetric_fidelity_falls_short():
    # Stages innermost on nodes of one NIC: every stage's data-parallel pair leaves through it.
    scenario = {"model": "llama3-8b",
                "cluster": {"gpu": "a100-sxm4-80gb", "nodes": 2, "gpus_per_node": 8,
                            "inter_node": {"nics_per_node": 1, "nic_bandwidth": "200 Gb/s"}},
                "parallelism": {"pp": 8, "dp": 2, "rank_order": "pp-cp-tp-dp"},
                "training": {"global_batch": 16, "seq_len": 4096}}
    warnings = paceline.simulate(scenario).warnings
    assert len(warnings) == 1 and "data-parallel groups of 8 pipeline stages" in warnings[0]
    assert paceline.simulate({**scenario, "simulation": {"fidelity": "full"}}).warnings == []


@pytest.mark.skipif(not CLI, reason="PACELINE_CLI (the paceline executable) not given")
def test_to_dict_is_the_cli_json(scenario_path):
    cli = json.loads(subprocess.run([CLI, "run", scenario_path, "--json"], check=True, capture_output=True,
                                    text=True).stdout)
    ours = paceline.simulate(scenario_path).to_dict()
    assert list(ours) == list(cli)
    # The simulator's own wall time is the only field allowed to differ.
    del ours["sim"]["wall_s"], cli["sim"]["wall_s"]
    assert ours == cli


def test_dict_errors_cite_lines_of_the_dict_as_json(gpt_8gpus):
    gpt_8gpus["training"]["micro_batch"] = 3
    text = json.dumps(gpt_8gpus, indent=2)
    with pytest.raises(ValueError) as error:
        paceline.simulate(gpt_8gpus)
    message = str(error.value)
    match = re.match(r"<dict>:(\d+):(\d+): training\.global_batch = 16 is not a multiple of micro_batch·dp", message)
    assert match, message
    # The line is global_batch's in the JSON text the dict was written as.
    assert '"global_batch": 16' in text.splitlines()[int(match.group(1)) - 1]


def test_file_errors_cite_file_line_and_column(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("model: gpt-1.7b\ncluster: {gpu: a100-sxm4-80gb}\nparallelism: {schedule: interleave}\n"
                    "training: {global_batch: 8}\n")
    with pytest.raises(ValueError, match=re.escape(f"{path}:3:25: parallelism.schedule")):
        paceline.simulate(path)
    with pytest.raises(ValueError, match=r"^<string>:2:16: gpu = 'a100' is not in the GPU catalog"):
        paceline.simulate("model: gpt-1.7b\ncluster: {gpu: a100}\ntraining: {global_batch: 4}\n")
    with pytest.raises(ValueError, match="cannot open the file"):
        paceline.simulate(tmp_path / "missing.yaml")
    with pytest.raises(TypeError):
        paceline.simulate(42)
    # One line without a colon cannot be a YAML mapping: it is a path, and the error says so.
    with pytest.raises(ValueError, match=re.escape(f"{tmp_path / 'missing'}: cannot open the file")):
        paceline.simulate(str(tmp_path / "missing"))
    with pytest.raises(ValueError, match=re.escape(f"{tmp_path}: is a directory")):
        paceline.simulate(str(tmp_path))
    with pytest.raises(ValueError, match=r"^<string>:1:1: the file is empty"):
        paceline.simulate("")


def test_text_that_is_not_utf8_is_an_error_at_its_place(tmp_path, gpt_8gpus):
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"model: gpt-1.7b\ncluster: {gpu: a100-sxm4-80gb}\ntraining: {global_batch: 8}\nname: caf\xe9\n")
    for load in (paceline.simulate, paceline.load_scenario):
        with pytest.raises(ValueError, match=re.escape(f"{path}:4:10: byte 0xE9 starts no UTF-8 character")):
            load(path)
    # A lone surrogate (os.fsdecode's stand-in for such a byte) has no UTF-8 form either, in a path
    # or in a scenario.
    with pytest.raises(ValueError, match="the path is not UTF-8 text"):
        paceline.simulate(tmp_path / "caf\udce9.yaml")
    gpt_8gpus["name"] = "caf\udce9"
    with pytest.raises(ValueError, match=r"^<dict>:\d+:\d+: '\\udce9' is a lone surrogate"):
        paceline.simulate(gpt_8gpus)


def test_load_scenario_fills_in_every_default(gpt_8gpus):
    s = paceline.load_scenario(gpt_8gpus)
    # dp = 8 GPUs / tp 2; sequence parallelism is on by default with tp > 1.
    assert s["parallelism"]["dp"] == 4
    assert s["parallelism"]["sequence_parallel"] is True
    assert s["training"]["micro_batch"] == 1
    assert s["training"]["precision"] == "bf16"
    assert s["model"]["layers"] == 24


def test_a_loaded_scenario_simulates_as_the_file_does_and_edits_as_the_file_would(scenario_path):
    loaded = paceline.load_scenario(scenario_path)
    without_wall_time = {"sim": None}
    assert (paceline.simulate(loaded).to_dict() | without_wall_time
            == paceline.simulate(scenario_path).to_dict() | without_wall_time)
    with open(scenario_path) as f:
        written = yaml.safe_load(f)
    loaded["training"]["global_batch"] *= 2
    written["training"]["global_batch"] = loaded["training"]["global_batch"]
    edited = paceline.simulate(loaded).iteration_time_s
    assert edited == paceline.simulate(written).iteration_time_s
    assert edited > paceline.simulate(scenario_path).iteration_time_s


@pytest.mark.skipif(not CLI, reason="PACELINE_CLI (the paceline executable) not given")
@pytest.mark.parametrize("listing", ["models", "gpus"])
def test_catalogs_match_the_cli(listing):
    cli = json.loads(subprocess.run([CLI, listing, "--json"], check=True, capture_output=True, text=True).stdout)
    ours = getattr(paceline, listing)()
    assert [entry["name"] for entry in ours] == [entry["name"] for entry in cli]
    for a, b in zip(ours, cli):
        assert a.keys() == b.keys()
        for key in a:
            if isinstance(a[key], float) or isinstance(b[key], float):
                assert a[key] == pytest.approx(b[key], rel=1e-12)
            else:
                assert a[key] == b[key]


def test_data_path_finds_the_scenarios():
    assert os.path.isfile(paceline.data_path("scenarios", "gpt3-175b-1024xa100.yaml"))
    assert os.path.isdir(paceline.data_path("models", "catalog"))


def test_limits_refuse_with_the_estimate_and_never_change_a_result(scenario_path):
    cost = paceline.estimate_cost(scenario_path)
    assert cost["engine_tasks"] > 0 and cost["memory_bytes"] > 0 and cost["wall_time_s"] > 0
    with pytest.raises(paceline.SimulationLimitError, match="the simulation would need"):
        paceline.simulate(scenario_path, max_memory_bytes=cost["memory_bytes"] / 2)
    with pytest.raises(paceline.SimulationLimitError):
        paceline.simulate(scenario_path, max_events=10)
    limited = paceline.simulate(scenario_path, timeout_s=600, max_memory_bytes=paceline._paceline.machine_memory_bytes())
    free = paceline.simulate(scenario_path, max_memory_bytes=0)
    # Everything but the simulator's own wall time is the same.
    limited_dict, free_dict = limited.to_dict(), free.to_dict()
    del limited_dict["sim"]["wall_s"], free_dict["sim"]["wall_s"]
    assert limited_dict == free_dict


def test_memory_is_limited_to_the_machines_by_default_and_limits_are_checked(gpt_8gpus):
    # A billion micro-batches: terabytes of engine tasks, refused before lowering as
    # `paceline run` refuses them.
    huge = dict(gpt_8gpus, training={"global_batch": 10**9, "seq_len": 1024})
    with pytest.raises(paceline.SimulationLimitError, match="GiB of memory allowed"):
        paceline.simulate(huge)
    for limit in ({"timeout_s": -1}, {"max_events": -5}, {"max_memory_bytes": float("nan")}):
        with pytest.raises(ValueError, match="must be a finite number of at least 0"):
            paceline.simulate(gpt_8gpus, **limit)
    for events in (1.5, 2**70):
        with pytest.raises(ValueError, match="must be a whole number of events below 2"):
            paceline.simulate(gpt_8gpus, max_events=events)


def test_names_outside_the_basic_multilingual_plane_pass_through_dicts_and_grids(gpt_8gpus):
    assert paceline.simulate(dict(gpt_8gpus, name="run 🚀 𝔸")).to_dict()["scenario"]["name"] == "run 🚀 𝔸"
    df = paceline.sweep(gpt_8gpus, {"name": ["🚀", "é"]}, progress=False)
    assert df["error"].isna().all()


def test_ctrl_c_stops_a_long_simulation(scenario_path):
    # GPT-3 175B on 1,024 GPUs, every rank simulated: seconds of engine work. A SIGINT (Ctrl-C, a
    # notebook's interrupt) 0.3 s in raises KeyboardInterrupt there, and paceline is usable after.
    with open(os.path.join(os.path.dirname(scenario_path), "gpt3-175b-1024xa100.yaml")) as f:
        scenario = yaml.safe_load(f)
    scenario["simulation"] = {"fidelity": "full", "fold_symmetric_peers": False}
    timer = threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            paceline.simulate(scenario)
    finally:
        timer.cancel()
    assert paceline.simulate(scenario_path).iteration_time_s > 0


def test_timeline_frame_says_what_it_takes():
    with pytest.raises(TypeError, match="timeline_frame takes a Result or a Timeline, not int"):
        paceline.timeline_frame(5)
