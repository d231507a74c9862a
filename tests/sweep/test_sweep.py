"""Sweeps of tiny models, serially in this process and as Ray tasks on a local 2-CPU instance."""

import json
import logging
import os

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

import hubcache
import tiny
from browser import render
from layerscope.cli import app
from layerscope.study import StudyConfig, StudyResult
from layerscope.sweep import SweepPlan, run_sweep

FAST = {"n_permutations": 200}  # scaling reads no n_bootstrap: passing it is an error (issue 13)
DEPTHS = (2, 3, 4)


@pytest.fixture(scope="module")
def sweep_inputs(tmp_path_factory):
    """Three tiny Llama models of depths 2, 3 and 4, a missing model folder, and a 4-category dataset."""
    root = tmp_path_factory.mktemp("sweep")
    models = [str(tiny.save(root / f"depth{n}", "llama", adds_bos=False, n_layers=n)) for n in DEPTHS]
    (root / "pairs.json").write_text(json.dumps(tiny.pairs(4, 5)))
    return root, models, str(root / "not-yet")


def scaling(models, root, **kwargs):
    return StudyConfig(study="scaling", models=tuple(models), dataset=str(root / "pairs.json"), **FAST, **kwargs)


@pytest.fixture(scope="module")
def local_ray(tmp_path_factory):
    """A local Ray instance with 2 CPUs for this module's tests, its workers on their own activation cache
    (workers take the environment of the process that starts Ray, not the test's later changes)."""
    import ray

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LAYERSCOPE_CACHE", str(tmp_path_factory.mktemp("ray-cache")))
        mp.setenv("HF_HUB_OFFLINE", "1")
        ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.ERROR, log_to_driver=False)
    yield ray
    ray.shutdown()


def status(summary):
    return {row["spec"]: row["status"] for row in summary["tasks"]}


@pytest.mark.slow
def test_ray_sweep_equals_the_serial_one_reports_a_failure_and_resumes(sweep_inputs, local_ray, tmp_path):
    root, models, missing = sweep_inputs
    config = scaling([*models, missing], root)
    serial = run_sweep(SweepPlan(config), tmp_path / "serial")
    on_ray = run_sweep(SweepPlan(config, executor="ray"), tmp_path / "ray")
    assert local_ray.is_initialized()  # run_sweep used the running instance and left it running

    for summary in (serial, on_ray):
        assert status(summary) == {**{m: "done" for m in models}, missing: "failed"}
        failed, = [row for row in summary["tasks"] if row["status"] == "failed"]
        assert missing in failed["error"] and "does not exist" in failed["error"]
        assert summary["n_done"] == 3 and summary["n_failed"] == 1
    gathered = pd.read_csv(tmp_path / "ray" / "table.csv")
    # equal, up to float rounding: torch runs 2 threads here and 1 in each Ray task (d = 32 models have shown
    # bit-identical tables; wider ones differ by ~1e-7, see benchmarks/sweep_ray_vs_serial.py)
    pd.testing.assert_frame_equal(gathered, pd.read_csv(tmp_path / "serial" / "table.csv"), check_exact=False,
                                  rtol=0, atol=1e-6)
    # each model's rows are its own task's table, in task order, with the layers its depth gives
    assert list(gathered["model"].unique()) == models
    for model, depth in zip(models, DEPTHS, strict=False):
        rows = gathered[(gathered["model"] == model) & (gathered["metric"] == "r_ua_pref")
                        & (gathered["subset"] == "all")]  # not the sensitivity checks' rows
        assert sorted(rows["layer"]) == list(range(depth + 1)) and set(rows["n_layers"]) == {depth}
    saved = json.loads((tmp_path / "ray" / "sweep.json").read_text())
    assert saved["executor"] == "ray" and [t["status"] for t in saved["tasks"]] == ["done"] * 3 + ["failed"]
    for name in ("index.html", "report.md", "r_ua_pref.png", "rho_ua_pref.png", "config.yaml"):
        assert (tmp_path / "ray" / name).is_file(), name
    assert not (tmp_path / "ray" / "training_dynamics.png").exists()  # no revision names a training step
    assert "Failed tasks" in (tmp_path / "ray" / "report.md").read_text()

    # rerun: finished tasks are kept untouched, the failed one is tried again (and now its model exists)
    written = {m: os.stat(t / "result.json").st_mtime_ns
               for m, t in zip(models, sorted((tmp_path / "ray" / "tasks").iterdir()), strict=False)}
    tiny.save(missing, "llama", adds_bos=False, n_layers=2)
    again = run_sweep(SweepPlan(config, executor="ray"), tmp_path / "ray")
    assert status(again) == {**{m: "reused" for m in models}, missing: "done"}
    assert {m: os.stat(t / "result.json").st_mtime_ns
            for m, t in zip(models, sorted((tmp_path / "ray" / "tasks").iterdir()), strict=False)} == written
    assert pd.read_csv(tmp_path / "ray" / "table.csv")["model"].nunique() == 4


