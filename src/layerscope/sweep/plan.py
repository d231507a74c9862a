"""What a sweep runs: one study, once per model spec, each task into its own folder.

    plan = SweepPlan(StudyConfig(study="scaling", models=("EleutherAI/pythia-410m",)),
                     revisions=("step1000", "step143000"))
    plan.specs                     # ('EleutherAI/pythia-410m@step1000', 'EleutherAI/pythia-410m@step143000')
    [t.folder for t in plan.tasks(Path("runs/sweep"))]   # runs/sweep/tasks/EleutherAI--pythia-410m@step1000, ...
    split_revision("EleutherAI/pythia-410m@step3000")    # ('EleutherAI/pythia-410m', 'step3000')
    training_step("step3000")                            # 3000 (None when the revision names no step)
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from ..models.spec import split_revision
from ..paths import safe_slug
from ..study.config import ConfigError, StudyConfig
from ..study.settings import MAX_GPUS_PER_TASK, check_bound

EXECUTORS = ("serial", "ray")

_STEP = re.compile(r"(?:^|[^a-z])step[-_]?(\d+)", re.IGNORECASE)


def training_step(revision: str | None) -> int | None:
    """The training step a revision names: ``step3000``, ``stage1-step140000-tokens587B`` or plain digits."""
    if revision is None:
        return None
    if revision.isdigit():
        return int(revision)
    found = _STEP.search(revision)
    return int(found.group(1)) if found else None


MAX_SLUG = 100
"""The longest task folder name; a longer one is cut and ends in a hash of the spec."""


def task_slug(spec: str) -> str:
    """A safe folder name for a model spec: path separators become ``--``, other odd characters ``_``, runs of
    dots one dot, it never starts with ``-`` or ``.`` (``./tiny-gpt2`` -> ``tiny-gpt2``) and a Windows device
    name gets a leading ``_`` (``CON`` -> ``_CON``): :func:`~layerscope.paths.safe_name` accepts every one.
    Two specs may share one; see :func:`task_folders`."""
    slug = safe_slug(spec.strip("/").replace("/", "--"), fallback="")
    if not slug or len(slug) > MAX_SLUG:
        return f"{slug[:MAX_SLUG - 9] or 'model'}-{_spec_hash(spec)}"
    return slug


def task_folders(specs: tuple[str, ...] | list[str]) -> dict[str, str]:
    """``{spec: folder name}``, unique even where the file system ignores case: specs that share a slug
    keep it only where it spells the spec exactly (``org/a_b``); the others get ``-<hash of the spec>``
    (``org/a b`` -> ``org--a_b-10c61feb``). A spec's name depends only on the specs it collides with."""
    groups: dict[str, list[str]] = {}
    for spec in specs:
        groups.setdefault(task_slug(spec).casefold(), []).append(spec)
    names = {}
    for group in groups.values():
        exact = [s for s in group if task_slug(s).replace("--", "/") == s]
        for spec in group:
            keep = len(group) == 1 or exact == [spec]
            names[spec] = task_slug(spec) if keep else f"{task_slug(spec)[:MAX_SLUG - 9]}-{_spec_hash(spec)}"
    return names


def _spec_hash(spec: str) -> str:
    return hashlib.sha256(spec.encode()).hexdigest()[:8]


@dataclass(frozen=True)
class Task:
    """One model spec of a sweep and the folder its study run is written to."""

    spec: str
    folder: Path

    @property
    def name(self) -> str:
        return split_revision(self.spec)[0]

    @property
    def revision(self) -> str | None:
        return split_revision(self.spec)[1]

    @property
    def step(self) -> int | None:
        return training_step(self.revision)

    def done(self) -> bool:
        """A finished task's folder holds result.json (a run folder appears whole or not at all)."""
        return (self.folder / "result.json").is_file()


@dataclass(frozen=True)
class SweepPlan:
    """A study config whose ``models`` are swept one task each, and how the tasks are executed."""

    config: StudyConfig
    """The study and its settings; ``models`` lists the specs to sweep (``NAME`` or ``NAME@REVISION``)."""
    revisions: tuple[str, ...] = ()
    """When given, every model in ``config.models`` is swept at each of these revisions."""
    executor: str = "serial"
    """'serial' (one task after another in this process) or 'ray' (Ray tasks, in parallel)."""
    ray_address: str | None = None
    """Join this Ray cluster (``auto``, ``ray://host:10001``, ...) instead of starting one on this machine."""
    workers: int | None = None
    """CPUs of the local Ray instance (one task per CPU); default: every CPU Ray detects."""
    gpus_per_task: float | None = None
    """GPUs each Ray task asks for; default: 1 when the cluster has GPUs, else 0."""

    def __post_init__(self):
        object.__setattr__(self, "revisions", tuple(self.revisions))
        if self.executor not in EXECUTORS:
            raise ConfigError(f"unknown executor {self.executor!r}; use serial or ray")
        if self.executor != "ray" and (self.ray_address or self.workers or self.gpus_per_task is not None):
            raise ConfigError("--ray-address, --workers and --gpus-per-task need --executor ray")
        if self.workers is not None:
            check_bound(self.workers, "--workers")
        if self.ray_address and self.workers:
            raise ConfigError("--workers sizes a local Ray instance; leave it out with --ray-address")
        if self.gpus_per_task is not None and not 0 <= self.gpus_per_task <= MAX_GPUS_PER_TASK:
            raise ConfigError(f"--gpus-per-task {self.gpus_per_task} is out of range; use 0 to {MAX_GPUS_PER_TASK} "
                              "(a fraction shares a GPU between tasks)")
        if not self.config.models:
            raise ConfigError("a sweep needs models: give --model (repeat it) or 'models' in the config file")
        if self.revisions and any(split_revision(m)[1] for m in self.config.models):
            raise ConfigError("give revisions either in the model specs (NAME@REVISION) or as 'revisions', "
                              "not both")
        check_bound(len(self.config.models) * max(1, len(self.revisions)), "tasks per sweep (models x revisions)")
        specs = self.specs
        if len(set(specs)) != len(specs):
            raise ConfigError(f"a model spec is listed twice in {list(specs)}; list each once")
        folders = [name.casefold() for name in task_folders(specs).values()]
        if len(set(folders)) != len(folders):  # a hash collision: not seen, but never share a folder
            raise ConfigError(f"two model specs map to the same task folder: {specs}; rename one")

    @property
    def specs(self) -> tuple[str, ...]:
        """Every model spec the sweep runs, in order."""
        if not self.revisions:
            return self.config.models
        return tuple(f"{model}@{revision}" for model in self.config.models for revision in self.revisions)

    @property
    def study_config(self) -> StudyConfig:
        """The study config with every swept spec in ``models``."""
        return dataclasses.replace(self.config, models=self.specs)

    def task_config(self, task: Task) -> StudyConfig:
        """The config of one task: the study on that one model."""
        return dataclasses.replace(self.config, models=(task.spec,))

    def tasks(self, out: Path) -> list[Task]:
        folders = task_folders(self.specs)
        return [Task(spec=spec, folder=out / "tasks" / folders[spec]) for spec in self.specs]
