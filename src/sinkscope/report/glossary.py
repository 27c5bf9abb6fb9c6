"""What every column header of the analyze, comparison and sweep pages means, in one place.

A header cell is a dict `{"text", "key", "definition", "section"}`: the template (`macros.html.j2: table`) shows
`text`, puts the definition in a hover title and links it to the page's "Definitions" list, whose entries name
the section of `docs/statistics.md` (or another document) that defines the number (so the link works in a page opened from disk).
`headers` refuses a column with no entry here, so a new column cannot reach a page without its definition.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

STATS = "docs/statistics.md § "
HEADS = STATS + "heads.parquet (one row per layer, head)"
LAYERS = STATS + "layers.parquet (one row per layer)"
TOKENS = STATS + "tokens.parquet and token_layers.parquet (key-token table: secondary sinks)"
SUMMARY = STATS + "run.json summary"
SWEEP = STATS + "sinkscope sweep (sweep.parquet, sweep.csv)"
WINDOWS = STATS + "Windows"
ABLATIONS = "docs/theory/geometry.md § Ablations"


@dataclass(frozen=True)
class Term:
    """One column: what it means in words, and the document and section that define it (mostly
    `docs/statistics.md`)."""

    definition: str
    section: str


TERMS: dict[str, Term] = {
    # runs, corpora, windows
    "run": Term("the run directory's name (hover the row for the full path)", WINDOWS),
    "model": Term("the model analysed: embedded name, directory name, GGUF file or hub id", SUMMARY),
    "corpus": Term("the corpus the windows were cut from", WINDOWS),
    "T": Term("window length in tokens, BOS included", WINDOWS),
    "seq_len": Term("window length T in tokens, BOS included", WINDOWS),
    "windows": Term("number of windows analysed (a short corpus gives fewer than --max-windows)", WINDOWS),
    "epsilon": Term("ε, the sink threshold: a head is a sink in a window when its sink score α exceeds ε", SUMMARY),
    "tokens/s": Term("tokens analysed per second of the forward passes (wall clock)", SUMMARY),
    "analyze_seconds": Term("wall-clock seconds of the cell's analysis", SWEEP),
    # run-level numbers
    "sink rate": Term("Gu et al.'s sink rate: fraction of (window, layer, head) whose sink score α = mean_t A[t,0] "
                      "exceeds ε", SUMMARY),  # fmt: skip
    "sink_rate": Term("fraction of (window, layer, head) whose sink score α exceeds ε (Gu et al. 2025)", SUMMARY),
    "of mean": Term("fraction of heads whose window-mean sink score exceeds ε (thresholds the mean instead of "
                    "each window)", SUMMARY),  # fmt: skip
    "sink_rate_of_mean": Term("fraction of heads whose window-mean sink score exceeds ε", SUMMARY),
    "mean sink": Term("mean over heads of the sink score α = mean_t A[t,0]: attention paid to BOS", SUMMARY),
    "mean_sink_score": Term("mean over heads of the sink score α = mean_t A[t,0]", SUMMARY),
    "mean diag": Term("mean over heads of the diagonal score mean_t A[t,t]: attention a token pays to itself",
                      SUMMARY),  # fmt: skip
    "mean_diag_score": Term("mean over heads of the diagonal score mean_t A[t,t]", SUMMARY),
    "MLP-like": Term("mean over layers of the fraction of tokens at which every head is hard-sink or hard-diagonal: "
                     "there the layer's attention passes each token through alone, like an MLP", LAYERS),  # fmt: skip
    "head classes": Term("number of heads per class: sink (α > ε), diagonal, previous-token, dense, mixed", HEADS),
    "Δ sink rate": Term("sink rate minus the first run's", SUMMARY),
    "Δ mean sink": Term("mean sink score minus the first run's", SUMMARY),
    "Δ mean diag": Term("mean diagonal score minus the first run's", SUMMARY),
    "class": Term("head class: first match of sink (α > ε), diagonal (diag > 0.5), previous-token (prev > 0.5), "
                  "dense (entropy > 0.7), else mixed", HEADS),  # fmt: skip
    # secondary sinks
    "token": Term("a token other than BOS, decoded alone (repr: spaces and newlines visible)", TOKENS),
    "id": Term("the token's id in the tokenizer's vocabulary", TOKENS),
    "n": Term("occurrences of the token at key positions 1..T-2", TOKENS),
    "received_mean": Term("mean attention the token receives from later tokens, over occurrences, layers and heads",
                          TOKENS),  # fmt: skip
    "sink_frac": Term("fraction of (occurrence, layer, head) in which the token receives more than ε from later "
                      "tokens: how often it acts as a secondary sink", TOKENS),  # fmt: skip
    "top secondary sinks": Term("the non-BOS tokens with the largest sink_frac among those seen at least 20 times, "
                                "as token sink_frac (n)", TOKENS),  # fmt: skip
    # switch counts and ablation
    "layer": Term("decoder layer, 0 = first", HEADS),
    "switch_n_off_sink": Term("(head, query) pairs switched off (‖o_t‖ ≤ τ·mean‖v‖) with a hard sink (A[t,0] ≥ 1-δ)",
                              HEADS),  # fmt: skip
    "switch_n_off_nosink": Term("(head, query) pairs switched off without a hard sink", HEADS),
    "switch_n_on_sink": Term("(head, query) pairs not switched off but with a hard sink", HEADS),
    "switch_n_on_nosink": Term("(head, query) pairs neither switched off nor hard-sink", HEADS),
    "agreement": Term("P(hard sink | switched off): of the switched-off pairs, the share with a hard sink", HEADS),
    "off_given_sink": Term("P(switched off | hard sink): of the hard-sink pairs, the share switched off", HEADS),
    "selection": Term("how the ablated heads were chosen (lowest AHON-LN, highest hard-sink fraction, random)",
                      ABLATIONS),  # fmt: skip
    "fraction": Term("fraction of all heads ablated", ABLATIONS),
    "n_heads": Term("number of heads ablated", ABLATIONS),
    "delta_loss": Term("next-token loss with the heads ablated minus without (nats per token; mean over draws)",
                       ABLATIONS),  # fmt: skip
    "delta_std": Term("standard deviation of delta_loss over random draws", ABLATIONS),
}


COST = "docs/theory/cost.md § Sweeps: sinkscope cost"
EXPERIMENTS = "docs/experiments.md § The paper's experiments beyond `reproduce` (issue 36)"
EVICT = "docs/experiments.md § Keep-the-sink (`sinkscope evict`)"
PREVALENCE = "docs/experiments.md § How common each head pattern is (`sinkscope prevalence`)"
DENSE = "docs/experiments.md § Dense attention inside the model (`sinkscope dense`)"
ASSUMPTIONS = "docs/experiments.md § The switch theorem's assumptions (`sinkscope switch-assumptions`)"
REGIMES_COST = "docs/experiments.md § Cost regimes: Figure 3 (`sinkscope cost-regimes`)"
COMMANDS = "README.md § Command line, and the command's --help"
# The pages of `sinkscope ablate` and `sinkscope cost` (report/results_page.py): their own columns, where a name
# can mean something else than on the analyze pages (T there is the number of context tokens).
RESULTS_TERMS: dict[str, Term] = {
    "setting": Term("a setting of the command that wrote this page", COMMANDS),
    "value": Term("the setting's value", COMMANDS),
    "selection": TERMS["selection"],
    "fraction": TERMS["fraction"],
    "n_heads": TERMS["n_heads"],
    "delta_loss": TERMS["delta_loss"],
    "delta_std": TERMS["delta_std"],
    "delta_sem": Term("standard error of delta_loss over the evaluation windows", ABLATIONS),
    "draws": Term("number of random head sets drawn at this fraction (1 for a scored selection)", ABLATIONS),
    "seed": Term("seed of the random draw (head set, or embedding draw)", f"{ABLATIONS}; {COST}"),
    "heads": Term("the ablated heads, as L<layer>H<head> (dense: the number of heads in the regime)",
                  f"{ABLATIONS}; {DENSE}"),  # fmt: skip
    "T": Term("number of context tokens t = 1..T besides the sink z₀", COST),
    "d": Term("embedding dimension", COST),
    "dim": Term("embedding dimension d, or the layer's width for model:NAME", COST),
    "family": Term("how the embeddings were drawn (orthonormal, gaussian, shared_mean:ρ, anti_aligned:ρ, "
                   "low_rank:r, model:NAME)", COST),  # fmt: skip
    "layer": Term("the model layer (cost: whose attention inputs z were used, model:NAME only; −1: every layer)",
                  COST),  # fmt: skip
    "pattern": Term("the attention pattern represented: sink (every query on z₀) or diagonal (each on itself)", COST),
    "norm": Term("the norm of W_QK minimised: nuclear or frobenius", COST),
    "causal": Term("whether each query sees only the keys up to itself", COST),
    "kappa": Term("the margin κ: the pattern's logit exceeds every other by at least κ", COST),
    "margin": Term("the margin κ of the fitted points", COST),
    "delta": Term("the margin's slack δ where used (empty: none)", COST),
    "cost": Term("the minimum norm of a W_QK with the margin (inf: the pattern cannot be represented)", COST),
    "closed_form": Term("the cost from the closed form, where one exists (docs/theory/cost.md)", COST),
    "rank": Term("numerical rank of the optimal W_QK (cost-regimes: the rank r of the embeddings)", COST),
    "reduced_dim": Term("dimension of the problem after reducing to the span of the embeddings", COST),
    "solver": Term("the convex solver used", COST),
    "status": Term("the solver's status (optimal, infeasible, …)", COST),
    "seconds": Term("seconds the solve took", COST),
    "exponent": Term("a in the least-squares fit median cost ≈ c·T^a", COST),
    "prefactor": Term("c in the fit median cost ≈ c·T^a", COST),
    "points": Term("number of T values in the fit", COST),
    # issue 36's commands (evict, prevalence, dense, switch-assumptions, cost-regimes)
    "policy": Term("which keys a query keeps: full cache, recent (the window alone), first k, top-mass k", EVICT),
    "k": Term("number of kept tokens besides the recent window", EVICT),
    "loss": Term("mean next-token loss over the targets of queries t ≥ w (nats/token)", EVICT),
    "delta_full": Term("loss minus the full cache's, paired per window (mean)", EVICT),
    "delta_full_lo": Term("lower end of delta_full's 95 % interval over windows", EVICT),
    "delta_full_hi": Term("upper end of delta_full's 95 % interval over windows", EVICT),
    "delta_recent": Term("loss minus the recent window alone's, paired per window (mean)", EVICT),
    "delta_recent_lo": Term("lower end of delta_recent's 95 % interval over windows", EVICT),
    "delta_recent_hi": Term("upper end of delta_recent's 95 % interval over windows", EVICT),
    "bos_kept_frac": Term("share of windows whose kept set holds position 0 (BOS)", EVICT),
    "n_windows": Term("number of windows the row is computed over", EXPERIMENTS),
    "class": Term("head class, each head classified in each window (sink, diagonal, previous-token, dense, mixed)",
                  PREVALENCE),  # fmt: skip
    "share": Term("the row's share: of the layer's heads in the class (prevalence), of heads in the regime (dense), "
                  "of the switched-off non-sink queries in the category (switch-assumptions)", EXPERIMENTS),
    "share_lo": Term("lower end of share's 95 % interval over windows", PREVALENCE),
    "share_hi": Term("upper end of share's 95 % interval over windows", PREVALENCE),
    "regime": Term("the regime the head's traces b, c predict along identity → uniform", DENSE),
    "uniform_smooths_more": Term("heads whose uniform attention raises the next residual's mean cosine", DENSE),
    "significantly_more": Term("of those, heads with the 95 % interval of dcos above 0", DENSE),
    "significantly_less": Term("heads with the 95 % interval of dcos below 0", DENSE),
    "lam": Term("λ of the mix (1 − λ) A + λ U (U causal uniform)", DENSE),
    "base_loss": Term("next-token loss of the unchanged model (nats/token)", DENSE),
    "dloss": Term("loss with every head of the layer mixed, minus base_loss (mean over windows)", DENSE),
    "dloss_lo": Term("lower end of dloss's 95 % interval over windows", DENSE),
    "dloss_hi": Term("upper end of dloss's 95 % interval over windows", DENSE),
    "head": Term("the head (−1: every head of the layer at once)", DENSE),
    "cos_own": Term("mean pairwise cosine of the residual leaving the layer with the model's own attention", DENSE),
    "dcos": Term("change of that cosine at the largest λ (mean over windows)", DENSE),
    **{f"dcos_{lam:g}": Term(f"change of that cosine at λ = {lam:g} (mean over windows)", DENSE)
       for lam in (0.25, 0.5, 0.75, 1.0)},  # the default --lambdas
    "dcos_lo": Term("lower end of dcos's 95 % interval over windows", DENSE),
    "dcos_hi": Term("upper end of dcos's 95 % interval over windows", DENSE),
    "lambda_peak_obs": Term("the λ of the grid (0 included) where the observed cosine is largest", DENSE),
    "smooth_b": Term("b = tr(ΣW̃) of the head (docs/theory/oversmoothing.md)", DENSE),
    "smooth_c": Term("c = tr(W̃ᵀΣW̃) of the head", DENSE),
    "smooth_dense_more": Term("the prediction 2b + c > 0: dense smooths more than the identity", DENSE),
    "smooth_lambda_peak": Term("predicted interior maximum λ* = 1 + b/c (peak regimes only)", DENSE),
    "cells": Term("which (layer, window) cells: where the assumptions hold, fail, or all", ASSUMPTIONS),
    "n_cells": Term("number of (layer, window) cells", ASSUMPTIONS),
    "switched": Term("switched-off queries: ‖o_t‖ ≤ τ · mean_{j≤t} ‖v_j‖", ASSUMPTIONS),
    "switched_sink": Term("switched-off queries that are hard sinks (A[t,0] ≥ 1 − δ)", ASSUMPTIONS),
    "agreement": Term("P(hard sink | switched off) = switched_sink / switched", ASSUMPTIONS),
    "agreement_lo": Term("lower end of agreement's 95 % bootstrap interval over windows", ASSUMPTIONS),
    "agreement_hi": Term("upper end of agreement's 95 % bootstrap interval over windows", ASSUMPTIONS),
    "category": Term("what a switched-off non-sink query attends to (near sink, self, other small-value key, "
                     "spread)", ASSUMPTIONS),  # fmt: skip
    "queries": Term("number of switched-off queries that are not hard sinks, in the category", ASSUMPTIONS),
    "holds_frac": Term("share of windows where the layer's inputs meet the assumptions", ASSUMPTIONS),
    "rank_median": Term("median numerical rank of the context inputs z_1..z_{T−1}", ASSUMPTIONS),
    "n_contexts": Term("number of context inputs T − 1 (the full rank)", ASSUMPTIONS),
    "span_distance_median": Term("median |z_0 − P z_0| / |z_0| (P: projection on the contexts' span)", ASSUMPTIONS),
    "span_distance_min": Term("smallest |z_0 − P z_0| / |z_0| over windows", ASSUMPTIONS),
    "diagonal_cheaper": Term("share of draws where the diagonal is strictly cheaper (or the sink infeasible)",
                             REGIMES_COST),  # fmt: skip
    "sink_feasible": Term("share of draws where a sink W_QK exists", REGIMES_COST),
    "p_h1": Term("Wendel's probability that the contexts lie in an open half-space (the sink's feasibility)",
                 REGIMES_COST),  # fmt: skip
    "predicted": Term("the predicted cheaper pattern: diagonal (P(H1) < ½), sink (r ≥ T + 1) or undecided",
                      REGIMES_COST),  # fmt: skip
    "agree": Term("share of draws whose exact winner is the predicted one", REGIMES_COST),
    "seeds": Term("number of embedding draws in the cell", REGIMES_COST),
    "V": Term("vocabulary size of the bigram-backcopy task (BOS not counted)", REGIMES_COST),
    "K": Term("number of trigger tokens", REGIMES_COST),
    "N": Term("number of non-trigger queries, V − K", REGIMES_COST),
    "sink_closed": Term("the sink's cost from the closed form", REGIMES_COST),
    "sink_exact": Term("the sink's cost from the exact convex program", REGIMES_COST),
    "diagonal_closed": Term("the diagonal's cost from the closed form", REGIMES_COST),
    "diagonal_exact": Term("the diagonal's cost from the exact convex program", REGIMES_COST),
    "cheaper_closed": Term("the cheaper pattern by the closed forms (tie: within 1e-4 relative)", REGIMES_COST),
    "cheaper_exact": Term("the cheaper pattern by the exact programs", REGIMES_COST),
}


LAB = "docs/experiments.md § What is measured (columns of `metrics.parquet`)"
LAB_COSTS = "docs/experiments.md § The cost predictions and what they mean for a trained `W_QK`"
_NON_TRIGGER = "on non-trigger queries"
# The page of one gBB lab run (`sinkscope train-bb`, synthetic/report_page.py).
TRAIN_BB_TERMS: dict[str, Term] = {
    "final_step": Term("the last training step (the one every final number is measured at)", LAB),
    "seconds": Term("wall-clock seconds of the training run", LAB),
    "loss": Term("next-token cross-entropy of the model on the evaluation batch (nats)", LAB),
    "bayes_loss": Term("the oracle's cross-entropy on the same batch: the best any model can reach (nats)", LAB),
    "excess_loss_noncopy": Term("mean KL(oracle ‖ model) on every position that is not a copy query (nats)", LAB),
    "copy_acc": Term("fraction of copy queries (a trigger at t ≥ 1 + k) whose argmax prediction is s_{t−k}", LAB),
    "copy_head_wqk_nuc_over_fro": Term("the copy head's ‖W_QK‖_* / ‖W_QK‖_F: 1 for rank one, ≈ √N for a "
                                       "diagonal pattern", LAB_COSTS),  # fmt: skip
    "copy_head_pred_nuclear": Term("heuristic nuclear norm the copy head's pattern needs: κ_observed × cost per κ "
                                   "/ mean ‖z‖²", LAB_COSTS),  # fmt: skip
    "first_step_copy_acc_0.9": Term("first evaluated step with copy_acc ≥ 0.9 (empty: never)", LAB),
    "first_step_copy_head_bos_0.5": Term("first evaluated step where the copy head puts ≥ 0.5 of its "
                                         f"attention {_NON_TRIGGER} on BOS (empty: never)", LAB),  # fmt: skip
    "first_step_copy_head_diag_0.5": Term("first evaluated step where the copy head puts ≥ 0.5 of its attention "
                                          f"{_NON_TRIGGER} on the query itself (empty: never)", LAB),  # fmt: skip
    "layer": Term("the model layer, 0 = first", LAB),
    "head": Term("the head within its layer", LAB),
    "pattern": Term(f"the head's class {_NON_TRIGGER}: null, gated, sink, diagonal, previous, dense or mixed", LAB),
    "switch_strength": Term("how completely the head switches off: the largest of its BOS mass, diagonal mass, "
                            "1 − row_mass and 1 − gate", LAB),  # fmt: skip
    "bos_attn": Term(f"mean A[t,0] {_NON_TRIGGER} (without BOS: the first token)", LAB),
    "diag_attn": Term(f"mean A[t,t] {_NON_TRIGGER}", LAB),
    "prev_attn": Term(f"mean A[t,t−k] {_NON_TRIGGER}", LAB),
    "copy_attn": Term("mean A[t,t−k] on copy queries", LAB),
    "entropy": Term(f"mean H(A[t,:t+1]) / log(t+1) {_NON_TRIGGER} (1 = uniform)", LAB),
    "row_mass": Term(f"mean Σ_j A[t,j] {_NON_TRIGGER} (< 1 only with a sink logit or ReLU attention)", LAB),
    "gate_plain": Term(f"mean gate {_NON_TRIGGER} (gated heads; empty otherwise)", LAB),
    "gate_copy": Term("mean gate on copy queries (gated heads; empty otherwise)", LAB),
    "sink_logit": Term("the head's learned sink logit (attention variants with one; empty otherwise)", LAB),
    "switch_off": Term(f"fraction of queries {_NON_TRIGGER} with ‖o_t‖ ≤ 0.1 · mean_j ‖v_j‖ (the hard switch)", LAB),
    "value_drain": Term("‖v_0‖ / mean_{j≥1} ‖v_j‖", LAB),
    "bos_resid_ratio": Term("‖h_0‖ / mean_{t≥1} ‖h_t‖ of the residual stream entering the layer", LAB),
    "wqk_nuclear": Term("nuclear norm of the head's W_QK = W_Q W_Kᵀ / √d_head", LAB),
    "wqk_frobenius": Term("Frobenius norm of the head's W_QK", LAB),
    "sink_margin": Term(f"median logit gap of BOS over the best other key {_NON_TRIGGER} (κ as realised)", LAB),
    "diag_margin": Term(f"median logit gap of the query itself over the best other key {_NON_TRIGGER}", LAB),
    "z_norm_sq": Term("mean ‖z‖² of the attention inputs", LAB_COSTS),
    "pred_sink_nuclear_per_kappa": Term("nuclear norm of the cheapest sink W_QK per unit margin κ", LAB_COSTS),
    "pred_diag_nuclear_per_kappa": Term("nuclear norm of the cheapest diagonal W_QK per unit margin κ", LAB_COSTS),
    "pred_frobenius_per_kappa": Term("Frobenius norm of either pattern per unit margin κ (equal)", LAB_COSTS),
    "pred_sink_nuc_over_fro": Term("nuclear / Frobenius of the sink solution (1: rank one)", LAB_COSTS),
    "pred_diag_nuc_over_fro": Term("nuclear / Frobenius of the diagonal solution (≈ √N: full rank)", LAB_COSTS),
}


def anchor(key: str) -> str:
    """The id of a term's entry in the page's Definitions list ("Δ sink rate" → "def-d-sink-rate", "sink_rate" → "def-sink_rate")."""
    slug = "".join(c if c.isalnum() or c == "_" else "-" for c in key.replace("Δ", "d").lower()).strip("-")
    return "def-" + "-".join(part for part in slug.split("-") if part)


def headers(names: Sequence[str], keys: Sequence[str] | None = None, terms: dict[str, Term] = TERMS
            ) -> list[dict[str, str]]:  # fmt: skip
    """Header cells for `names` (shown texts), each defined by the term `keys[i]` (default: the name itself) of
    `terms` (default: the analyze pages' `TERMS`)."""
    cells = []
    for name, key in zip(names, keys or names):
        if key not in terms:
            raise KeyError(f"column {key!r} has no definition in sinkscope.report.glossary")
        term = terms[key]
        cells.append({"text": name, "key": key, "definition": term.definition, "section": term.section,
                      "anchor": anchor(key)})  # fmt: skip
    return cells


def definitions(*header_lists: Iterable[dict[str, str]]) -> list[dict[str, str]]:
    """The Definitions list of a page: each glossary term its headers use, once, in order of first use (a header
    cell defined in place, like a run's column, links elsewhere and is not listed)."""
    seen: dict[str, dict[str, str]] = {}
    for cells in header_lists:
        for cell in cells:
            if cell["anchor"].startswith("def-"):
                seen.setdefault(cell["key"], cell)
    return list(seen.values())
