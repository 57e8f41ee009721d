// Bidirectional multi-head attention over a flat, unpadded float32 batch, for CPUs with AVX2 and FMA (8-wide
// float32, 16 vector registers): the AVX-512 kernel's structure (varlen_cpu_avx512.c) cut to half the width
// and half the registers.
//
// One work item per (sequence, head). K of that head is packed transposed ([head_size, keys], keys padded to
// a multiple of 16) by 8 x 8 in-register transposes; V is read in place. Then for each block of QB = 4
// queries (pre-multiplied by scale * log2(e), so that the soft-max is a plain exp2):
//   1. scores [4, keys] = Q_block K^T, 4 queries x 16 keys per step (8 independent FMA chains), the row
//      maxima kept in registers as the scores are stored (keys past the end are -inf): 8 accumulators,
//      4 maxima, 2 K vectors and a broadcast are 15 of the 16 registers;
//   2. p = exp2(score - max) (a degree-6 polynomial, ~1e-7 relative; never a denormal), the row sums kept
//      likewise;
//   3. out = (p V) / sum, by chunks of up to 4 head vectors (32 floats) and 2 or 4 queries at a time: as many
//      as keep their accumulators, the chunk's V vectors and the broadcast probability in 16 registers.
// Work items run longest first on an OpenMP team (dynamic), so that one long sequence does not leave a
// thread idle. No padding between sequences, no gather / scatter copies: q, k, v are read in place through
// their strides (a fused QKV projection's views work as they are) and the output is written in
// [tokens, heads, head_size] order.
//
// Built at first use by wde/layers/attention/backends/varlen_kernel.py (plain C, no torch headers).

#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#define QB 4  // queries per block
#define LOG2E 1.44269504088896341f

static inline __m256 first_lanes(int64_t count) {  // all-ones in the lanes below count (any count)
    const int64_t c = count < 0 ? 0 : count > 8 ? 8 : count;
    return _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32((int)c), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
}

static inline float reduce_max(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
}

