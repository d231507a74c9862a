"""The interventions one surgery run measures: per-layer skip, repeat and swap, and the pruning curve's sets.

    jobs = surgery_jobs(n_layers=30, kinds=("skip", "repeat", "swap", "prune"), transitions=t, max_k=7,
                        draws=20, seed=42)
    jobs.per_layer["skip"][l]             # Intervention.skip(l)
    jobs.prune[("block_influence", 3)]    # [Intervention.prune(the 3 blocks of lowest Block Influence)]
    jobs.prune[("random", 3)]             # ``draws`` random 3-sets (seeded)
    jobs.all()                            # every intervention, duplicates included (the engine runs each once)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...engine.interventions.surgery import Intervention
from ...engine.interventions.transitions import Transitions
from ...measures.pruning import closest_block, lowest_influence, random_sets

KINDS = ("skip", "repeat", "swap", "prune")
RULES = ("block_influence", "angular_distance", "random")


@dataclass
class SurgeryJobs:
    per_layer: dict[str, list[Intervention]] = field(default_factory=dict)
    prune: dict[tuple[str, int], list[Intervention]] = field(default_factory=dict)

    def all(self) -> list[Intervention]:
        return [iv for ivs in self.per_layer.values() for iv in ivs] + [iv for ivs in self.prune.values() for iv in ivs]


def default_max_k(n_layers: int) -> int:
    """A quarter of the layers, at least 1."""
    return max(1, n_layers // 4)


def surgery_jobs(n_layers: int, kinds: tuple[str, ...], transitions: Transitions | None, max_k: int, draws: int,
                 seed: int) -> SurgeryJobs:
    jobs = SurgeryJobs()
    makers = {"skip": (Intervention.skip, n_layers), "repeat": (Intervention.repeat, n_layers),
              "swap": (Intervention.swap, n_layers - 1)}
    for kind, (make, count) in makers.items():
        if kind in kinds:
            jobs.per_layer[kind] = [make(layer) for layer in range(count)]
    if "prune" in kinds and transitions is not None:
        if not 1 <= max_k <= n_layers - 1:  # the study refuses it first (check_max_k); never cut it silently
            raise ValueError(f"max_k={max_k}: a model of {n_layers} blocks can prune 1 to {n_layers - 1} at once")
        ks = list(range(1, max_k + 1))
        drawn = random_sets(n_layers, ks, draws, np.random.default_rng(seed))
        for k in ks:
            jobs.prune[("block_influence", k)] = [Intervention.prune(lowest_influence(transitions.influence, k))]
            jobs.prune[("angular_distance", k)] = [Intervention.prune(closest_block(transitions.angular, k))]
            jobs.prune[("random", k)] = [Intervention.prune(s) for s in drawn[k]]
    return jobs
