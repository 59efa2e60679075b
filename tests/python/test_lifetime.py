"""Arrays handed to NumPy keep their owner alive (STYLE: "a test proves it"): a Timeline's and a
SweepTable's columns are views into C++ vectors, so each array holds a reference to the object
that owns them, and stays valid after every other reference is gone."""

import gc
import sys

import numpy as np
import pytest

import paceline


def churn():
    # Allocate and free plenty, so freed memory would be reused (and a dangling view would show it).
    for _ in range(3):
        paceline.simulate("scenarios/gpt-1.7b-1xa100.yaml").timeline(kernels=True)
    gc.collect()


def test_timeline_columns_outlive_the_result_and_the_timeline():
    timeline = paceline.simulate("scenarios/gpt-1.7b-1xa100.yaml").timeline(kernels=True)  # the Result dies here
    start = timeline.start_s
    names = timeline.name
    expected_start, expected_names = start.copy(), names.copy()
    assert start.base is timeline
    owner_refs = sys.getrefcount(timeline)
    del timeline
    churn()
    # The arrays still hold the owner, and read what they read before.
    assert isinstance(start.base, paceline.Timeline)
    assert sys.getrefcount(start.base) >= 2
    np.testing.assert_array_equal(start, expected_start)
    np.testing.assert_array_equal(names, expected_names)
    assert owner_refs >= 3  # the variable, the two views


def test_memory_timeline_columns_outlive_the_result_and_the_timeline():
    memory = paceline.simulate("scenarios/gpt-1.7b-1xa100.yaml").memory_timeline()  # the Result dies here
    held = memory.bytes
    expected = held.copy()
    del memory
    churn()
    assert isinstance(held.base, paceline.MemoryTimeline)
    np.testing.assert_array_equal(held, expected)


def test_a_view_of_a_view_keeps_the_owner_too():
    timeline = paceline.simulate("scenarios/gpt-1.7b-1xa100.yaml").timeline()
    tail = timeline.end_s[10:]
    expected = tail.copy()
    del timeline
    churn()
    np.testing.assert_array_equal(tail, expected)


def test_sweep_table_columns_outlive_the_table():
    table = paceline._paceline.sweep(open("scenarios/gpt-1.7b-1xa100.yaml").read(), "gpt.yaml",
                                     [("training.micro_batch", ["1", "2", "4"])], 0, 3, 2, None)
    tokens = table.tokens_per_s
    expected = tokens.copy()
    del table
    churn()
    assert isinstance(tokens.base, paceline.SweepTable)
    np.testing.assert_array_equal(tokens, expected)


def test_views_are_read_only():
    timeline = paceline.simulate("scenarios/gpt-1.7b-1xa100.yaml").timeline()
    with pytest.raises(ValueError):
        timeline.start_s[0] = 1.0
