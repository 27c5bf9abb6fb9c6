"""The cost of representing a sink or a diagonal pattern: min-norm `W_QK` as a convex program (SPEC §6, §7).

Embeddings are row vectors `z_0` (the sink candidate, BOS) and `z_1..z_T` (contexts); logits are
`l_ij = z_i W zᵀ_j`. A pattern is a list of margin constraints `z_q W (z_a - z_b)ᵀ ≥ κ` ("query q
prefers key a over key b by κ"):

- sink, causal: `z_i W (z_0 - z_j)ᵀ ≥ κ` for i ≥ 1, 1 ≤ j ≤ i (non-causal: 1 ≤ j ≤ T);
- diagonal, causal: `z_i W (z_i - z_j)ᵀ ≥ κ` for i ≥ 1, 0 ≤ j < i (non-causal: every j ≠ i).

The cost is `min ||W||` (nuclear or Frobenius) subject to them. An optimum lies in `span(Z) ⊗ span(Z)`
(a component of W outside it changes no constraint and only adds norm), so with B (r×d) an
orthonormal basis of the embeddings' row span and coordinates `C = Z Bᵀ`, we solve for an r×r matrix M
and return `W = Bᵀ M B`: the problem size depends on T, never on d. Inputs are rescaled to unit max norm
for the solver (the cost scales as `1/|z|²`) and the result is scaled back.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field, replace

import numpy as np

from sinkscope.errors import SinkscopeError
from sinkscope.theory.cost_closed_forms import COST_NORMS, PATTERNS

SOLVERS = ("auto", "clarabel", "scs")
# Largest reduced dimension r for which solver="auto" uses Clarabel (interior point, exact to ~1e-9): at
# T = 16 both norms take ~1 s; at T = 32 Clarabel takes 8-30 s where SCS takes 1-2 s to ~1e-8 relative.
CLARABEL_MAX_RANK = 17
# Largest r that solver="auto" attempts at all (T ≈ 64): the dense constraint matrix has ~T²/2 × r² entries.
AUTO_MAX_RANK = 65
# Singular values of W below this fraction of the largest count as zero in `CostResult.rank`; above the
# solvers' accuracy (Clarabel ~1e-9, SCS ~1e-7 relative) and far below any singular value of an optimum seen.
RANK_RTOL = 1e-4
# eps 1e-7 agrees with Clarabel to ~1e-7 relative; 1e-8 doubles the time on hard T = 32 problems.
SCS_SETTINGS = {"eps_abs": 1e-7, "eps_rel": 1e-7, "max_iters": 200_000}


class InfeasiblePatternError(SinkscopeError):
    """No `W_QK` of any norm realises the pattern on these embeddings; `reason` says which condition fails."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class ProblemTooLargeError(SinkscopeError):
    """The exact program is too large for solver="auto"; the message names the closed form or bound to use."""


@dataclass(frozen=True, eq=False)
class CostResult:
    """A solved pattern cost.

    value: the minimum norm of W_QK (units 1/|z|²), linear in kappa.
    W: (d, d) an optimal W_QK, in the input coordinates.
    rank: numerical rank of W (singular values > RANK_RTOL × the largest).
    reduced_dim: r, the dimension of the embeddings' span the program was solved in.
    solver: "clarabel" or "scs"; status: the solver status ("optimal" or "optimal_inaccurate").
    seconds: wall time of compiling and solving the program.
    """

    value: float
    W: np.ndarray = field(repr=False)
    rank: int
    reduced_dim: int
    solver: str
    status: str
    seconds: float
    pattern: str
    norm: str
    causal: bool
    kappa: float


