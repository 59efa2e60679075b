"""The example notebook python/examples/paceline_tour.ipynb runs headless from start to end."""

import os
import subprocess
import sys

import pytest

from conftest import REPO

pytest.importorskip("nbconvert")
pytest.importorskip("ipykernel")


def test_tour_notebook_executes(tmp_path):
    notebook = os.path.join(REPO, "python", "examples", "paceline_tour.ipynb")
    # The kernel runs in the notebook's folder: the package path must not be relative. It draws
    # with the kernel's inline backend (Agg underneath), which puts the figures in the notebook.
    env = dict(os.environ)
    env.pop("MPLBACKEND", None)
    env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p)
    done = subprocess.run([sys.executable, "-m", "nbconvert", "--to", "notebook", "--execute",
                           "--ExecutePreprocessor.timeout=600", "--output-dir", str(tmp_path), notebook],
                          capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    executed = (tmp_path / "paceline_tour.ipynb").read_text()
    assert '"output_type": "error"' not in executed
    assert "image/png" in executed  # the plots rendered
