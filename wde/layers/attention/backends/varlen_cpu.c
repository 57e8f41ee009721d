// Bidirectional multi-head attention over a flat, unpadded float32 batch, for CPUs with AVX-512F.
//
// One work item per (sequence, head): K of that head is packed transposed ([head_size, keys], keys padded to
// a multiple of 16), V row-major; then for each block of 4 queries the scores against every key are
// computed with broadcast FMAs, scaled, soft-maxed (exp by a Cephes polynomial, ~1 ulp), and the output is
// the probability-weighted sum of V rows, divided by the row sum at the end. Work items run longest first
// on an OpenMP team (dynamic), so that one long sequence does not leave a thread idle. No padding between
// sequences, no gather / scatter copies: q, k, v are read in place through their strides (a fused QKV
// projection's views work as they are) and the output is written in [tokens, heads, head_size] order.
//
// Built at first use by wde/layers/attention/backends/varlen_cpu.py (plain C, no torch headers).

#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define QB 4  // queries per block in the score loop

static inline __m512 exp512(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-87.3f));
    __m512 fx = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(fx, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(fx, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 y = _mm512_set1_ps(1.9875691500E-4f);
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.3981999507E-3f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(8.3334519073E-3f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(4.1665795894E-2f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.6666665459E-1f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(5.0000001201E-1f));
    y = _mm512_fmadd_ps(y, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(y, fx);
}

// softmax numerators in place over row[0:n] (n_pad = n rounded up to 16; lanes past n become 0); returns sum
static inline float softmax_row(float *row, int64_t n, int64_t n_pad, float scale) {
    __m512 vmax = _mm512_set1_ps(-INFINITY);
    for (int64_t j = 0; j < n_pad; j += 16) {
        __mmask16 m = (n - j) >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - j)) - 1u);
        __m512 s = _mm512_mul_ps(_mm512_loadu_ps(row + j), _mm512_set1_ps(scale));
        s = _mm512_mask_mov_ps(_mm512_set1_ps(-INFINITY), m, s);
        _mm512_storeu_ps(row + j, s);
        vmax = _mm512_max_ps(vmax, s);
    }
    __m512 mx = _mm512_set1_ps(_mm512_reduce_max_ps(vmax));
    __m512 vsum = _mm512_setzero_ps();
    for (int64_t j = 0; j < n_pad; j += 16) {
        __mmask16 m = (n - j) >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - j)) - 1u);
        __m512 e = _mm512_maskz_mov_ps(m, exp512(_mm512_sub_ps(_mm512_loadu_ps(row + j), mx)));
        _mm512_storeu_ps(row + j, e);
        vsum = _mm512_add_ps(vsum, e);
    }
    return _mm512_reduce_add_ps(vsum);
}

// nd = head_size / 16, a constant in each of the instances below (accumulators stay in registers)
static inline __attribute__((always_inline)) void attend(const float *q, const float *k, const float *v, float *out,
                                                       int64_t n, const int64_t nd, int64_t q_row, int64_t k_row,
                                                       int64_t v_row, int64_t out_row, float scale, float *kt,
                                                       float *vb, float *scores) {
    const int64_t d = 16 * nd;
    const int64_t n_pad = (n + 15) & ~(int64_t)15;
    for (int64_t c = 0; c < d; ++c) memset(kt + c * n_pad + n, 0, (size_t)(n_pad - n) * sizeof(float));
    for (int64_t j = 0; j < n; ++j) {
        const float *kr = k + j * k_row;
        for (int64_t c = 0; c < d; ++c) kt[c * n_pad + j] = kr[c];
        memcpy(vb + j * d, v + j * v_row, (size_t)d * sizeof(float));
    }
    for (int64_t i0 = 0; i0 < n; i0 += QB) {
        const int64_t nq = (n - i0) < QB ? (n - i0) : QB;
        const float *qr[QB];
        for (int64_t r = 0; r < QB; ++r) qr[r] = q + (i0 + (r < nq ? r : 0)) * q_row;
        for (int64_t j = 0; j < n_pad; j += 16) {
            __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps(), a2 = _mm512_setzero_ps(),
                   a3 = _mm512_setzero_ps();
            for (int64_t c = 0; c < d; ++c) {
                __m512 kv = _mm512_loadu_ps(kt + c * n_pad + j);
                a0 = _mm512_fmadd_ps(_mm512_set1_ps(qr[0][c]), kv, a0);
                a1 = _mm512_fmadd_ps(_mm512_set1_ps(qr[1][c]), kv, a1);
                a2 = _mm512_fmadd_ps(_mm512_set1_ps(qr[2][c]), kv, a2);
                a3 = _mm512_fmadd_ps(_mm512_set1_ps(qr[3][c]), kv, a3);
            }
            _mm512_storeu_ps(scores + 0 * n_pad + j, a0);
            _mm512_storeu_ps(scores + 1 * n_pad + j, a1);
            _mm512_storeu_ps(scores + 2 * n_pad + j, a2);
            _mm512_storeu_ps(scores + 3 * n_pad + j, a3);
        }
        float inv[QB];
        for (int64_t r = 0; r < QB; ++r) inv[r] = 1.0f / softmax_row(scores + r * n_pad, n, n_pad, scale);
        __m512 acc[QB][8];
        for (int64_t r = 0; r < QB; ++r)
            for (int64_t b = 0; b < nd; ++b) acc[r][b] = _mm512_setzero_ps();
        for (int64_t j = 0; j < n; ++j) {
            const float *vr = vb + j * d;
            for (int64_t b = 0; b < nd; ++b) {
                const __m512 vv = _mm512_loadu_ps(vr + 16 * b);
                for (int64_t r = 0; r < QB; ++r)
                    acc[r][b] = _mm512_fmadd_ps(_mm512_set1_ps(scores[r * n_pad + j]), vv, acc[r][b]);
            }
        }
        for (int64_t r = 0; r < nq; ++r) {
            float *o = out + (i0 + r) * out_row;
            for (int64_t b = 0; b < nd; ++b)
                _mm512_storeu_ps(o + 16 * b, _mm512_mul_ps(acc[r][b], _mm512_set1_ps(inv[r])));
        }
    }
}

