"""The probe report's conventions section: what every number means (the docs page says the same at length)."""

from __future__ import annotations

CONVENTIONS = """\
## Conventions

- **States.** State 0 is the embeddings' output (the stream entering block 0); state s is block s-1's output;
  state L is the last block's output before the final norm (not transformers' last hidden state). Probes,
  removal and steering read and edit the same states.
- **Vectors.** Each text's pooled vector per state (`--pooling`, default `mean_no_pos0`: every token but position
  0, which holds the attention sink on a model without a BOS and a BOS otherwise). From the activation cache.
- **Label sets.** `side:<category>`: one category's pairs, one contrast, probed and tested causally. `side`: every
  category pooled, a mixture of contrasts, probed only, with leave-one-category-out transfer (fit on the other
  categories, test on one: `transfer_accuracy` rows under `side:<category>`). `category`, `language`, a labels file.
- **Probes.** Grouped k-fold cross-validation (a pair never split). `logreg`: standardised features, L2 logistic
  regression, C by an inner grouped cross-validation of each training fold. `mass_mean`: the difference of class
  means with the threshold at the midpoint. Accuracy and AUROC of the out-of-fold predictions, percentile intervals
  over resampled groups, a permutation p per state and BH q over states; q has a floor of 1/(n + 1) at n
  permutations, and the report names the states where it sits on it.
- **Shallow readers.** A bag of tokens plus length (logistic, the same folds) and the state-0 probe; the gain over
  the better of the two, with its paired group-bootstrap interval. **Decodable** at a state: q < 0.05 and the gain's
  interval above 0. **Decodable from s**: every state from s on is decodable. The plateau (accuracy within the best
  state's interval from a state on) is reported beside it.
- **Control task** (Hewitt & Liang 2019): random labels keyed to a unit that recurs across train and test (the
  first token where a text parts from its pair partner; else its first token), with the task's class shares,
  averaged over `--control-seeds` seeds; a probe can score on it only by memorising the unit. Selectivity = accuracy
  - control accuracy. Where the unit recurs for fewer than half the texts, no selectivity is printed.
- **Causal tests** (every contrast: two classes). Per contrast, a seeded half of the pairs (groups) is held out,
  both classes on both sides; the directions are fitted on the rest and every test is measured on the held-out
  ones. u = v_s / |v_s| with v_s the mean of h_A - h_B over the training pairs (mass-mean); the logistic direction
  is the probe's weights mapped back to the residual space. Edits leave position 0 alone (`--include-pos0` edits it).
- **The preference.** pref = log p(A's tokens) - log p(B's tokens), summed over the tokens after the pair's shared
  start (the shared prefix cancels): the log-odds of the differing part, in nats. An effect is the mean over
  held-out pairs of pref(edited) - pref(intact); positive: towards A.
- **Removal.** h - (h.u)u at every position but position 0 (`--erasure leace`: the LEACE eraser). Damage = the
  mean over a pair's two texts of the increase of their summed NLL (their own continuations): removing a contrast
  the model uses takes A-ness out of A's text and B-ness out of B's, so both lose probability, while the preference
  change (reported too) has no predicted sign. **Needed** at s: damage beyond the null's on the same pairs.
- **Interchange.** The component along u set to the other side's training mean. `nie` = -mean(sign(pref) x pref
  change) / mean(2 |pref|): 0.5 closes the intact preference, 1 reverses it.
- **Steering.** h + alpha r_s u at every position but position 0, r_s the mean per-token residual norm at s over the
  training texts. S(alpha) = (E(+alpha) - E(-alpha)) / 2 (the part that reverses with the push's sign) and damage
  D(alpha) = (E(+alpha) + E(-alpha)) / 2; the slope of S over alpha; the share of pairs S moves the wrong way.
  **Steerable** at s: S at the tested alpha beyond the null's. The logistic direction is pushed at the tested alpha.
- **Null directions.** The mean of the training pairs' differences with random signs (a random relabelling), the
  component along u taken out, unit length: directions from the residual stream's own distribution. Removed and
  pushed (at +-the tested alpha) like u. A null direction's sign is arbitrary, so its S is oriented the way it
  moves the preference: steering must beat the null directions at their best, not on average over signs.
- **Tests.** Per pair: the effect less the null directions' mean effect on that pair; one-sided (the predicted
  direction) sign-flip p over pairs, BH over the states tested; `min_detectable`: the smallest mean effect the test
  finds with 80 % power at level 0.05 ((t_0.95 + t_0.8) sd / sqrt(n)). Where nothing is significant the report
  says "no effect above the null detected" with that size, never "not used".
- **Checks** beside each causal verdict that holds, at its best state: the direction from `mean` pooling with
  position 0 edited too (2 null directions measured anew, edited there as well); from `mean_no_massive` pooling
  (the main run's null); for steering the logistic direction and the dose-response (slope above 0). Beside
  "decodable": the logistic probe on `mean` and `mean_no_massive` (C as chosen on the main pooling), the mass-mean
  probe and the control task. A check can only flip a verdict that holds, so none runs where nothing does.
- **Same units as surgery.** `skip` rows: block s-1 skipped, the preference change and damage on the same held-out
  pairs. In a suite, the figure's last panel also draws divergence's UA and surgery's own skip cost.
"""