def pattern_constraints(T: int, pattern: str, causal: bool = True) -> np.ndarray:
    """A pattern's margin constraints as int rows `(q, a, b)`, meaning `z_q W (z_a - z_b)ᵀ ≥ κ` (SPEC §6).

    Shape (m, 3). Indices refer to rows of `Z = [z_0; z_1..z_T]`. Causal: m = T(T+1)/2 for both patterns.
    """
    if pattern not in PATTERNS:
        raise SinkscopeError(f"pattern must be one of {PATTERNS}, got {pattern!r}")
    rows = []
    for i in range(1, T + 1):
        if pattern == "sink":
            keys = range(1, i + 1) if causal else range(1, T + 1)
            rows += [(i, 0, j) for j in keys]
        else:
            keys = range(0, i) if causal else (j for j in range(T + 1) if j != i)
            rows += [(i, i, j) for j in keys]
    return np.asarray(rows, dtype=np.int64).reshape(-1, 3)


def pattern_cost(
    sink: np.ndarray,
    contexts: np.ndarray,
    pattern: str = "sink",
    norm: str = "nuclear",
    causal: bool = True,
    kappa: float = 1.0,
    solver: str = "auto",
) -> CostResult:
    """Minimum-norm W_QK realising a sink or diagonal pattern with margin kappa (SPEC §6).

    sink: (d,) the sink candidate z_0 (BOS). contexts: (T, d) the context embeddings z_1..z_T.
    norm: "nuclear" (the paper's cost) or "frobenius". solver: "clarabel", "scs" or "auto" (Clarabel up to
    T ≈ 16, SCS up to T ≈ 64, beyond that `ProblemTooLargeError` naming the closed form to use).
    Raises `InfeasiblePatternError` (with the half-space reason for sinks) when no W exists.
    """
    sink = np.asarray(sink, dtype=np.float64)
    contexts = np.asarray(contexts, dtype=np.float64)
    if sink.ndim != 1 or contexts.ndim != 2 or contexts.shape[1] != sink.shape[0] or contexts.shape[0] < 1:
        raise SinkscopeError(
            f"sink must have shape (d,) and contexts (T, d) with T >= 1; got {sink.shape}, {contexts.shape}"
        )
    if pattern not in PATTERNS:
        raise SinkscopeError(f"pattern must be one of {PATTERNS}, got {pattern!r}")
    embeddings = np.vstack([sink[None, :], contexts])  # (T+1, d)
    constraints = pattern_constraints(contexts.shape[0], pattern, causal)
    try:
        result = margin_cost(embeddings, constraints, norm=norm, kappa=kappa, solver=solver)
    except InfeasiblePatternError:
        reason = _infeasibility_reason(embeddings, pattern, causal)
        raise InfeasiblePatternError(
            f"the {'causal' if causal else 'non-causal'} {pattern} pattern is infeasible on these embeddings "
            f"(no W_QK of any norm realises it): {reason}",
            reason,
        ) from None
    return replace(result, pattern=pattern, causal=causal)


