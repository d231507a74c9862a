# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Tutorial: your first hour
#
# One notebook, top to bottom: load SmolLM2, run one study and read its verdict table and figure, look at
# the logit lens's layer x position grid, and fit one probe. Every cell runs offline on a laptop CPU.
#
# **On the documentation site this page shows the code without its outputs.** Run it from the repository
# root (after `make setup`) to get them:
#
# ```sh
# .venv/bin/jupytext --to ipynb --execute --run-path . docs/tutorial.py -o runs/tutorial.ipynb
# ```
#
# That writes `runs/tutorial.ipynb` with every table and figure (about a minute on a 2-core CPU); open it
# in Jupyter or VS Code. `docs/tutorial.py` ([download](tutorial.py)) is a plain-text notebook in
# [jupytext](https://jupytext.readthedocs.io)'s percent format: Jupyter with jupytext opens it as a notebook,
# and any editor shows it as Python. The test suite runs it the same way, in a Jupyter kernel
# (`tests/integration/test_tutorial_notebook.py`), so it does not rot.
#
# **Bounded run.** To stay fast, the study here reads 4 of the 22 pairs in each of the 7 bundled categories
# and draws 200 permutations instead of 10,000, and the probe draws 50 permutations and 200 bootstrap
# resamples. Its numbers are a demonstration, not a finding: the full run is
# `layerscope run divergence --out runs/divergence` (about 20 s on 2 cores), and the full probe study
# `layerscope run probe` (about 6 minutes).

# %%
import json
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

import layerscope as ls

out = Path("runs/tutorial")  # everything this notebook writes goes here (runs/ is git-ignored)
out.mkdir(parents=True, exist_ok=True)

# %% [markdown]
# ## 1. Load the model
#
# `smollm2-135m` is SmolLM2-135M-Instruct, shipped as a Q4_1 GGUF file in a Python package and
# dequantized to float32 once into layerscope's model cache: nothing is downloaded. `load_model` also
# takes a local folder, a `.gguf` file or a Hugging Face id.

# %%
lm = ls.load_model("smollm2-135m")
lm.info  # layers, hidden size, whether the tokenizer adds a BOS token, the weights' hash

# %% [markdown]
# ## 2. One study: divergence
#
# The bundled data are statement pairs: one fact in two framings (A and B), in 7 categories such as
# hedged vs assertive or active vs passive. The **divergence** study asks, per layer: does the geometry of
# the A statements against the B statements (their uniformity asymmetry, UA) go with the model's own output
# preference between them (mean NLL of B minus A)? Its r is a correlation over the 7 category means.
#
# A study reads its pairs from a file, so we write the bounded subset (the first 4 pairs of each category)
# to one.

# %%
pairs = ls.load_pairs()  # the bundled pairs
subset = {c.name: {"pairs": [list(p) for p in c.pairs[:4]]} for c in pairs.categories}
(out / "pairs.json").write_text(json.dumps(subset, indent=1))

config = ls.StudyConfig(study="divergence", models=[lm], dataset=str(out / "pairs.json"), n_permutations=200)
result = ls.run_study(config)

# %% [markdown]
# A result shows itself as its section of the HTML report: first the **verdict table** (each claim, its
# status, the key number and the checks that could flip it), then the verdict lines, the warnings, the
# figure (r per layer and pooling) and the report.

# %%
result

# %% [markdown]
# Behind the page is a tidy table, one row per number. Here is r(UA, preference) with mean pooling at
# every layer, with its Fisher-z interval, permutation p and Benjamini-Hochberg q over layers:

# %%
r = result.table.query("metric == 'r_ua_pref' and pooling == 'mean' and subset == 'all'")
r[["layer", "value", "ci_lo", "ci_hi", "p_perm", "q"]].round(3)

# %% [markdown]
# `result.write(folder)` writes what `layerscope run` writes: `index.html` (the page above, self-contained),
# `table.csv`, `result.json` (with the manifest: model hash, data hash, versions, timings), `report.md` and
# the figure. `force=True` replaces a folder only if layerscope wrote it.

