// Bidirectional multi-head attention over a flat, unpadded float32 batch, for CPUs with AVX-512F.
//
// One work item per (sequence, head). K of that head is packed transposed ([head_size, keys], keys padded to
// a multiple of 16) by 16 x 16 in-register transposes; V is read in place. Then for each block of QB = 8
// queries (pre-multiplied by scale * log2(e), so that the soft-max is a plain exp2):
//   1. scores [8, keys] = Q_block K^T, 8 queries x 16 keys per step (8 independent FMA chains), the row
//      maxima kept in registers as the scores are stored (keys past the end are -inf);
//   2. p = exp2(score - max) (a degree-6 polynomial, ~1e-7 relative), the row sums kept likewise;
//   3. out = (p V) / sum, 8, 4 or 2 queries at a time: as many as keep their accumulators, the V row and the
//      broadcast probability in the 32 vector registers.
// Work items run longest first on an OpenMP team (dynamic), so that one long sequence does not leave a
// thread idle. No padding between sequences, no gather / scatter copies: q, k, v are read in place through
// their strides (a fused QKV projection's views work as they are) and the output is written in
// [tokens, heads, head_size] order.
//
// Built at first use by wde/layers/attention/backends/varlen_kernel.py (plain C, no torch headers); the
// varlen_cpu attention backend calls it. varlen_cpu_avx2.c is the same kernel for AVX2 + FMA CPUs.

#include "varlen_cpu_avx512.h"  // QB, LOG2E, first_lanes, exp2_512, transpose16, finish_scores

// out rows [i0, i0 + pq) += p[r, :n] V; nd = head_size / 16 and pq constants in each instance
static inline __attribute__((always_inline)) void weighted_values(const float *p, int64_t n_pad, const float *v,
                                                                int64_t v_row, int64_t n, const int pq,
                                                                const int64_t nd, const float *inv, float *out,
                                                                int64_t out_row, int64_t nq) {
    __m512 acc[8][8];
    for (int r = 0; r < pq; ++r)
        for (int64_t b = 0; b < nd; ++b) acc[r][b] = _mm512_setzero_ps();
    for (int64_t j = 0; j < n; ++j) {
        const float *vr = v + j * v_row;
        __m512 vv[8];
        for (int64_t b = 0; b < nd; ++b) vv[b] = _mm512_loadu_ps(vr + 16 * b);
        for (int r = 0; r < pq; ++r) {
            const __m512 pr = _mm512_set1_ps(p[r * n_pad + j]);
            for (int64_t b = 0; b < nd; ++b) acc[r][b] = _mm512_fmadd_ps(pr, vv[b], acc[r][b]);
        }
    }
    for (int r = 0; r < pq && r < nq; ++r)
        for (int64_t b = 0; b < nd; ++b)
            _mm512_storeu_ps(out + r * out_row + 16 * b, _mm512_mul_ps(acc[r][b], _mm512_set1_ps(inv[r])));
}

