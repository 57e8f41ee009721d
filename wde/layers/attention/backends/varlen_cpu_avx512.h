// What the AVX-512 varlen attention kernels share (varlen_cpu_avx512.c: float32 products;
// varlen_cpu_avx512bf16.c: bfloat16 products): lane masks, exp2, the 16 x 16 transpose that packs K, the end of
// a block of scores (position bias, keys past the end, row maxima) and the longest sequence's padded length.
// Included by each kernel's source (varlen_kernel.py hashes it with them for its build cache).

#pragma once

#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#define QB 8  // queries per block
#define LOG2E 1.44269504088896341f

static inline __mmask16 first_lanes(int64_t count) {  // the first count (< 16) lanes
    return (__mmask16)((1u << count) - 1u);
}

// 2^x for x <= 0: 2^r = e^(r ln2) on r in [-0.5, 0.5] from its Taylor terms up to `degree` (a constant: 6 gives a
// relative error < 1.2e-7, 4 < 4.3e-5), scaled by 2^round(x). Below -125 it gives ~2^-125, never a denormal
// (an add of denormals costs a microcode assist on many x86 cores): tiny against the row sum (>= 1), and lanes
// past the keys are masked to 0.
static inline __attribute__((always_inline)) __m512 exp2_512(__m512 x, const int degree) {
    static const float taylor[7] = {1.0f,
                                    6.9314718055994531e-1f,
                                    2.4022650695910071e-1f,
                                    5.5504108664821580e-2f,
                                    9.6181291076284772e-3f,
                                    1.3333558146428443e-3f,
                                    1.5403530393381606e-4f};  // ln2^i / i!
    x = _mm512_max_ps(x, _mm512_set1_ps(-125.0f));
    const __m512 fx = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 r = _mm512_sub_ps(x, fx);  // [-0.5, 0.5]
    __m512 y = _mm512_set1_ps(taylor[degree]);
    for (int i = degree - 1; i >= 0; --i) y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(taylor[i]));
    return _mm512_scalef_ps(y, fx);
}

// dst[c * ld + j] = src[j * row + c] for c < 16, j < 16, of any 32-bit elements (rows j >= n are zeros)
static inline void transpose16(const float *src, int64_t row, int64_t n, float *dst, int64_t ld) {
    __m512 r[16], t[16];
    for (int j = 0; j < 16; ++j) r[j] = j < n ? _mm512_loadu_ps(src + j * row) : _mm512_setzero_ps();
    for (int j = 0; j < 16; j += 2) {
        t[j] = _mm512_unpacklo_ps(r[j], r[j + 1]);
        t[j + 1] = _mm512_unpackhi_ps(r[j], r[j + 1]);
    }
    for (int j = 0; j < 16; j += 4) {
        r[j] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[j]), _mm512_castps_pd(t[j + 2])));
        r[j + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[j]), _mm512_castps_pd(t[j + 2])));
        r[j + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[j + 1]), _mm512_castps_pd(t[j + 3])));
        r[j + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[j + 1]), _mm512_castps_pd(t[j + 3])));
    }
    for (int j = 0; j < 4; ++j) {  // 128-bit lanes: rows j, j+4, j+8, j+12
        t[j] = _mm512_shuffle_f32x4(r[j], r[j + 4], 0x88);
        t[j + 4] = _mm512_shuffle_f32x4(r[j], r[j + 4], 0xdd);
        t[j + 8] = _mm512_shuffle_f32x4(r[j + 8], r[j + 12], 0x88);
        t[j + 12] = _mm512_shuffle_f32x4(r[j + 8], r[j + 12], 0xdd);
    }
    for (int j = 0; j < 4; ++j) {
        r[j] = _mm512_shuffle_f32x4(t[j], t[j + 8], 0x88);
        r[j + 8] = _mm512_shuffle_f32x4(t[j], t[j + 8], 0xdd);
        r[j + 4] = _mm512_shuffle_f32x4(t[j + 4], t[j + 12], 0x88);
        r[j + 12] = _mm512_shuffle_f32x4(t[j + 4], t[j + 12], 0xdd);
    }
    for (int c = 0; c < 16; ++c) _mm512_storeu_ps(dst + c * ld, r[c]);  // r[c]: column c of the 16 rows
}

// A block's scores a[QB] (queries i0.., keys j..j + 15, in log2 units) finished: + bias[query, key] (in log2
// units too) when there is a bias, keys past n set to -inf, stored in scores[r * n_pad + j], row maxima kept
static inline __attribute__((always_inline)) void finish_scores(__m512 *a, const float *bias, int64_t bias_row,
                                                              int64_t i0, int64_t nq, int64_t j, int64_t n,
                                                              float *scores, int64_t n_pad, __m512 *mx) {
    if (bias) {
        const __mmask16 keys = n - j < 16 ? first_lanes(n - j) : (__mmask16)0xffff;
        for (int r = 0; r < QB; ++r) {
            const float *bias_r = bias + (i0 + (r < nq ? r : 0)) * bias_row + j;
            a[r] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(keys, bias_r), _mm512_set1_ps(LOG2E), a[r]);
        }
    }
    if (n - j < 16) {
        const __mmask16 keys = first_lanes(n - j);
        for (int r = 0; r < QB; ++r) a[r] = _mm512_mask_mov_ps(_mm512_set1_ps(-INFINITY), keys, a[r]);
    }
    for (int r = 0; r < QB; ++r) {
        _mm512_storeu_ps(scores + r * n_pad + j, a[r]);
        mx[r] = _mm512_max_ps(mx[r], a[r]);
    }
}

// The longest sequence, padded to a multiple of 16 (the scratch each thread allocates)
static inline int64_t max_padded_len(const int64_t *seq_starts, int64_t num_seqs) {
    int64_t max_len = 0;
    for (int64_t s = 0; s < num_seqs; ++s) {
        const int64_t n = seq_starts[s + 1] - seq_starts[s];
        if (n > max_len) max_len = n;
    }
    return (max_len + 15) & ~(int64_t)15;
}
