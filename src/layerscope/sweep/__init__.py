"""Sweeps: one study over many models or training checkpoints, serially or as Ray tasks.

    from layerscope.sweep import SweepPlan, run_sweep
    plan = SweepPlan(StudyConfig(study="phases", models=("EleutherAI/pythia-410m",)),
                     revisions=("step1000", "step143000"), executor="ray")
    summary = run_sweep(plan, Path("runs/pythia-phases"))    # table.csv, figures, sweep.json, index.html
"""

from .config_file import dump_plan, load_sweep_file
from .plan import SweepPlan, Task, split_revision, training_step
from .run import run_sweep

__all__ = ["SweepPlan", "Task", "dump_plan", "load_sweep_file", "run_sweep", "split_revision", "training_step"]