// nd = head_size / 16, a constant in each of the instances below (accumulators stay in registers)
static inline __attribute__((always_inline)) void attend(const float *q, const float *k, const float *v, float *out,
                                                       int64_t n, const int64_t nd, int64_t q_row, int64_t k_row,
                                                       int64_t v_row, int64_t out_row, float scale, float *kt,
                                                       float *scores, const float *bias, int64_t bias_row) {
    const int64_t d = 16 * nd;
    // queries per weighted_values pass: pq * nd accumulators + nd V vectors + 1 broadcast <= 32 registers
    const int pq = 9 * nd + 1 <= 32 ? 8 : 5 * nd + 1 <= 32 ? 4 : 2;
    const int64_t n_pad = (n + 15) & ~(int64_t)15;
    const float q_scale = scale * LOG2E;  // scores in log2 units
    for (int64_t j0 = 0; j0 < n; j0 += 16)
        for (int64_t c0 = 0; c0 < d; c0 += 16) transpose16(k + j0 * k_row + c0, k_row, n - j0, kt + c0 * n_pad + j0, n_pad);
    float qs[QB * 128] __attribute__((aligned(64)));
    for (int64_t i0 = 0; i0 < n; i0 += QB) {
        const int64_t nq = (n - i0) < QB ? (n - i0) : QB;
        for (int64_t r = 0; r < QB; ++r) {  // rows past the end repeat the first (computed, not stored)
            const float *qr = q + (i0 + (r < nq ? r : 0)) * q_row;
            for (int64_t b = 0; b < nd; ++b)
                _mm512_store_ps(qs + r * d + 16 * b, _mm512_mul_ps(_mm512_loadu_ps(qr + 16 * b), _mm512_set1_ps(q_scale)));
        }
        // 1. scores and row maxima
        __m512 mx[QB];
        for (int r = 0; r < QB; ++r) mx[r] = _mm512_set1_ps(-INFINITY);
        for (int64_t j = 0; j < n_pad; j += 16) {
            __m512 a[QB];
            for (int r = 0; r < QB; ++r) a[r] = _mm512_setzero_ps();
            for (int64_t c = 0; c < d; ++c) {
                const __m512 kv = _mm512_loadu_ps(kt + c * n_pad + j);
                for (int r = 0; r < QB; ++r) a[r] = _mm512_fmadd_ps(_mm512_set1_ps(qs[r * d + c]), kv, a[r]);
            }
            finish_scores(a, bias, bias_row, i0, nq, j, n, scores, n_pad, mx);
        }
        // 2. exp2(score - max) in place, row sums
        float inv[QB];
        for (int r = 0; r < QB; ++r) {
            const __m512 m = _mm512_set1_ps(_mm512_reduce_max_ps(mx[r]));
            __m512 sum = _mm512_setzero_ps();
            float *row = scores + r * n_pad;
            for (int64_t j = 0; j < n_pad; j += 16) {
                __m512 e = exp2_512(_mm512_sub_ps(_mm512_loadu_ps(row + j), m), 6);  // ~1e-7 relative
                if (n - j < 16) e = _mm512_maskz_mov_ps(first_lanes(n - j), e);
                _mm512_storeu_ps(row + j, e);
                sum = _mm512_add_ps(sum, e);
            }
            inv[r] = 1.0f / _mm512_reduce_add_ps(sum);
        }
        // 3. out = p V / sum
        for (int r0 = 0; r0 < nq; r0 += pq)
            weighted_values(scores + r0 * n_pad, n_pad, v, v_row, n, pq, nd, inv + r0, out + (i0 + r0) * out_row,
                            out_row, nq - r0);
    }
}

static void attend_one(const float *q, const float *k, const float *v, float *out, int64_t n, int64_t d,
                       int64_t q_row, int64_t k_row, int64_t v_row, int64_t out_row, float scale, float *kt,
                       float *scores, const float *bias, int64_t bias_row) {
    switch (d / 16) {  // 1..8 (the Python side checks)
        case 1: attend(q, k, v, out, n, 1, q_row, k_row, v_row, out_row, scale, kt, scores, bias, bias_row); break;
        case 2: attend(q, k, v, out, n, 2, q_row, k_row, v_row, out_row, scale, kt, scores, bias, bias_row); break;
        case 3: attend(q, k, v, out, n, 3, q_row, k_row, v_row, out_row, scale, kt, scores, bias, bias_row); break;
        case 4: attend(q, k, v, out, n, 4, q_row, k_row, v_row, out_row, scale, kt, scores, bias, bias_row); break;
        case 5: attend(q, k, v, out, n, 5, q_row, k_row, v_row, out_row, scale, kt, scores, bias, bias_row); break;
        case 6: attend(q, k, v, out, n, 6, q_row, k_row, v_row, out_row, scale, kt, scores, bias, bias_row); break;
        case 7: attend(q, k, v, out, n, 7, q_row, k_row, v_row, out_row, scale, kt, scores, bias, bias_row); break;
        case 8: attend(q, k, v, out, n, 8, q_row, k_row, v_row, out_row, scale, kt, scores, bias, bias_row); break;
    }
}

// q [tokens, heads, d] (row stride q_row floats, head stride q_head), k / v [tokens, kv_heads, d] likewise,
// out [tokens, heads, d] (row stride out_row, head stride d); seq_starts [num_seqs + 1]; order: sequence
// indices, longest first (work item w is head w % heads of sequence order[w / heads]). d must be a multiple
// of 16, at most 128. bias: NULL, or a score bias [heads, L, L] (head stride bias_head, row stride bias_row)
// added to every sequence's scores by position within the sequence (query i, key j: bias[h, i, j]); L is at
// least the longest sequence.
void wde_varlen_attention(const float *q, const float *k, const float *v, float *out, const int64_t *seq_starts,
                          int64_t num_seqs, int64_t heads, int64_t kv_heads, int64_t d, int64_t q_row,
                          int64_t q_head, int64_t k_row, int64_t k_head, int64_t v_row, int64_t v_head,
                          int64_t out_row, float scale, const int64_t *order, int num_threads, const float *bias,
                          int64_t bias_head, int64_t bias_row) {
    const int64_t max_pad = max_padded_len(seq_starts, num_seqs);
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