# %%
folder = result.write(out / "divergence", force=True)
sorted(p.name for p in folder.iterdir())

# %% [markdown]
# ## 3. The logit lens
#
# Read every layer's hidden state through the model's final norm and unembedding: what would the model
# predict next if it stopped there? Rows are layers (0 = the embeddings; the last row is the model's own
# output), columns the positions of the prompt; each cell is the top-1 next-token guess and its
# probability.

# %%
grid = ls.lens(lm, "The capital of France is", top_k=1)
grid

# %% [markdown]
# `grid` is a pandas DataFrame (`layer, position, input_token, rank, token, token_id, prob`);
# `grid.top1()` is the token grid as a frame and `print(grid.grid())` as text. The same from the shell:
# `layerscope lens --model smollm2-135m "The capital of France is"`.
#
# The **tuned lens** (Belrose et al. 2023) replaces the shared unembedding with one affine translator per
# layer, trained to match the model's final distribution. Training SmolLM2's takes about 3 minutes on 2 cores,
# so it is not run here:
#
# ```sh
# layerscope train-lens --model smollm2-135m --out runs/lens     # once
# ```
#
# then `ls.lens(lm, "The capital of France is", lens=ls.TunedLens.load("runs/lens", lm))` reads through it.

# %% [markdown]
# ## 4. One probe
#
# Is "A framing or B framing" linearly decodable from a layer's hidden state? `ls.extract` runs the texts
# through the model once and keeps every layer's pooled vectors in the activation cache; the study above
# already extracted these texts, so this call reads them back from the cache. `ls.probe` fits a
# cross-validated probe per hidden state (a pair's two statements are never split across folds) with a
# permutation p per state and Benjamini-Hochberg q over states.

# %%
texts = ls.load_pairs(out / "pairs.json").texts()  # [a0, b0, a1, b1, ...]
acts = ls.extract(lm, texts)
side = ["A", "B"] * (len(texts) // 2)
pair = [i // 2 for i in range(len(texts))]
prof = ls.probe(acts, side, groups=pair, method="mass_mean", n_permutations=50, n_bootstrap=200)

states = np.arange(len(prof.accuracy))
fig, ax = plt.subplots(figsize=(7, 3))
ax.plot(states, prof.accuracy, marker="o", ms=3, label="mass-mean probe (out of fold)")
ax.fill_between(states, prof.accuracy_ci[:, 0], prof.accuracy_ci[:, 1], alpha=0.2)
ax.axhline(prof.chance, color="grey", ls=":", label="chance")
ax.plot(states[prof.decodable], prof.accuracy[prof.decodable], "o", mfc="none", ms=8, color="k",
        label="decodable (q < 0.05, beats state 0)")
ax.set(xlabel="hidden state (0 = embeddings)", ylabel="accuracy", ylim=(0, 1.05),
       title=f"A vs B framing, {prof.n_groups} pairs")
ax.legend(fontsize=8, loc="lower right")
plt.show()
print("decodable from state:", prof.decodable_from)

# %% [markdown]
# A state is *decodable* when its probe's q is below 0.05 and the paired bootstrap interval of its gain over
# the state-0 probe (the embeddings: what the tokens alone give) lies above 0; `decodable_from` is the first
# state from which every later state is (None: no such state). Read it with care: pooled over categories,
# "A" is a mixture of contrasts (assertive, active, concrete, ...) that no single direction need separate,
# and 28 pairs give a wide interval. The **probe** study tests each category's contrast alone, with every
# pair, against a bag-of-tokens reader and a control task, and then asks whether the model *uses* the
# direction: removing it from the residual stream and steering along it, against null directions.
# `layerscope run probe` runs it on the bundled pairs.
#
# ## Where next
#
# - The command line, the whole suite and config files: *The command line* (`docs/cli.md`).
# - Each study's question, method and options: *Studies* (`docs/studies/`).
# - What the statistics and verdicts mean: *Statistics and verdicts* (`docs/statistics.md`).
# - Everything `import layerscope as ls` offers: *Python and notebooks* and the *API reference*.