def margin_cost(
    embeddings: np.ndarray,
    constraints: np.ndarray,
    norm: str = "nuclear",
    kappa: float = 1.0,
    solver: str = "auto",
) -> CostResult:
    """Minimum `||W||` subject to `z_q W (z_a - z_b)ᵀ ≥ κ` for every row (q, a, b) of constraints (SPEC §6).

    embeddings: (n, d) rows z. constraints: (m, 3) integer indices into embeddings. Used by `pattern_cost`
    and for vocabulary-level patterns such as the gBB task (SPEC §7, `gbb_pattern_cost`); the result's
    pattern is "custom" and causal False.
    """
    if norm not in COST_NORMS:
        raise SinkscopeError(f"norm must be one of {COST_NORMS}, got {norm!r}")
    if solver not in SOLVERS:
        raise SinkscopeError(f"solver must be one of {SOLVERS}, got {solver!r}")
    if not kappa > 0:
        raise SinkscopeError(f"kappa (the logit margin) must be > 0, got {kappa!r}")
    Z = np.asarray(embeddings, dtype=np.float64)
    constraints = np.asarray(constraints, dtype=np.int64)
    if Z.ndim != 2 or not np.isfinite(Z).all():
        raise SinkscopeError(f"embeddings must be a finite (n, d) array, got shape {Z.shape}")
    scale = float(np.linalg.norm(Z, axis=1).max())
    if scale == 0:
        raise InfeasiblePatternError("every embedding is zero: no W_QK separates them", "all z are zero")
    Z = Z / scale  # the cost of Z/s is s² times the cost of Z

    _, sv, vt = np.linalg.svd(Z, full_matrices=False)
    r = int((sv > 1e-9 * sv[0]).sum())
    basis = vt[:r]  # (r, d), orthonormal rows spanning the embeddings
    coords = Z @ basis.T  # (n, r)
    chosen = _choose_solver(solver, norm, r)

    query = coords[constraints[:, 0]]  # (m, r)
    direction = coords[constraints[:, 1]] - coords[constraints[:, 2]]  # (m, r)
    # z_q M dᵀ = Σ_kl q_k d_l M_kl = (q ⊗ d) · vec_row(M)
    design = (query[:, :, None] * direction[:, None, :]).reshape(len(constraints), r * r)  # (m, r²)
    value, M, status, seconds = _solve(design, r, norm, kappa, chosen)
    W = basis.T @ M @ basis / scale**2  # (d, d)
    singular = np.linalg.svd(M, compute_uv=False)
    rank = int((singular > RANK_RTOL * singular[0]).sum()) if singular[0] > 0 else 0
    return CostResult(
        value=value / scale**2, W=W, rank=rank, reduced_dim=r, solver=chosen, status=status, seconds=seconds,
        pattern="custom", norm=norm, causal=False, kappa=float(kappa),
    )


def _choose_solver(solver: str, norm: str, r: int) -> str:
    if solver != "auto":
        return solver
    if r > AUTO_MAX_RANK:
        raise ProblemTooLargeError(
            f"the cost program has reduced dimension r={r} > {AUTO_MAX_RANK} (about T > 64) and is too "
            "large to solve exactly here. Use instead: for orthonormal embeddings the closed forms "
            "sinkscope.theory.cost_closed_forms.orthonormal_cost(T, pattern, norm, kappa); for the sink, the "
            "non-causal cost kappa/(gamma1*gamma2) (noncausal_sink_cost), which is exact non-causally and an "
            "upper bound on the causal cost; or pass solver='scs' to force an approximate solve."
        )
    if r <= CLARABEL_MAX_RANK:
        return "clarabel"
    return "scs"


def _solve(
    design: np.ndarray, r: int, norm: str, kappa: float, solver: str
) -> tuple[float, np.ndarray, str, float]:
    """Solve min ||M|| s.t. design @ vec_row(M) ≥ κ; returns (value, M (r, r), status, seconds)."""
    import cvxpy as cp  # deferred: cvxpy takes ~1 s to import

    M = cp.Variable((r, r))
    objective = cp.normNuc(M) if norm == "nuclear" else cp.norm(M, "fro")
    problem = cp.Problem(cp.Minimize(objective), [design @ cp.vec(M, order="C") >= kappa])
    options = SCS_SETTINGS if solver == "scs" else {}
    start = time.perf_counter()
    try:
        with warnings.catch_warnings():  # "solution may be inaccurate": reported as status optimal_inaccurate
            warnings.simplefilter("ignore", UserWarning)
            problem.solve(solver=solver.upper(), **options)
    except cp.error.SolverError as err:
        raise SinkscopeError(f"the {solver} solver failed on the cost program ({err}); try another") from err
    seconds = time.perf_counter() - start
    if problem.status in (cp.INFEASIBLE, cp.INFEASIBLE_INACCURATE):
        raise InfeasiblePatternError(
            "the margin constraints are infeasible: no W_QK of any norm realises this pattern",
            "the solver proved the margin constraints infeasible",
        )
    if problem.status not in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE) or M.value is None:
        raise SinkscopeError(f"the {solver} solver ended with status {problem.status!r} on the cost program")
    return float(problem.value), np.asarray(M.value), str(problem.status), seconds


