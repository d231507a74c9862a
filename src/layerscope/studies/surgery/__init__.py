"""Surgery study: which decoder blocks the model needs, by intervention (skip, repeat, swap, prune), tied to
the geometry (block influence, angular distance, phase boundaries).

    result = Surgery().run(StudyConfig(study="surgery", max_texts=64))
    s = result.summary["models"]["smollm2-135m"]
    s["critical"]["interior"], s["geometry"]["block_influence"]["rho"], s["pruning"]["rules"]
    result.table.query("intervention == 'skip' and metric == 'delta_nll' and lang == 'all'")
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ...data.languages import load_languages
from ...data.prompts import load_prompts
from ...data.texts import TextSet, load_texts
from ...engine.interventions.surgery_run import distinct, measure_interventions, surgery_plan
from ...engine.interventions.transitions import block_transitions
from ...errors import DatasetError, short, spelled
from ...models.info import decoder_layers
from ...progress import note
from ...study.base import Study
from ...study.config import StudyConfig
from ...study.manifests import manifest, model_entry
from ...study.per_model import each_model
from ...study.registry import register_study
from ...study.result import StudyResult, make_table
from ...study.settings import ConfigError, Settings, check_count, check_n_bootstrap, parse_layers, setting
from .analysis import Groups, Options, analyse
from .claims import claims as study_claims
from .figures import figures as draw_figures
from .jobs import KINDS, default_max_k, surgery_jobs
from .report import headline_line
from .report import report as write_report

MIN_DRAWS, MAX_DRAWS = 20, 10_000
MIN_TEXTS = 3
"""Surgery's fewest texts (why: :data:`WHY_TEXTS`), in a --texts file and for --max-texts; its own, not the atlas's."""
WHY_TEXTS = ("each block's cost is a mean over the texts, with a bootstrap interval and a sign-flip p over them, "
             "and the split-half check needs texts in both halves")
MAX_TEXTS = 1_000_000
DEFAULT_TEXTS = 12
"""Default subset of the texts (seeded): sized so the whole default study on SmolLM2 runs in about 2.5 minutes on
a 2-core CPU with prefix reuse, and the suite of seven (before the probe study) within 15."""


@dataclass(frozen=True)
class SurgerySettings(Settings):
    texts: str | None = setting("Texts to score: a text file, one per line (blank lines and '# ' lines skipped), "
                                "or a languages .json file (per-language and low- vs high-resource rows); default: "
                                "the bundled pair statements and prompts.", file=True)
    max_texts: int = setting("Score a seeded random subset of this many texts (spread evenly over the languages of "
                             "a languages file); each intervention is one pass over them.", default=DEFAULT_TEXTS)
    interventions: str = setting("Which interventions: any of skip, repeat, swap, prune, comma-separated.",
                                 default="skip,repeat,swap,prune")
    max_k: int | None = setting("Prune k = 1..max_k blocks at once: at most the model's number of blocks minus one "
                                "(one block must stay). A larger value is refused, naming the model's blocks, as the "
                                "model loads and before any pass over the texts, rather than cut down. Each k costs "
                                "2 + --random-draws passes. Default: a quarter of the blocks.")
    random_draws: int = setting(f"Random k-block sets per k, the pruning rules' control (at least {MIN_DRAWS}).",
                                default=MIN_DRAWS)
    boundaries: str | None = setting("Phase boundaries to test causally, as hidden-state layers like '2,19' (e.g. "
                                     "the atlas's consensus); the block influence change points and the thirds are "
                                     "always tested.")
    prefix_reuse: bool = setting("Start each intervention's pass at the first block it touches, from the residual "
                                 "stream the intact pass kept there (same numbers, less compute).", default=True)
    n_bootstrap: int = setting("Bootstrap resamples of the texts for each interval.", default=2000)
    n_permutations: int = setting("Permutations (sign flips, placements, group labels) for each p.", default=2000)

    def __post_init__(self):
        super().__post_init__()
        check_count(self.max_texts, "--max-texts", MIN_TEXTS, MAX_TEXTS, "each text is scored once per intervention")
        check_count(self.random_draws, "--random-draws", MIN_DRAWS, MAX_DRAWS, "each draw is a forward pass")
        if self.max_k is not None:
            check_count(self.max_k, "--max-k", 1, 4096, "each k is 2 + --random-draws passes")
        check_n_bootstrap(self.n_bootstrap)
        check_count(self.n_permutations, "--n-permutations", 100, 100_000, "p needs at least 100 permutations")
        kinds = [k.strip() for k in str(self.interventions).split(",") if k.strip()]
        bad = [k for k in kinds if k not in KINDS]
        if bad or not kinds:
            raise ConfigError(f"--interventions {short(str(self.interventions))}: use any of {', '.join(KINDS)}, "
                              "comma-separated")
        object.__setattr__(self, "interventions", ",".join(k for k in KINDS if k in kinds))
        if self.boundaries is not None:
            parsed = parse_layers(str(self.boundaries))
            if not isinstance(parsed, list):
                raise ConfigError(f"--boundaries {short(str(self.boundaries))}: give hidden-state layers like '2,19'")
            object.__setattr__(self, "boundaries", ",".join(map(str, parsed)))


def pick_texts(config: StudyConfig) -> tuple[list[str], Groups | None, dict]:
    """The seeded subset of ``--texts``: (texts, their language groups or None, the dataset entry)."""
    rng = np.random.default_rng(config.seed)
    path = config.texts
    if path is not None and str(path).lower().endswith(".json"):
        langs = load_languages(path)
        per_lang = {lang.code: list(rng.permutation(len(lang.texts))) for lang in langs.languages}
        picked: list[tuple[str, int]] = []
        while len(picked) < config.max_texts and any(per_lang.values()):
            for code, order in per_lang.items():
                if order and len(picked) < config.max_texts:
                    picked.append((code, int(order.pop(0))))
        by_code = {lang.code: lang for lang in langs.languages}
        picked.sort(key=lambda x: ([lang.code for lang in langs.languages].index(x[0]), x[1]))
        texts = [by_code[code].texts[i] for code, i in picked]
        groups = Groups(lang=np.array([code for code, _ in picked]),
                        low=np.array([by_code[code].resource == "low" for code, _ in picked]))
        available = sum(len(lang.texts) for lang in langs.languages)
        check_enough(path, available, f"give at least {MIN_TEXTS} texts across the languages of {path}")
        return texts, groups, {"kind": "languages", "source": langs.source, "hash": langs.hash,
                               "n_texts": len(texts), "n_available": available}
    if path is None:
        loaded = load_texts()  # the bundled pair statements and prompts
    else:  # read here, not by load_texts: its count check and message are the atlas's
        loaded = TextSet(texts=load_prompts(path, option="--texts", purpose="surgery", minimum=0).texts,
                         source=str(path))
        check_enough(path, len(loaded.texts), f"give at least {MIN_TEXTS} lines in {path}, one text per line "
                     "(blank lines and '#' lines are skipped)")
    n = min(config.max_texts, len(loaded.texts))
    index = sorted(int(i) for i in rng.choice(len(loaded.texts), size=n, replace=False))
    return [loaded.texts[i] for i in index], None, {"kind": "texts", "source": loaded.source, "hash": loaded.hash,
                                                   "n_texts": n, "n_available": len(loaded.texts)}


def check_enough(path, n: int, fix: str) -> None:
    """:class:`DatasetError` naming ``path``, its ``n`` texts, what surgery needs and ``fix`` when n < MIN_TEXTS."""
    if n < MIN_TEXTS:
        raise DatasetError(f"{path}: {n} text(s); surgery needs at least {MIN_TEXTS}: {WHY_TEXTS}; {fix}")


def check_max_k(max_k: int | None, model: str, n_layers: int) -> None:
    """:class:`ConfigError` when ``max_k`` is more blocks than a model of ``n_layers`` can lose at once (all but
    one); called as each model loads, before its first forward pass."""
    if max_k is not None and max_k > n_layers - 1:
        raise ConfigError(f"{spelled(f'--max-k {max_k}', f'max_k={max_k}')} is more blocks than {model} can lose: "
                          f"it has {n_layers} decoder blocks and pruning keeps at least one, so use "
                          f"{spelled('--max-k', 'max_k')} from 1 to {n_layers - 1} (or leave it out for a quarter "
                          f"of the blocks, {default_max_k(n_layers)})")


COMPARE_FACTOR = 1.5
"""A pass's cost beyond its blocks, in unembeddings: the unembedding plus the comparison's log-softmax, KL and
argmax over the vocabulary (about half as much again on SmolLM2 on a CPU): the time estimate's head."""


