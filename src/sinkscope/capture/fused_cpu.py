"""The compiled rows path: plain causal attention and its `AttentionReadout` in one pass over each block of query rows.

A small C++ kernel (`SOURCE`), compiled with the system's C++ compiler on first use and cached under
`cache_root()/kernels/`, does per key/value head and block of `ROWS_PER_BLOCK` query rows of each of its query heads:
the logits `S = s q kᵀ` over the keys up to the block's last query (one product in torch's own BLAS, `sgemm_`),
then per row `t` in one sweep over its keys `j ≤ t`: `m_t = max_j S[t,j]`, `p_j = exp(S[t,j] − m_t)`,
`l_t = Σ_j p_j` and `a_t = Σ_j p_j (S[t,j] − m_t)`, giving `lse_t = m_t + log l_t`, the row entropy
`H_t = log l_t − a_t / l_t` and `A[t,j] = p_j / l_t`, whose column sums gather in the block (float32) and then in
float64; finally `P·V` (a second product) and the output norms. The logits of a block stay in the cache between
the passes (`ROWS_PER_BLOCK` query rows per head, 32: fewer made the products slower, more spilled the cache), which
is what torch operations over blocks could not do. No compiler, no `sgemm_` in torch's library, or a failed build:
`available()` is False, `why_unavailable()` says why, and `capture.attention` takes the rows path instead.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch
from torch import Tensor

from sinkscope.capture.readout import AttentionReadout
from sinkscope.functional.patterns import entropy_weights
from sinkscope.identity import cache_root

# Query rows per head in one block: the block's logits are (H/KV)·32 rows over at most T keys (SmolLM2's shapes,
# one thread, kernel alone against sdpa: 16 rows 1.00×, 32 rows 0.95×, 64 rows 1.08× at T = 4096; 32 rows 0.68× and
# 0.73× at T = 256 and 1024).
ROWS_PER_BLOCK = 32

SOURCE = r"""
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define ROWS_AVX2 1
#endif

typedef void (*sgemm_t)(const char*, const char*, const int*, const int*, const int*, const float*, const float*,
                        const int*, const float*, const int*, const float*, float*, const int*);

#ifdef ROWS_AVX2
// exp(x) for float lanes (Cephes' expf: range reduction by ln 2, degree-5 polynomial; relative error ~1e-7);
// x below -88.37 gives 0. A NaN stays NaN (min/max return their second operand when either is NaN), so a NaN logit
// reaches the layer's output and the feed's non-finite check.
static inline __m256 exp8(__m256 x) {
  x = _mm256_max_ps(_mm256_set1_ps(-88.3762626647949f), _mm256_min_ps(_mm256_set1_ps(88.3762626647949f), x));
  __m256 fx = _mm256_floor_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), _mm256_set1_ps(0.5f)));
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), x);
  __m256 y = _mm256_set1_ps(1.9875691500E-4f);
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507E-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073E-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894E-2f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459E-1f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201E-1f));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(x, x), _mm256_add_ps(x, _mm256_set1_ps(1.0f)));
  __m256i n = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(fx), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(y, _mm256_castsi256_ps(n));
}

static inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

static inline float hmax8(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}
#endif

static inline float row_max(const float* s, int n) {
  int j = 0;
  float m = -INFINITY;
#ifdef ROWS_AVX2
  if (n >= 8) {
    __m256 mv = _mm256_loadu_ps(s);
    for (j = 8; j + 8 <= n; j += 8) mv = _mm256_max_ps(mv, _mm256_loadu_ps(s + j));
    m = hmax8(mv);
  }
#endif
  for (; j < n; ++j) m = s[j] > m ? s[j] : m;
  return m;
}

// s[j] <- exp(s[j] - m) for j < n; returns l = sum_j exp(s_j - m) and *a = sum_j exp(s_j - m) (s_j - m).
static inline float row_exp(float* s, int n, float m, float* a) {
  int j = 0;
  float l = 0.f, acc = 0.f;
#ifdef ROWS_AVX2
  __m256 mv = _mm256_set1_ps(m), lv = _mm256_setzero_ps(), av = _mm256_setzero_ps();
  for (; j + 8 <= n; j += 8) {
    __m256 x = _mm256_sub_ps(_mm256_loadu_ps(s + j), mv);
    __m256 p = exp8(x);
    _mm256_storeu_ps(s + j, p);
    lv = _mm256_add_ps(lv, p);
    av = _mm256_fmadd_ps(p, x, av);
  }
  l = hsum8(lv);
  acc = hsum8(av);
#endif
  for (; j < n; ++j) {
    float x = s[j] - m, p = std::exp(x);
    s[j] = p;
    l += p;
    acc += p * x;
  }
  *a = acc;
  return l;
}