def test_a_revision_sweep_tracks_headline_numbers_over_training(tmp_path, monkeypatch):
    checkpoints = {f"step{s}": tiny.save(tmp_path / f"ckpt{s}", "llama", adds_bos=False, n_layers=3, seed=s)
                   for s in (0, 100, 1000)}
    hubcache.use_hub(monkeypatch, hubcache.fake_hub(tmp_path / "hub", "owner/tiny", checkpoints))
    (tmp_path / "pairs.json").write_text(json.dumps(tiny.pairs(4, 5)))
    plan = SweepPlan(scaling(["owner/tiny"], tmp_path), revisions=tuple(checkpoints))
    summary = run_sweep(plan, tmp_path / "out")

    table = pd.read_csv(tmp_path / "out" / "table.csv")
    assert list(table.columns[:3]) == ["model", "revision", "step"]
    assert set(table["model"]) == {"owner/tiny"} and list(table["step"].unique()) == [0, 100, 1000]
    for row in summary["tasks"]:
        task = StudyResult.load(tmp_path / "out" / row["folder"])
        assert task.manifest["models"][0]["revision"] == row["revision"]
        # the main profile: all pairs, the final layer before the final norm
        r = table[(table["revision"] == row["revision"]) & (table["metric"] == "r_ua_pref")
                  & (table["subset"] == "all") & (table["stage"] != "post_norm")].sort_values("layer")
        assert list(r["layer"]) == [0, 1, 2, 3]
        peak = 1 + int(np.argmax(r["value"].to_numpy()[1:]))  # the profile's peak, by hand, without layer 0
        assert row["numbers"]["peak_r"] == pytest.approx(r["value"].iloc[peak])
        assert row["numbers"]["peak_depth_pct"] == pytest.approx(100 * r["layer"].iloc[peak] / 3)
        assert row["numbers"]["final_r"] == pytest.approx(r["value"].iloc[-1])
    hashes = {row["weights_hash"] for row in summary["tasks"]}
    assert len(hashes) == 3  # three different checkpoints
    assert summary["peak_stability"]["mean_peak_pct"] == pytest.approx(
        np.mean([row["numbers"]["peak_depth_pct"] for row in summary["tasks"]]))
    pngs = sorted(p.name for p in (tmp_path / "out").glob("*.png"))
    assert pngs == ["r_ua_pref.png", "rho_ua_pref.png", "training_dynamics.png"]
    check = render(tmp_path / "out" / "index.html")
    assert len(check["images"]) == 3 and all(check["images"])  # every figure embedded, and Chromium decodes it


def test_the_sweep_command_exits_1_on_a_failed_task_and_run_executor_sweeps(sweep_inputs, tmp_path):
    root, models, _ = sweep_inputs
    file = tmp_path / "sweep.yaml"
    file.write_text(f"study: scaling\nmodels: [{models[0]}, {tmp_path / 'nope'}]\ndataset: {root / 'pairs.json'}\n"
                    "n_permutations: 200\n")
    runner = CliRunner()
    result = runner.invoke(app, ["sweep", "--config", str(file), "--out", str(tmp_path / "a")])
    assert result.exit_code == 1, result.output
    assert "1 of 2 tasks failed" in result.output and "run the same command again" in result.output
    assert json.loads((tmp_path / "a" / "sweep.json").read_text())["n_done"] == 1

    result = runner.invoke(app, ["run", "scaling", "--model", models[0], "--model", models[1], "--dataset",
                                 str(root / "pairs.json"), "--n-permutations", "200",
                                 "--executor", "serial", "--out", str(tmp_path / "b")])
    assert result.exit_code == 0, result.output
    assert pd.read_csv(tmp_path / "b" / "table.csv")["model"].nunique() == 2
    result = runner.invoke(app, ["run", "scaling", "--workers", "2", "--out", str(tmp_path / "c")])
    assert result.exit_code == 2 and "need --executor ray" in result.output and not (tmp_path / "c").exists()
