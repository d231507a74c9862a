"""``layerscope lens PROMPT``: one prompt through the logit lens, every layer's top-1 next token printed as a grid.

    layerscope lens "The capital of France is" --model smollm2-135m
    layerscope lens "The capital of France is" --top-k 10 --out lens/     # lens.csv, lens.png, lens.svg
    layerscope lens --texts prompts.txt --out lens/                        # lens.csv (+ text, prompt_index), lens-1.png

Rows are layers 0 (embeddings) .. n_layers (the model's own output), columns the input tokens; a cell is the token
the lens ranks first after that input token (a space shown as ``·``, newlines as ``\\n``, long tokens cut).

With ``--texts`` the prompts are keyed by their order in the file (blank and # lines not counted), not by their text:
a prompt that repeats is read again, as its own "text N" grid and lens-N.png, and lens.csv's ``prompt_index`` column
(N - 1, from 0) tells its rows apart.
"""

from __future__ import annotations

import time
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from ..errors import FORCE, OUT, DatasetError, OutputError
from ..models import DEFAULT_MODEL
from ..terminal import say
from .app import app, setup_logging, user_errors
from .extract import MODEL_HELP, DType

if TYPE_CHECKING:
    from ..engine.lenses.prompt import LensTable

TITLE_CHARS = 80
"""The most characters of a prompt a figure's title quotes."""


