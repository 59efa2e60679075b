"""paceline.sweep(client=...): chunks of the grid on a Dask LocalCluster give the same frame as
running in this process."""

import pandas as pd
import pytest

import paceline

distributed = pytest.importorskip("distributed")


def test_local_cluster_gives_the_same_rows(gpt_8gpus):
    grid = {"parallelism.tp": [1, 2, 4, 8], "training.micro_batch": [1, 2, 3], "training.recompute": ["none", "full"]}
    local = paceline.sweep(gpt_8gpus, grid, progress=False)
    # Worker processes import paceline as this process does (they inherit PYTHONPATH).
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        with distributed.Client(cluster) as client:
            remote = paceline.sweep(gpt_8gpus, grid, client=client, chunk_size=5, progress=False)
    pd.testing.assert_frame_equal(local, remote)
