"""paceline.plot: a step's timeline and a sweep's throughput, drawn with matplotlib (Agg)."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

import paceline  # noqa: E402


def test_timeline_draws_a_lane_per_rank_and_stream(gpt_8gpus, tmp_path):
    gpt_8gpus["parallelism"] = {"tp": 2, "pp": 2}
    result = paceline.simulate(gpt_8gpus)
    frame = paceline.timeline_frame(result)
    ax = paceline.plot.timeline(result)
    lanes = frame.groupby(["rank", "stream"], observed=True).ngroups
    assert len(ax.get_yticks()) == lanes
    # Two stages: ranks 0 and the first rank of stage 1 (tp 2 · dp 2 = 4).
    assert sorted(frame["rank"].unique()) == [0, 4]
    assert len(ax.patches) == int((frame["end_s"] > frame["start_s"]).sum())
    ax.figure.savefig(tmp_path / "timeline.png")
    assert (tmp_path / "timeline.png").stat().st_size > 0
    plt.close("all")


def test_timeline_of_kernels_in_a_window(gpt_8gpus):
    result = paceline.simulate(gpt_8gpus)
    ax = paceline.plot.timeline(result, kernels=True, start_s=0.0, end_s=0.01)
    assert len(ax.patches) > 0
    plt.close("all")


def test_sweep_plot_draws_a_line_per_hue(gpt_8gpus, tmp_path):
    df = paceline.sweep(gpt_8gpus, {"parallelism.tp": [1, 2, 4, 8], "training.micro_batch": [1, 2, 3]},
                        progress=False)
    ax = paceline.plot.sweep(df)
    # micro_batch 3 is invalid for every tp: two lines (micro_batch 1 and 2).
    assert len(ax.get_lines()) == 2
    assert ax.get_xlabel() == "parallelism.tp" and ax.get_ylabel() == "tokens_per_s"
    ax.figure.savefig(tmp_path / "sweep.png")
    plt.close("all")


def test_sweep_plot_draws_axes_of_whole_sections_by_their_text(gpt_8gpus):
    df = paceline.sweep(gpt_8gpus, {"parallelism": [{"tp": 1}, {"tp": 2}],
                                    "training": [{"global_batch": 8}, {"global_batch": 16}]}, progress=False)
    ax = paceline.plot.sweep(df)
    assert len(ax.get_lines()) == 2
    assert [label.get_text() for label in ax.get_legend().get_texts()] == [
        'training={"global_batch": 16}', 'training={"global_batch": 8}']
    plt.close("all")