extern "C" int sinkscope_rows(const float* q, int64_t qb, int64_t qh, int64_t qt, const float* k, int64_t kb,
                              int64_t kh, int64_t kt, const float* v, int64_t vb, int64_t vh, int64_t vt, int B,
                              int H, int KV, int T, int D, int Dv, float scale, int rows, void* gemm_ptr, float* out,
                              float* lse, double* entropy, double* columns, float* sink, float* diag, float* prev,
                              float* norms) {
  // out (B, T, H, Dv); lse, sink, diag, prev, norms (B, H, T) float; entropy (rows' H_t), columns (B, H, T) double.
  sgemm_t gemm = (sgemm_t)gemm_ptr;
  const int group = H / KV;
  const int R = group * rows;
  float* qbuf = (float*)std::malloc(sizeof(float) * (size_t)R * D);
  float* S = (float*)std::malloc(sizeof(float) * (size_t)R * T);
  float* obuf = (float*)std::malloc(sizeof(float) * (size_t)R * Dv);
  float* colf = (float*)std::calloc((size_t)group * T, sizeof(float));
  float* inv = (float*)std::malloc(sizeof(float) * (size_t)R);
  if (!qbuf || !S || !obuf || !colf || !inv) {
    std::free(qbuf), std::free(S), std::free(obuf), std::free(colf), std::free(inv);
    return 1;
  }
  const float one = 1.f, zero = 0.f;
  for (int b = 0; b < B; ++b) {
    for (int g = 0; g < KV; ++g) {
      const float* kg = k + b * kb + g * kh;
      const float* vg = v + b * vb + g * vh;
      for (int t0 = 0; t0 < T; t0 += rows) {
        const int Q = (T - t0) < rows ? (T - t0) : rows, stop = t0 + Q, RQ = group * Q;
        for (int gi = 0; gi < group; ++gi) {  // the group's query rows side by side, scaled: (group*Q, D)
          const float* qh_ = q + b * qb + (int64_t)(g * group + gi) * qh;
          for (int i = 0; i < Q; ++i) {
            const float* src = qh_ + (int64_t)(t0 + i) * qt;
            float* dst = qbuf + (size_t)(gi * Q + i) * D;
            for (int d = 0; d < D; ++d) dst[d] = src[d] * scale;
          }
        }
        // S (RQ, stop) row-major = qbuf (RQ, D) . K[:stop]^T: column-major S^T = K^T' . qbuf^T
        int m_ = stop, n_ = RQ, k_ = D, ldk = (int)kt, ldq = D, lds = stop;
        gemm("T", "N", &m_, &n_, &k_, &one, kg, &ldk, qbuf, &ldq, &zero, S, &lds);
        for (int gi = 0; gi < group; ++gi) {
          const int h = g * group + gi;
          const size_t bh = (size_t)(b * H + h) * T;
          float* col = colf + (size_t)gi * T;
          for (int i = 0; i < Q; ++i) {
            const int t = t0 + i, n = t + 1, r = gi * Q + i;
            float* s = S + (size_t)r * stop;
            const float m = row_max(s, n);
            float a;
            const float l = row_exp(s, n, m, &a);
            for (int j = n; j < stop; ++j) s[j] = 0.f;  // the causal corner
            const float il = 1.f / l;
            inv[r] = il;
            for (int j = 0; j < n; ++j) col[j] += s[j] * il;
            sink[bh + t] = s[0] * il;
            diag[bh + t] = s[t] * il;
            prev[bh + t] = t > 0 ? s[t - 1] * il : 0.f;
            const double logl = std::log((double)l);
            lse[bh + t] = (float)((double)m + logl);
            entropy[bh + t] = logl - (double)a / (double)l;
          }
          double* cd = columns + bh;
          for (int j = 0; j < stop; ++j) cd[j] += (double)col[j];
          std::memset(col, 0, sizeof(float) * (size_t)stop);
        }
        // O (RQ, Dv) row-major = P (RQ, stop) . V[:stop] (stop, Dv): column-major O^T = V^T . P^T
        int mo = Dv, no = RQ, ko = stop, ldv = (int)vt, ldo = Dv;
        gemm("N", "N", &mo, &no, &ko, &one, vg, &ldv, S, &lds, &zero, obuf, &ldo);
        for (int gi = 0; gi < group; ++gi) {
          const int h = g * group + gi;
          const size_t bh = (size_t)(b * H + h) * T;
          for (int i = 0; i < Q; ++i) {
            const int t = t0 + i, r = gi * Q + i;
            const float il = inv[r];
            const float* o = obuf + (size_t)r * Dv;
            float* dst = out + (((size_t)b * T + t) * H + h) * Dv;
            float sq = 0.f;
            for (int d = 0; d < Dv; ++d) {
              const float x = o[d] * il;
              dst[d] = x;
              sq += x * x;
            }
            norms[bh + t] = std::sqrt(sq);
          }
        }
      }
    }
  }
  std::free(qbuf), std::free(S), std::free(obuf), std::free(colf), std::free(inv);
  return 0;
}
"""


def _compiler_flags() -> list[str]:
    """Vector instructions the CPU has, as torch reports them (AVX2 and FMA give the kernel's 8-lane `exp`)."""
    capability = torch.backends.cpu.get_cpu_capability()
    return ["-mavx2", "-mfma"] if capability in ("AVX2", "AVX512") else []


def _gemm_address() -> int:
    """The address of `sgemm_` (Fortran BLAS, 32-bit integers) in torch's CPU library, which torch links MKL or
    OpenBLAS into; raises OSError or AttributeError where it has none."""
    folder = Path(torch.__file__).parent / "lib"
    library = next(iter(sorted(folder.glob("libtorch_cpu.*"))), None)
    if library is None:
        raise OSError(f"no libtorch_cpu in {folder}")
    return ctypes.cast(ctypes.CDLL(str(library)).sgemm_, ctypes.c_void_p).value


@functools.cache
def _kernel() -> tuple[ctypes.CDLL, int] | str:
    """The compiled kernel and `sgemm_`'s address, built once per process (and once per source, compiler flags and
    machine in the cache), or the reason it cannot be."""
    try:
        gemm = _gemm_address()
    except (OSError, AttributeError) as error:
        return f"torch's CPU library has no sgemm_ ({error})"
    compiler = os.environ.get("CXX", "g++")
    if shutil.which(compiler) is None:
        return f"no C++ compiler ({compiler} not found; set CXX)"
    flags = ["-O3", *_compiler_flags(), "-shared", "-fPIC"]
    key = hashlib.sha256("\0".join([SOURCE, compiler, *flags, os.uname().machine]).encode()).hexdigest()[:16]
    library = cache_root() / "kernels" / f"rows-{key}.so"
    if not library.exists():
        try:
            library.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=library.parent) as folder:
                source = Path(folder) / "rows.cpp"
                source.write_text(SOURCE)
                built = Path(folder) / "rows.so"
                done = subprocess.run([compiler, *flags, "-o", str(built), str(source)], capture_output=True,
                                      text=True, check=False)  # fmt: skip
                if done.returncode != 0:
                    return f"{compiler} failed: {done.stderr.strip()[-500:]}"
                built.replace(library)  # atomic: a concurrent process sees no half-written library
        except OSError as error:
            return f"cannot build in {library.parent} ({error})"
    try:
        return ctypes.CDLL(str(library)), gemm
    except OSError as error:
        return f"cannot load {library} ({error})"