@app.command("lens")
@user_errors
def lens_command(
    prompt: str = typer.Argument(None, metavar="PROMPT", help="The text to read through the lens (or use --texts)."),
    model: str = typer.Option(DEFAULT_MODEL, "--model", "-m", help=MODEL_HELP),
    top_k: int = typer.Option(5, "--top-k", help="Guesses kept per layer and position in lens.csv (the grid "
                              "shows the first)."),
    texts: Path = typer.Option(None, "--texts", help="A text file of prompts, one per line (blank lines and lines "
                               "starting with # skipped), instead of PROMPT. Each line is its own prompt, so a "
                               "prompt that repeats is read once per line."),
    out: Path = typer.Option(None, "--out", "-o", help="Folder to write lens.csv, lens.png and lens.svg into "
                             "(with --texts: lens-1.png, lens-1.svg, ... for the prompts in file order, and "
                             "lens.csv's text and prompt_index columns, prompt_index 0 for lens-1). Default: "
                             "print only."),
    force: bool = typer.Option(False, "--force", help="Replace lens files already in --out."),
    dtype: DType = typer.Option(DType.auto, "--dtype", help="One dtype for every parameter. "
                                "Default: bfloat16 on CUDA, float32 on CPU."),
    device: str = typer.Option(None, "--device", help="cpu, cuda or cuda:N. Default: cuda if present, else cpu."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log progress details to stderr."),
    tuned: str = typer.Option(None, "--tuned", help="Read through a tuned lens instead: its folder (config.json "
                              "and params.pt, as train-lens or the tuned-lens package write them), or 'auto' for "
                              "the lens train-lens trained for this model with its defaults."),
) -> None:
    """Read PROMPT through the model's final norm and head at every layer (the logit lens, as the atlas; with
    --tuned, the tuned lens) and print the layer x position grid of top-1 next tokens; with --out, also a CSV of the
    top-k and a heat map."""
    from ..engine.lenses.prompt import check_top_k, lens
    from ..models import load_model

    setup_logging(verbose)
    prompts = read_prompts(prompt, texts)
    check_top_k(top_k)
    targets = out_files(out, len(prompts) if texts else None, force, [p for p in (texts, model) if p]) if out else []
    lm = load_model(model, dtype=dtype.value, device=device)
    translators = load_tuned(tuned, lm) if tuned is not None else None
    table = lens(lm, prompts if texts is not None else prompts[0], top_k=top_k, lens=translators)
    which = "logit lens" if translators is None else "tuned lens"
    say(f"{which} of {lm.info.name}: the top-1 next token at each layer (rows; {lm.info.n_layers} = "
               "the model's output) after each input token (columns); · = space")
    for i, (key, text) in enumerate(zip(table.prompt_indices(), table.texts(), strict=True)):
        if key is not None:
            say(f"\ntext {i + 1}: {text}")
        say(table.grid(key))
    if out:
        from ..io import worded_writes

        with worded_writes(out):  # a full disk, a file-size limit, a read-only folder...: one error naming --out
            write_files(table, targets, lm.info.name, prompts)
        say(f"\nwrote {', '.join(str(p) for p in targets)}")


def load_tuned(tuned: str, lm):
    """The tuned lens of ``--tuned``: a folder, or ``auto`` (the cached lens of train-lens's defaults)."""
    from ..engine.lenses.tuned_cache import resolve_lens

    return resolve_lens(tuned, lm)[0]


class Init(StrEnum):
    lstsq = "lstsq"
    zeros = "zeros"


class Optimizer(StrEnum):
    adam = "adam"
    sgd = "sgd"


class HeadDType(StrEnum):
    auto = "auto"
    float32 = "float32"
    bfloat16 = "bfloat16"


@app.command("train-lens")
@user_errors
def train_lens_command(
    model: str = typer.Option(DEFAULT_MODEL, "--model", "-m", help=MODEL_HELP),
    corpus: Path = typer.Option(None, "--corpus", help="Texts to train on: a text file, one per line (blank and # "
                                "lines skipped), or a languages .json file. Default: the bundled texts and one "
                                "text the model writes from each (seeded), a pair's statements and each sample's "
                                "source kept on one side of the held-out split."),
    steps: int = typer.Option(40, "--steps", help="KL steps after the start (Adam by default)."),
    tokens_per_step: int = typer.Option(512, "--tokens-per-step", help="Scored tokens (rows) each step draws "
                                        "from the cached training rows. Belrose et al. take 262144 (2^18) per "
                                        "step for 250 steps: a GPU runs that budget."),
    max_tokens: int = typer.Option(None, "--max-tokens", help="Most training tokens kept from the corpus (their "
                                   "hidden states are held in memory: (layers + 2) x tokens x width numbers). "
                                   "Default: all."),
    batch_size: int = typer.Option(None, "--batch-size", help="Texts per step instead of --tokens-per-step "
                                   "(layerscope 0.2's recipe drew 8)."),
    init: Init = typer.Option(Init.lstsq, "--init", help="lstsq: start each translator at the ridge "
                              "least-squares map to the last block's output (Din et al. 2023); zeros: start at "
                              "the logit lens."),
    optimizer: Optimizer = typer.Option(Optimizer.adam, "--optimizer", help="adam (lr 1e-4) or sgd (Belrose et "
                                        "al.'s SGD with Nesterov momentum 0.9, lr 0.1, weight decay 1e-3); both "
                                        "clip the gradient norm at 1 and decay linearly to 0."),
    lr: float = typer.Option(None, "--lr", help="Learning rate. Default: the optimiser's."),
    full_vocab: bool = typer.Option(False, "--full-vocab", help="Read the KL's normaliser on the whole "
                                    "vocabulary in every step instead of a shortlist (each step's top tokens and "
                                    "2048 sampled negatives, log-Q corrected). The evaluation always reads the "
                                    "whole vocabulary."),
    head_dtype: HeadDType = typer.Option(HeadDType.auto, "--head-dtype", help="The head's matrix products while "
                                         "training: auto = bfloat16 where the processor has it natively, else "
                                         "float32 (the loss and the evaluation are float32)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the held-out split, the batches, the negatives and the "
                             "model's samples."),
    out: Path = typer.Option(None, "--out", "-o", help="Folder for config.json and params.pt (the tuned-lens "
                             "package's format). Default: the cache, keyed by the model's weights and these "
                             "settings, where --tuned auto finds it."),
    force: bool = typer.Option(False, "--force", help="Train again even when the folder holds a lens."),
    dtype: DType = typer.Option(DType.auto, "--dtype", help="One dtype for every parameter. "
                                "Default: bfloat16 on CUDA, float32 on CPU."),
    device: str = typer.Option(None, "--device", help="cpu, cuda or cuda:N. Default: cuda if present, else cpu."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log progress details to stderr."),
) -> None:
    """Train a tuned lens (Belrose et al. 2023): one affine translator per hidden state, fitted to the model's own
    final distribution. One forward pass caches every state's rows; each translator starts at a least-squares map
    (Din et al. 2023), then 40 Adam steps of 512 tokens minimise the KL. Texts are held out by group, and only
    positions whose prefix starts no training text are scored: held-out and in-sample KL per state are printed and
    kept in config.json with the budget (tokens per step, token-draws, distinct tokens; the paper: 2^18 tokens per
    step)."""
    started = time.perf_counter()
    from ..engine.lenses.tuned_cache import lens_folder, trained_lens
    from ..engine.lenses.tuned_train import check_settings
    from ..models import load_model

    setup_logging(verbose)
    train = {"steps": steps, "tokens_per_step": None if batch_size is not None else tokens_per_step,
             "batch_size": batch_size, "max_tokens": max_tokens, "init": init.value, "optimizer": optimizer.value,
             "lr": lr, "head_dtype": head_dtype.value, "seed": seed, "shortlist": False if full_vocab else None}
    check_settings(**{k: v for k, v in train.items() if k not in ("lr", "head_dtype", "seed", "shortlist")})
    texts = read_corpus(corpus) if corpus is not None else None
    if out is not None and out.exists() and not out.is_dir():
        raise OutputError(f"output path {out} exists and is not a folder; choose another {OUT}")
    if out is not None and out.is_dir() and any(out.iterdir()) and not (out / "config.json").is_file():
        raise OutputError(f"{out} holds other files; choose an empty or new {OUT}")
    lm = load_model(model, dtype=dtype.value, device=device)
    train = {k: v for k, v in train.items() if v is not None}
    target = lens_folder(lm, texts, out, **train)
    if force or not (target / "config.json").is_file():  # a lens will be written: make sure it can be
        check_writable(target, force)
    lens, folder, fresh = trained_lens(lm, texts, str(corpus) if corpus is not None else None, force=force,
                                       out=out, started=started, **train)
    say(f"{'trained' if fresh else 'found'} the tuned lens of {lm.info.name} in {folder}")
    record = lens.record
    budget = record.get("tokens") or {}
    if budget:
        say(f"budget: {record.get('steps')} steps, {budget['token_draws']:,} token-draws over "
                   f"{budget['train_rows']:,} training tokens ({budget['distinct_train_rows']:,} distinct); "
                   f"Belrose et al.: {budget['paper_tokens_per_step']:,} tokens per step, "
                   f"{budget['paper_token_draws']:,} token-draws")
    evaluation = record.get("heldout") or {}
    held = evaluation.get("metrics")
    inside = (record.get("in_sample") or {}).get("metrics")
    if held and fresh:
        write_comparison(folder / "lens_eval.png", evaluation, lm.info.name)
    if held:
        say(f"bits per token; held out: {evaluation['tokens']:,} tokens of {evaluation['texts']} texts "
                   "whose prefixes no training text starts with; in sample: training tokens")
        say("state  KL logit  KL tuned  KL tuned   CE logit  CE tuned\n"
                   "       held out  held out  in sample  held out  held out")
        for state in range(len(held["tuned_kl"])):
            row = (held["logit_kl"][state], held["tuned_kl"][state],
                   inside["tuned_kl"][state] if inside else float("nan"), held["logit_ce"][state],
                   held["tuned_ce"][state])
            say(f"{state:>5}  " + "  ".join(f"{v:8.3f}" for v in row))


MIN_CORPUS_TEXTS = 2
"""A tuned lens's corpus needs this many texts: at least one to train on and one held out to score it."""


def read_corpus(corpus: Path) -> list[str]:
    """The texts of ``--corpus``: a text file (one per line, blank and # lines skipped) or a languages .json file;
    :class:`DatasetError` naming the file when it holds fewer than :data:`MIN_CORPUS_TEXTS`."""
    from ..data.languages import load_languages
    from ..data.prompts import load_prompts

    if corpus.suffix.lower() == ".json":
        texts = [text for _lang, _i, text in load_languages(corpus).texts()]
    else:
        texts = list(load_prompts(corpus, option="--corpus", purpose="train-lens", minimum=0).texts)
    if len(texts) < MIN_CORPUS_TEXTS:
        raise DatasetError(f"--corpus {corpus} holds {len(texts)} text(s); a tuned lens needs at least "
                           f"{MIN_CORPUS_TEXTS} (one to train on, one held out to score it): add texts, one per line")
    return texts


def check_writable(folder: Path, force: bool) -> None:
    """:class:`OutputError` naming ``folder`` when a lens cannot be written there (checked before training, so
    no time is spent on a lens that cannot be kept); a probe file is written and removed."""
    import tempfile

    probe_root = folder
    while not probe_root.exists():
        probe_root = probe_root.parent
    try:
        if not probe_root.is_dir():
            raise OSError(f"{probe_root} is not a folder")
        with tempfile.NamedTemporaryFile(dir=probe_root, prefix=".layerscope-probe-"):
            pass
    except OSError as exc:
        raise OutputError(f"cannot write the lens into {folder} ({exc.strerror or exc}); choose a writable "
                          f"{OUT}") from None


def write_comparison(path: Path, evaluation: dict, model: str) -> None:
    """The held-out comparison of both lenses (:func:`~layerscope.report.lens_figure.lens_comparison_figure`) as
    a PNG, written atomically."""
    from ..io import atomic_file
    from ..report.lens_figure import lens_comparison_figure, save_quietly

    fig = lens_comparison_figure(evaluation, title=f"{model}: held-out texts, logit lens vs tuned lens")
    with atomic_file(path) as f:
        save_quietly(fig, f, format="png", dpi=150)


def read_prompts(prompt: str | None, texts: Path | None) -> list[str]:
    """The prompt, or the prompts of the ``--texts`` file; :class:`DatasetError` for both, neither or none."""
    from ..data.prompts import load_prompts

    if (prompt is None) == (texts is None):
        raise DatasetError("give one PROMPT or --texts FILE" + (", not both" if prompt is not None else "") +
                           ', e.g. layerscope lens "The capital of France is"')
    if prompt is not None:
        if not prompt.strip():
            raise DatasetError("PROMPT is empty; give text for the model to read, e.g. \"The capital of France is\"")
        return [prompt]
    found = load_prompts(texts, option="--texts", purpose="the lens", minimum=0).texts
    if not found:
        raise DatasetError(f"{texts} holds no prompt (blank lines and # lines are skipped); put one prompt per line")
    return list(found)


def out_files(out: Path, n_prompts: int | None, force: bool, inputs: list) -> list[Path]:
    """The files ``--out`` gets: lens.csv, then lens.png and lens.svg for one PROMPT (``n_prompts`` None), or
    lens-1.png, lens-1.svg, ... for each of ``n_prompts`` prompts of a --texts file. :class:`OutputError` when
    ``out`` is a file, when one of them exists (without ``--force``) or when one is an input of the command."""
    if out.exists() and not out.is_dir():
        raise OutputError(f"output path {out} exists and is not a folder; choose another {OUT}")
    stems = ["lens"] if n_prompts is None else [f"lens-{i + 1}" for i in range(n_prompts)]
    targets = [out / "lens.csv", *(out / f"{stem}.{ext}" for stem in stems for ext in ("png", "svg"))]
    given = {Path(p).resolve() for p in inputs if Path(p).exists()}
    for path in targets:
        if path.resolve() in given:
            raise OutputError(f"will not replace {path}: it is an input of this command; choose another {OUT}")
        if path.exists() and not force:
            raise OutputError(f"{path} already exists; choose another {OUT}, or pass {FORCE} to replace the lens "
                              "files in it")
        if path.is_dir():
            raise OutputError(f"{path} is a folder; choose another {OUT}")
    return targets


def write_files(table: LensTable, targets: list[Path], model: str, prompts: list[str]) -> None:
    """lens.csv (with the ``text`` index and ``prompt_index`` column of a --texts run), then each prompt's heat map
    as PNG and SVG (SVG text kept as text), in :func:`out_files`'s order (by prompt_index, so a repeated prompt
    gets its own files), each file written atomically."""
    import matplotlib

    from ..engine.lenses.prompt import show_token
    from ..io import atomic_file
    from ..report.lens_figure import lens_figure, save_quietly

    several = table.index.name == "text"
    with atomic_file(targets[0], "w") as f:
        table.to_csv(f, index=several)
    for i, (key, prompt) in enumerate(zip(table.prompt_indices(), prompts, strict=True)):
        tokens = table.top1(key).map(show_token).to_numpy()
        inputs = [show_token(t) for t in table.input_tokens(key)]
        shown = " ".join("".join(ch if ch.isprintable() else " " for ch in prompt).split())
        title = f"{model}: {shown[:TITLE_CHARS]}{'…' if len(shown) > TITLE_CHARS else ''}"
        fig = lens_figure(table.top1(key, "prob").to_numpy(), tokens, inputs, title=title)
        png, svg = targets[1 + 2 * i], targets[2 + 2 * i]
        with atomic_file(png) as f:
            save_quietly(fig, f, format="png", dpi=150)
        with matplotlib.rc_context({"svg.fonttype": "none"}), atomic_file(svg) as f:
            save_quietly(fig, f, format="svg")