static void attend_one(const float *q, const float *k, const float *v, float *out, int64_t n, int64_t d,
                       int64_t q_row, int64_t k_row, int64_t v_row, int64_t out_row, float scale, float *kt,
                       float *vb, float *scores) {
    switch (d / 16) {  // 1..8 (the Python side checks)
        case 1: attend(q, k, v, out, n, 1, q_row, k_row, v_row, out_row, scale, kt, vb, scores); break;
        case 2: attend(q, k, v, out, n, 2, q_row, k_row, v_row, out_row, scale, kt, vb, scores); break;
        case 3: attend(q, k, v, out, n, 3, q_row, k_row, v_row, out_row, scale, kt, vb, scores); break;
        case 4: attend(q, k, v, out, n, 4, q_row, k_row, v_row, out_row, scale, kt, vb, scores); break;
        case 5: attend(q, k, v, out, n, 5, q_row, k_row, v_row, out_row, scale, kt, vb, scores); break;
        case 6: attend(q, k, v, out, n, 6, q_row, k_row, v_row, out_row, scale, kt, vb, scores); break;
        case 7: attend(q, k, v, out, n, 7, q_row, k_row, v_row, out_row, scale, kt, vb, scores); break;
        case 8: attend(q, k, v, out, n, 8, q_row, k_row, v_row, out_row, scale, kt, vb, scores); break;
    }
}

// q [tokens, heads, d] (row stride q_row floats, head stride q_head), k / v [tokens, kv_heads, d] likewise,
// out [tokens, heads, d] (row stride out_row, head stride d); seq_starts [num_seqs + 1]; order: sequence
// indices, longest first (work item w is head w % heads of sequence order[w / heads]). d must be a multiple of 16, at most 128.
void wde_varlen_attention(const float *q, const float *k, const float *v, float *out, const int64_t *seq_starts,
                          int64_t num_seqs, int64_t heads, int64_t kv_heads, int64_t d, int64_t q_row,
                          int64_t q_head, int64_t k_row, int64_t k_head, int64_t v_row, int64_t v_head,
                          int64_t out_row, float scale, const int64_t *order, int num_threads) {
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
        float *buf = (float *)aligned_alloc(64, (size_t)(2 * d * max_pad + QB * max_pad + 64) * sizeof(float));
        float *kt = buf, *vb = buf + d * max_pad, *scores = buf + 2 * d * max_pad;
#pragma omp for schedule(dynamic, 1)
        for (int64_t w = 0; w < total; ++w) {
            const int64_t s = order[w / heads], h = w % heads, hk = h / per_kv;
            const int64_t start = seq_starts[s], n = seq_starts[s + 1] - start;
            if (n == 0) continue;
            attend_one(q + start * q_row + h * q_head, k + start * k_row + hk * k_head, v + start * v_row + hk * v_head,
                       out + start * out_row + h * d, n, d, q_row, k_row, v_row, out_row, scale, kt, vb, scores);
        }
        free(buf);
    }
}