def available() -> bool:
    """Whether the compiled kernel runs in this process (the first call builds it: about a second)."""
    return not isinstance(_kernel(), str)


def why_unavailable() -> str | None:
    """Why the compiled kernel does not run here, or None where it does."""
    kernel = _kernel()
    return kernel if isinstance(kernel, str) else None


def _rows_last(x: Tensor) -> Tensor:
    """`x` (B, heads, T, d) in float32 with unit stride over d and a row stride of at least d (what BLAS reads)."""
    x = x.float()
    return x if x.stride(-1) == 1 and x.stride(-2) >= x.shape[-1] else x.contiguous()


def compiled_attention(query: Tensor, key: Tensor, value: Tensor, scaling: float) -> tuple[Tensor, AttentionReadout]:
    """Plain causal attention and its `AttentionReadout` from the compiled kernel; the output is (B, T, H, Dv).

    `query` (B, H, T, D), `key` (B, KV, T, D), `value` (B, KV, T, Dv), any strides (GQA: query head h reads kv head
    `h // (H // KV)`); computed in float32 (the output comes back in `query`'s dtype). Raises RuntimeError where
    `available()` is False."""
    out, rows, _ = compiled_parts(query, key, value, scaling)
    return out, rows


def compiled_parts(query: Tensor, key: Tensor, value: Tensor, scaling: float) -> tuple[Tensor, AttentionReadout, Tensor]:
    """`compiled_attention`'s output and readout, and the row log-normalisers `lse_t` (B, H, T) float32."""
    kernel = _kernel()
    if isinstance(kernel, str):
        raise RuntimeError(f"the compiled rows kernel is unavailable: {kernel}")
    library, gemm = kernel
    q, k, v = _rows_last(query), _rows_last(key), _rows_last(value)
    B, H, T, D = q.shape
    KV, Dv = k.shape[1], v.shape[-1]
    out = torch.empty(B, T, H, Dv)
    lse, sink, diag, prev, norms = (torch.empty(B, H, T) for _ in range(5))
    entropy = torch.empty(B, H, T, dtype=torch.float64)  # H_t per row
    columns = torch.zeros(B, H, T, dtype=torch.float64)
    pointer = lambda x: ctypes.c_void_p(x.data_ptr())  # noqa: E731
    strides = lambda x: [ctypes.c_int64(s) for s in x.stride()[:3]]  # noqa: E731
    failed = library.sinkscope_rows(
        pointer(q), *strides(q), pointer(k), *strides(k), pointer(v), *strides(v),
        B, H, KV, T, D, Dv, ctypes.c_float(scaling), ROWS_PER_BLOCK, ctypes.c_void_p(gemm),
        pointer(out), pointer(lse), pointer(entropy), pointer(columns), pointer(sink), pointer(diag), pointer(prev),
        pointer(norms),
    )  # fmt: skip
    if failed:
        raise torch.OutOfMemoryError("the compiled rows kernel could not allocate its block buffers")
    weights = entropy_weights(0, T)
    rows = AttentionReadout(sink=sink, diag=diag, prev=prev, columns=columns, entropy=(entropy * weights).sum(-1),
                            out_norms=norms)  # fmt: skip
    return out.to(query.dtype), rows, lse