def head_cost(lm) -> float:
    """The unembedding's cost in decoder blocks (its weights over one block's): the compute bound's head."""
    block = sum(p.numel() for p in decoder_layers(lm.model)[0].parameters())
    return lm.info.vocab_size * lm.info.hidden_size / max(1, block)


@register_study
class Surgery(Study):
    name = "surgery"
    title = "Surgery"
    question = ("Which decoder blocks does the model need (skip, repeat, swap, prune, with statistics), does the "
                "geometry (block influence, angular distance, phase boundaries) predict it, and does layer pruning "
                "by geometry beat random?")
    Settings = SurgerySettings
    order = 70
    verdict_metrics = ("delta_nll",)

    def check_inputs(self, config: StudyConfig) -> None:
        pick_texts(config)

    def main_view(self, config: StudyConfig) -> dict:
        return {"intervention": "skip", "lang": "all"}

    def run(self, config: StudyConfig) -> StudyResult:
        texts, groups, dataset = pick_texts(config)
        kinds = tuple(config.interventions.split(","))
        given = [int(b) for b in config.boundaries.split(",")] if config.boundaries else None
        options = Options(config.n_bootstrap, config.n_permutations, config.seed, config.ci_level)
        timings: dict[str, float] = {}
        summaries, rows, models = {}, [], []
        for run in each_model(config, timings):
            lm, n_layers = run.lm, run.info.n_layers
            if given and any(not 0 <= b <= n_layers for b in given):
                raise ConfigError(f"--boundaries {config.boundaries}: {run.info.name} has hidden states 0..{n_layers}")
            if n_layers < 2:
                raise ConfigError(f"{run.info.name} has {n_layers} decoder block; surgery needs at least 2")
            check_max_k(config.max_k, run.info.name, n_layers)
            start = time.perf_counter()
            transitions = block_transitions(lm, texts, batch_size=config.batch_size, max_length=config.max_length)
            one_pass = time.perf_counter() - start
            run.mark("geometry_s")
            jobs = surgery_jobs(n_layers, kinds, transitions, config.max_k or default_max_k(n_layers),
                                config.random_draws, config.seed)
            unique = distinct(jobs.all())
            plan = surgery_plan(n_layers, unique, config.prefix_reuse)
            head = head_cost(lm)
            estimate = one_pass * plan.cost([1.0] * n_layers, COMPARE_FACTOR * head) / (n_layers + head)
            note(f"surgery {run.info.name}: {len(plan.passes)} passes over {len(texts)} texts ({len(jobs.all())} "
                 f"interventions, {len(unique)} distinct; {plan.layers_run()} of {len(plan.passes) * n_layers} block "
                 f"runs with prefix reuse {'on' if config.prefix_reuse else 'off'}); about {estimate / 60:.1f} min")
            measures = measure_interventions(lm, texts, jobs.all(), batch_size=config.batch_size,
                                             max_length=config.max_length, prefix_reuse=config.prefix_reuse)
            run.mark("passes_s")
            info = run.release()
            model_rows, summary = analyse(info.name, n_layers, measures, transitions, jobs, groups, given, options)
            summary["compute_bound"] = (surgery_plan(n_layers, unique, False).cost([1.0] * n_layers, head)
                                        / plan.cost([1.0] * n_layers, head))
            summary["estimate_s"] = estimate
            summaries[info.name] = summary
            rows += model_rows
            models.append(model_entry(info))
            run.mark("analysis_s")
        record = manifest(config, models, dataset, timings)
        return StudyResult(study=self.name, config=config.to_dict(), manifest=record,
                           summary={"models": summaries, "warnings": []}, table=make_table(rows))

    figures = staticmethod(draw_figures)
    report = staticmethod(write_report)
    verdicts = staticmethod(study_claims)

    def headline(self, result: StudyResult) -> list[str]:
        """One line per model: the critical blocks, whether block influence predicts the skip cost, and the
        pruning rules against random."""
        return [headline_line(model, s) for model, s in result.summary["models"].items()]

    def numbers(self, result: StudyResult, model: str) -> dict[str, float]:
        """Interior critical blocks (count), the first and last block's skip cost, block influence's Spearman rho
        with the skip cost, and the edge-swap effect."""
        s = result.summary["models"][model]
        nan = float("nan")
        return {"critical_interior": float(len(s["critical"]["interior"])) if "critical" in s else nan,
                "first_skip_cost": s["critical"]["first_cost"] if "critical" in s else nan,
                "last_skip_cost": s["critical"]["last_cost"] if "critical" in s else nan,
                "influence_rho": s["geometry"]["block_influence"]["rho"] if "geometry" in s else nan,
                "edge_swap_effect": s.get("swap", {}).get("edge_effect", nan)}