def _infeasibility_reason(Z: np.ndarray, pattern: str, causal: bool) -> str:
    """Which geometric condition fails (SPEC §4 for sinks; a hull membership for diagonals)."""
    if pattern == "sink":
        # Causal and non-causal sinks are both feasible iff H1 and H2 hold: a hull witness for either
        # contradicts the constraints of the last query (which sees every key) or of key j = 1.
        try:
            from sinkscope.theory.halfspace import sink_geometry
        except ImportError:
            return "the contexts are not in an open half-space (H1) or z_0 is in their hull (H2), SPEC §4"
        geometry = sink_geometry(Z[1:], Z[0])
        failed = []
        if not geometry.h1:
            failed.append(f"H1 fails: 0 is in the convex hull of the contexts (gamma1 {geometry.gamma1:.3g})")
        if not geometry.h2:
            failed.append(f"H2 fails: z_0 is in the contexts' convex hull (gamma2 {geometry.gamma2:.3g})")
        return "; ".join(failed) or "H1 and H2 hold numerically: the geometry is at the edge of feasibility"
    for i in range(1, Z.shape[0]):
        others = Z[:i] if causal else np.delete(Z, i, axis=0)
        if _in_convex_hull(Z[i], others):
            return (f"z_{i} lies in the convex hull of the {'earlier' if causal else 'other'} embeddings, "
                    "so it cannot prefer itself over all of them")
    return "the embeddings are linearly dependent in a way that leaves no W_QK (r < T+1)"


def _in_convex_hull(point: np.ndarray, points: np.ndarray) -> bool:
    """Whether point (d,) is a convex combination of the rows of points (n, d): a feasibility LP."""
    from scipy.optimize import linprog

    n = points.shape[0]
    equality = np.vstack([points.T, np.ones((1, n))])  # (d+1, n)
    target = np.concatenate([point, [1.0]])
    result = linprog(np.zeros(n), A_eq=equality, b_eq=target, bounds=(0, None), method="highs")
    return result.status == 0


def gbb_pattern_cost(
    V: int,
    K: int,
    pattern: str = "sink",
    norm: str = "nuclear",
    kappa: float = 1.0,
    embeddings: np.ndarray | None = None,
    solver: str = "auto",
) -> CostResult:
    """Vocabulary-level cost of the gBB task's sink or diagonal pattern (SPEC §7), non-causal.

    Tokens 0..V-1 with triggers 0..K-1, BOS = row V. Queries: the N = V-K non-triggers; keys: every token
    and BOS. Sink: `z_i W (z_BOS - z_j)ᵀ ≥ κ` for all tokens j; diagonal: `z_i W (z_i - z_j)ᵀ ≥ κ` for all
    j ≠ i including BOS. embeddings: (V+1, d), orthonormal (the identity) by default.
    """
    if int(K) != K or not 0 <= K < V:
        raise SinkscopeError(f"K (number of triggers) must be an integer in [0, V), got {K!r} with V={V}")
    if pattern not in PATTERNS:
        raise SinkscopeError(f"pattern must be one of {PATTERNS}, got {pattern!r}")
    Z = np.eye(V + 1) if embeddings is None else np.asarray(embeddings, dtype=np.float64)
    if Z.shape[0] != V + 1:
        raise SinkscopeError(f"gBB embeddings need V+1 = {V + 1} rows (tokens, then BOS), got {Z.shape[0]}")
    queries = range(K, V)
    if pattern == "sink":
        rows = [(i, V, j) for i in queries for j in range(V)]
    else:
        rows = [(i, i, j) for i in queries for j in range(V + 1) if j != i]
    result = margin_cost(Z, np.asarray(rows), norm=norm, kappa=kappa, solver=solver)
    return replace(result, pattern=pattern)