static inline float reduce_add(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

// 2^x for x <= 0; below -125 it gives ~2^-125, never a denormal (an add of denormals costs a microcode
// assist on many x86 cores): tiny against the row sum (>= 1), and lanes past the keys are masked to 0
static inline __m256 exp2_256(__m256 x) {
    x = _mm256_max_ps(x, _mm256_set1_ps(-125.0f));
    const __m256 fx = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256 r = _mm256_sub_ps(x, fx);  // [-0.5, 0.5]
    // 2^r = e^(r ln2), Taylor to degree 6: relative error < 1.2e-7 on [-0.5, 0.5]
    __m256 y = _mm256_set1_ps(1.5403530393381606e-4f);
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.3333558146428443e-3f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(9.6181291076284772e-3f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.5504108664821580e-2f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(2.4022650695910071e-1f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(6.9314718055994531e-1f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.0f));
    // 2^fx from its exponent bits: fx in [-125, 0], so the biased exponent is 2..127 (a normal number)
    const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(fx), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(bits));
}

// dst[c * ld + j] = src[j * row + c] for c < 8, j < 8 (rows j >= n are zeros)
static inline void transpose8(const float *src, int64_t row, int64_t n, float *dst, int64_t ld) {
    __m256 r[8], t[8];
    for (int j = 0; j < 8; ++j) r[j] = j < n ? _mm256_loadu_ps(src + j * row) : _mm256_setzero_ps();
    for (int j = 0; j < 8; j += 2) {
        t[j] = _mm256_unpacklo_ps(r[j], r[j + 1]);
        t[j + 1] = _mm256_unpackhi_ps(r[j], r[j + 1]);
    }
    for (int j = 0; j < 8; j += 4) {
        r[j] = _mm256_shuffle_ps(t[j], t[j + 2], 0x44);
        r[j + 1] = _mm256_shuffle_ps(t[j], t[j + 2], 0xee);
        r[j + 2] = _mm256_shuffle_ps(t[j + 1], t[j + 3], 0x44);
        r[j + 3] = _mm256_shuffle_ps(t[j + 1], t[j + 3], 0xee);
    }
    for (int c = 0; c < 4; ++c) {  // 128-bit halves: columns c and c + 4 of rows 0-3 and 4-7
        t[c] = _mm256_permute2f128_ps(r[c], r[c + 4], 0x20);
        t[c + 4] = _mm256_permute2f128_ps(r[c], r[c + 4], 0x31);
    }
    for (int c = 0; c < 8; ++c) _mm256_storeu_ps(dst + c * ld, t[c]);  // t[c]: column c of the 8 rows
}

// out rows [0, pq) (of which the first nq are stored), head vectors [0, cb) += p[r, :n] V; pq and cb are
// constants in each instance, so the pq x cb accumulators stay in registers
static inline __attribute__((always_inline)) void weighted_values(const float *p, int64_t n_pad, const float *v,
                                                                int64_t v_row, int64_t n, const int pq,
                                                                const int cb, const float *inv, float *out,
                                                                int64_t out_row, int64_t nq) {
    __m256 acc[4][4];
    for (int r = 0; r < pq; ++r)
        for (int b = 0; b < cb; ++b) acc[r][b] = _mm256_setzero_ps();
    for (int64_t j = 0; j < n; ++j) {
        const float *vr = v + j * v_row;
        __m256 vv[4];
        for (int b = 0; b < cb; ++b) vv[b] = _mm256_loadu_ps(vr + 8 * b);
        for (int r = 0; r < pq; ++r) {
            const __m256 pr = _mm256_broadcast_ss(p + r * n_pad + j);
            for (int b = 0; b < cb; ++b) acc[r][b] = _mm256_fmadd_ps(pr, vv[b], acc[r][b]);
        }
    }
    for (int r = 0; r < pq && r < nq; ++r)
        for (int b = 0; b < cb; ++b)
            _mm256_storeu_ps(out + r * out_row + 8 * b, _mm256_mul_ps(acc[r][b], _mm256_set1_ps(inv[r])));
}

// one chunk of cb head vectors for the block's nq queries: 2 queries x 3-4 vectors or 4 x 1-2 at a time
static inline void weighted_chunk(const float *p, int64_t n_pad, const float *v, int64_t v_row, int64_t n, int cb,
                                  const float *inv, float *out, int64_t out_row, int64_t nq) {
    switch (cb) {
        case 4:
            for (int r0 = 0; r0 < nq; r0 += 2)
                weighted_values(p + r0 * n_pad, n_pad, v, v_row, n, 2, 4, inv + r0, out + r0 * out_row, out_row, nq - r0);
            break;
        case 3:
            for (int r0 = 0; r0 < nq; r0 += 2)
                weighted_values(p + r0 * n_pad, n_pad, v, v_row, n, 2, 3, inv + r0, out + r0 * out_row, out_row, nq - r0);
            break;
        case 2: weighted_values(p, n_pad, v, v_row, n, 4, 2, inv, out, out_row, nq); break;
        case 1: weighted_values(p, n_pad, v, v_row, n, 4, 1, inv, out, out_row, nq); break;
    }
}

// nd = head_size / 8, a constant in each of the instances below
static inline __attribute__((always_inline)) void attend(const float *q, const float *k, const float *v, float *out,
                                                       int64_t n, const int64_t nd, int64_t q_row, int64_t k_row,
                                                       int64_t v_row, int64_t out_row, float scale, float *kt,
                                                       float *scores, const float *bias, int64_t bias_row) {
    const int64_t d = 8 * nd;
    const int64_t n_pad = (n + 15) & ~(int64_t)15;
    const float q_scale = scale * LOG2E;  // scores in log2 units
    for (int64_t j0 = 0; j0 < n_pad; j0 += 8)  // keys past n are zero columns (their scores are masked)
        for (int64_t c0 = 0; c0 < d; c0 += 8) transpose8(k + j0 * k_row + c0, k_row, n - j0, kt + c0 * n_pad + j0, n_pad);
    float qs[QB * 128] __attribute__((aligned(32)));
    for (int64_t i0 = 0; i0 < n; i0 += QB) {
        const int64_t nq = (n - i0) < QB ? (n - i0) : QB;
        for (int64_t r = 0; r < QB; ++r) {  // rows past the end repeat the first (computed, not stored)
            const float *qr = q + (i0 + (r < nq ? r : 0)) * q_row;
            for (int64_t b = 0; b < nd; ++b)
                _mm256_store_ps(qs + r * d + 8 * b, _mm256_mul_ps(_mm256_loadu_ps(qr + 8 * b), _mm256_set1_ps(q_scale)));
        }
        // 1. scores and row maxima
        __m256 mx[QB];
        for (int r = 0; r < QB; ++r) mx[r] = _mm256_set1_ps(-INFINITY);
        for (int64_t j = 0; j < n_pad; j += 16) {
            __m256 a[QB][2];
            for (int r = 0; r < QB; ++r) a[r][0] = a[r][1] = _mm256_setzero_ps();
            for (int64_t c = 0; c < d; ++c) {
                const __m256 k0 = _mm256_loadu_ps(kt + c * n_pad + j), k1 = _mm256_loadu_ps(kt + c * n_pad + j + 8);
                for (int r = 0; r < QB; ++r) {
                    const __m256 qc = _mm256_broadcast_ss(qs + r * d + c);
                    a[r][0] = _mm256_fmadd_ps(qc, k0, a[r][0]);
                    a[r][1] = _mm256_fmadd_ps(qc, k1, a[r][1]);
                }
            }
            if (bias) {  // + bias[query, key], in log2 units like the scores
                const __m256i keys0 = _mm256_castps_si256(first_lanes(n - j));
                const __m256i keys1 = _mm256_castps_si256(first_lanes(n - j - 8));
                const __m256 log2e = _mm256_set1_ps(LOG2E);
                for (int r = 0; r < QB; ++r) {
                    const float *bias_r = bias + (i0 + (r < nq ? r : 0)) * bias_row + j;
                    a[r][0] = _mm256_fmadd_ps(_mm256_maskload_ps(bias_r, keys0), log2e, a[r][0]);
                    a[r][1] = _mm256_fmadd_ps(_mm256_maskload_ps(bias_r + 8, keys1), log2e, a[r][1]);
                }
            }
            if (n - j < 16) {
                const __m256 keys0 = first_lanes(n - j), keys1 = first_lanes(n - j - 8), minus_inf = _mm256_set1_ps(-INFINITY);
                for (int r = 0; r < QB; ++r) {
                    a[r][0] = _mm256_blendv_ps(minus_inf, a[r][0], keys0);
                    a[r][1] = _mm256_blendv_ps(minus_inf, a[r][1], keys1);
                }
            }
            for (int r = 0; r < QB; ++r) {
                _mm256_storeu_ps(scores + r * n_pad + j, a[r][0]);
                _mm256_storeu_ps(scores + r * n_pad + j + 8, a[r][1]);
                mx[r] = _mm256_max_ps(mx[r], _mm256_max_ps(a[r][0], a[r][1]));
            }
        }
        // 2. exp2(score - max) in place, row sums
        float inv[QB];
        for (int r = 0; r < QB; ++r) {
            const __m256 m = _mm256_set1_ps(reduce_max(mx[r]));
            __m256 sum = _mm256_setzero_ps();
            float *row = scores + r * n_pad;
            for (int64_t j = 0; j < n_pad; j += 8) {
                __m256 e = exp2_256(_mm256_sub_ps(_mm256_loadu_ps(row + j), m));
                if (n - j < 8) e = _mm256_and_ps(e, first_lanes(n - j));
                _mm256_storeu_ps(row + j, e);
                sum = _mm256_add_ps(sum, e);
            }
            inv[r] = 1.0f / reduce_add(sum);
        }
        // 3. out = p V / sum, by chunks of head vectors (4 at a time; 5 left are 3 + 2, never a lone 1 after 4s)
        for (int64_t b0 = 0; b0 < nd;) {
            const int64_t left = nd - b0;
            const int cb = left == 5 ? 3 : left >= 4 ? 4 : (int)left;
            weighted_chunk(scores, n_pad, v + 8 * b0, v_row, n, cb, inv, out + i0 * out_row + 8 * b0, out_row, nq);
            b0 += cb;
        }
    }
}

static void attend_one(const float *q, const float *k, const float *v, float *out, int64_t n, int64_t d,
                       int64_t q_row, int64_t k_row, int64_t v_row, int64_t out_row, float scale, float *kt,
                       float *scores, const float *bias, int64_t bias_row) {
#define ATTEND(ND) \
    case ND: attend(q, k, v, out, n, ND, q_row, k_row, v_row, out_row, scale, kt, scores, bias, bias_row); break;
    switch (d / 8) {  // 1..16 (the Python side checks)
        ATTEND(1) ATTEND(2) ATTEND(3) ATTEND(4) ATTEND(5) ATTEND(6) ATTEND(7) ATTEND(8)
        ATTEND(9) ATTEND(10) ATTEND(11) ATTEND(12) ATTEND(13) ATTEND(14) ATTEND(15) ATTEND(16)
    }
#undef ATTEND
}

// q [tokens, heads, d] (row stride q_row floats, head stride q_head), k / v [tokens, kv_heads, d] likewise,
// out [tokens, heads, d] (row stride out_row, head stride d); seq_starts [num_seqs + 1]; order: sequence
// indices, longest first (work item w is head w % heads of sequence order[w / heads]). d must be a multiple
// of 8, at most 128. bias: NULL, or a score bias [heads, L, L] (head stride bias_head, row stride bias_row)
// added to every sequence's scores by position within the sequence (query i, key j: bias[h, i, j]); L is at
// least the longest sequence.
void wde_varlen_attention(const float *q, const float *k, const float *v, float *out, const int64_t *seq_starts,
                          int64_t num_seqs, int64_t heads, int64_t kv_heads, int64_t d, int64_t q_row,
                          int64_t q_head, int64_t k_row, int64_t k_head, int64_t v_row, int64_t v_head,
                          int64_t out_row, float scale, const int64_t *order, int num_threads, const float *bias,
                          int64_t bias_head, int64_t bias_row) {
    int64_t max_len = 0;
    for (int64_t s = 0; s < num_seqs; ++s) {
        const int64_t n = seq_starts[s + 1] - seq_starts[s];
        if (n > max_len) max_len = n;
    }
    const int64_t max_pad = (max_len + 15) & ~(int64_t)15;
    const int64_t per_kv = heads / kv_heads;
    const int64_t total = num_seqs * heads;
#pragma omp parallel num_threads(num_threads)
    {
        float *buf = (float *)aligned_alloc(64, (size_t)(d * max_pad + QB * max_pad + 64) * sizeof(float));
        float *kt = buf, *scores = buf + d * max_pad;
#pragma omp for schedule(dynamic, 1)
        for (int64_t w = 0; w < total; ++w) {
            const int64_t s = order[w / heads], h = w % heads, hk = h / per_kv;
            const int64_t start = seq_starts[s], n = seq_starts[s + 1] - start;
            if (n == 0) continue;
            attend_one(q + start * q_row + h * q_head, k + start * k_row + hk * k_head, v + start * v_row + hk * v_head,
                       out + start * out_row + h * d, n, d, q_row, k_row, v_row, out_row, scale, kt, scores,
                       bias ? bias + h * bias_head : NULL, bias_row);
        }
        free(buf);
    }
}
