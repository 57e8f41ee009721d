// Bidirectional multi-head attention over a flat, unpadded float32 batch with bfloat16 products, for CPUs with
// AVX512-BF16 (vdpbf16ps: 32 bf16 x bf16 products summed pairwise into 16 float32 lanes, twice the float32
// FMA's multiply-adds per instruction). The layout and the steps are varlen_cpu_avx512.c's; what differs:
//   - K of a head is rounded to bf16 (round to nearest even) and packed transposed in PAIRS of dimensions:
//     kt[c / 2][key] holds (K[key, c], K[key, c + 1]) in one 32-bit lane, so one vdpbf16ps multiplies 16 keys
//     by a broadcast pair of query dimensions (a bf16 row read as 32-bit words is already such pairs: the
//     packing is the float32 kernel's 16 x 16 transpose of 32-bit words);
//   - V is packed in pairs of KEYS: vt[key / 2][c] holds (V[key, c], V[key + 1, c]), multiplied by a
//     broadcast pair of probabilities;
//   - the scores, their maxima, exp2 and the row sums stay float32; the probabilities are rounded to bf16 for
//     the weighted values only, and every sum accumulates in float32.
// Against the float32 kernel the output moves by a few parts in a thousand of its scale: the attention of
// the int8 path, whose GEMMs round their inputs coarser (wde/layers/quantization), runs here where the CPU
// has AVX512-BF16 (varlen_kernel.py's "avx512bf16" products).
//
// Built with -DWDE_BF16_IO, q, k, v and out are bfloat16 instead (a bfloat16 model's layers: the same products,
// the inputs taken as they are and the output rounded once); the position bias stays float32.
//
// Built at first use by wde/layers/attention/backends/varlen_kernel.py (plain C, no torch headers).

#include "varlen_cpu_avx512.h"  // QB, LOG2E, first_lanes, exp2_512, transpose16, finish_scores

// 16 float32 -> 16 bf16 (256 bits), round to nearest even
static inline __m256i to_bf16(__m512 x) { return (__m256i)_mm512_cvtneps_pbh(x); }

#ifdef WDE_BF16_IO
typedef uint16_t elem_t;  // q, k, v and out: bfloat16 bits
// 16 elements as float32 (exact) / as bf16 (as they are); 16 float32 stored rounded
static inline __m512 load16(const elem_t *p) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
}
static inline __m256i load16_bf16(const elem_t *p) { return _mm256_loadu_si256((const __m256i *)p); }
static inline void store16(elem_t *p, __m512 x) { _mm256_storeu_si256((__m256i *)p, to_bf16(x)); }
#else
typedef float elem_t;
static inline __m512 load16(const elem_t *p) { return _mm512_loadu_ps(p); }
static inline __m256i load16_bf16(const elem_t *p) { return to_bf16(_mm512_loadu_ps(p)); }
static inline void store16(elem_t *p, __m512 x) { _mm512_storeu_ps(p, x); }
#endif

// out rows [i0, i0 + pq) = (p[r, :n] V) * inv[r]; p as bf16 pairs (pp: n_pad / 2 words a row), V packed as
// vt[key pair][16 * nd] (words); nd and pq constants in each instance
static inline __attribute__((always_inline)) void weighted_values(const uint32_t *pp, int64_t n_pad,
                                                                const uint32_t *vt, const int pq, const int64_t nd,
                                                                const float *inv, elem_t *out, int64_t out_row,
                                                                int64_t nq) {
    const int64_t d = 16 * nd, num_pairs = n_pad / 2;
    __m512 acc[8][8];
    for (int r = 0; r < pq; ++r)
        for (int64_t b = 0; b < nd; ++b) acc[r][b] = _mm512_setzero_ps();
    for (int64_t jp = 0; jp < num_pairs; ++jp) {
        __m512bh vv[8];
        for (int64_t b = 0; b < nd; ++b) vv[b] = (__m512bh)_mm512_loadu_si512(vt + jp * d + 16 * b);
        for (int r = 0; r < pq; ++r) {
            const __m512bh pr = (__m512bh)_mm512_set1_epi32((int)pp[r * num_pairs + jp]);
            for (int64_t b = 0; b < nd; ++b) acc[r][b] = _mm512_dpbf16_ps(acc[r][b], pr, vv[b]);
        }
    }
    for (int r = 0; r < pq && r < nq; ++r)
        for (int64_t b = 0; b < nd; ++b)
            store16(out + r * out_row + 16 * b, _mm512_mul_ps(acc[r][b], _mm512_set1_ps(inv[r])));
}

// nd = head_size / 16, a constant in each of the instances below. Scratch: kt [d / 2][n_pad] words, vt
// [n_pad / 2][d] words, rows [n_pad][d / 2] words (K as bf16), scores [QB][n_pad] floats, pp [QB][n_pad / 2].
static inline __attribute__((always_inline)) void attend(const elem_t *q, const elem_t *k, const elem_t *v, elem_t *out,
                                                       int64_t n, const int64_t nd, int64_t q_row, int64_t k_row,
                                                       int64_t v_row, int64_t out_row, float scale, uint32_t *kt,
                                                       uint32_t *vt, uint32_t *rows, float *scores, uint32_t *pp,
                                                       const float *bias, int64_t bias_row) {
    const int64_t d = 16 * nd, half = 8 * nd;  // half: dimension pairs a row
    const int pq = 9 * nd + 1 <= 32 ? 8 : 5 * nd + 1 <= 32 ? 4 : 2;
    const int64_t n_pad = (n + 15) & ~(int64_t)15;
    const float q_scale = scale * LOG2E;
    // K: each row to bf16 (its words are dimension pairs), then [key][pair] -> [pair][key]
    for (int64_t j = 0; j < n; ++j)
        for (int64_t b = 0; b < nd; ++b)
            _mm256_storeu_si256((__m256i *)(rows + j * half + 8 * b), load16_bf16(k + j * k_row + 16 * b));
    for (int64_t j0 = 0; j0 < n; j0 += 16) {
        int64_t c0 = 0;
        for (; c0 + 16 <= half; c0 += 16)
            transpose16((const float *)(rows + j0 * half + c0), half, n - j0, (float *)(kt + c0 * n_pad + j0), n_pad);
        for (int64_t c = c0; c < half; ++c)  // the last 8 pairs of an odd nd: word by word
            for (int64_t j = j0; j < j0 + 16; ++j) kt[c * n_pad + j] = j < n ? rows[j * half + c] : 0u;
    }
    // V: rows j, j + 1 interleaved per dimension: (V[j, c], V[j + 1, c]) in the word of pair j / 2
    const __m512i interleave = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7,
                                                22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    for (int64_t j = 0; j < n_pad; j += 2)
        for (int64_t b = 0; b < nd; ++b) {
            const __m256i even = j < n ? load16_bf16(v + j * v_row + 16 * b) : _mm256_setzero_si256();
            const __m256i odd = j + 1 < n ? load16_bf16(v + (j + 1) * v_row + 16 * b) : _mm256_setzero_si256();
            const __m512i both = _mm512_inserti64x4(_mm512_castsi256_si512(even), odd, 1);  // even low, odd high
            _mm512_storeu_si512(vt + (j / 2) * d + 16 * b, _mm512_permutexvar_epi16(interleave, both));
        }
    uint32_t qs[QB * 64] __attribute__((aligned(64)));  // a block's scaled queries as bf16 pairs
    for (int64_t i0 = 0; i0 < n; i0 += QB) {
        const int64_t nq = (n - i0) < QB ? (n - i0) : QB;
        for (int64_t r = 0; r < QB; ++r) {  // rows past the end repeat the first (computed, not stored)
            const elem_t *qr = q + (i0 + (r < nq ? r : 0)) * q_row;
            for (int64_t b = 0; b < nd; ++b)
                _mm256_store_si256((__m256i *)(qs + r * half + 8 * b),
                                   to_bf16(_mm512_mul_ps(load16(qr + 16 * b), _mm512_set1_ps(q_scale))));
        }
        // 1. scores and row maxima
        __m512 mx[QB];
        for (int r = 0; r < QB; ++r) mx[r] = _mm512_set1_ps(-INFINITY);
        for (int64_t j = 0; j < n_pad; j += 16) {
            __m512 a[QB];
            for (int r = 0; r < QB; ++r) a[r] = _mm512_setzero_ps();
            for (int64_t c = 0; c < half; ++c) {
                const __m512bh kv = (__m512bh)_mm512_loadu_si512(kt + c * n_pad + j);
                for (int r = 0; r < QB; ++r)
                    a[r] = _mm512_dpbf16_ps(a[r], (__m512bh)_mm512_set1_epi32((int)qs[r * half + c]), kv);
            }
            finish_scores(a, bias, bias_row, i0, nq, j, n, scores, n_pad, mx);
        }
        // 2. exp2(score - max), row sums in float32, the probabilities as bf16 pairs
        float inv[QB];
        for (int r = 0; r < QB; ++r) {
            const __m512 m = _mm512_set1_ps(_mm512_reduce_max_ps(mx[r]));
            __m512 sum = _mm512_setzero_ps();
            const float *row = scores + r * n_pad;
            for (int64_t j = 0; j < n_pad; j += 16) {
                __m512 e = exp2_512(_mm512_sub_ps(_mm512_loadu_ps(row + j), m), 4);  // bf16 keeps ~4e-3
                if (n - j < 16) e = _mm512_maskz_mov_ps(first_lanes(n - j), e);
                _mm256_storeu_si256((__m256i *)(pp + r * (n_pad / 2) + j / 2), to_bf16(e));
                sum = _mm512_add_ps(sum, e);
            }
            inv[r] = 1.0f / _mm512_reduce_add_ps(sum);
        }
        // 3. out = p V / sum
        for (int r0 = 0; r0 < nq; r0 += pq)
            weighted_values(pp + r0 * (n_pad / 2), n_pad, vt, pq, nd, inv + r0, out + (i0 + r0) * out_row, out_row,
                            nq - r0);
    }
}

static void attend_one(const elem_t *q, const elem_t *k, const elem_t *v, elem_t *out, int64_t n, int64_t d,
                       int64_t q_row, int64_t k_row, int64_t v_row, int64_t out_row, float scale, uint32_t *kt,
                       uint32_t *vt, uint32_t *rows, float *scores, uint32_t *pp, const float *bias,
                       int64_t bias_row) {
#define ATTEND(ND) attend(q, k, v, out, n, ND, q_row, k_row, v_row, out_row, scale, kt, vt, rows, scores, pp, bias, bias_row)
    switch (d / 16) {  // 1..8 (the Python side checks)
        case 1: ATTEND(1); break;
        case 2: ATTEND(2); break;
        case 3: ATTEND(3); break;
        case 4: ATTEND(4); break;
        case 5: ATTEND(5); break;
        case 6: ATTEND(6); break;
        case 7: ATTEND(7); break;
        case 8: ATTEND(8); break;
    }
#undef ATTEND
}

// The float32 kernel's entry point and arguments (varlen_cpu_avx512.c): q [tokens, heads, d], k / v [tokens,
// kv_heads, d], out [tokens, heads, d] (float32, or bfloat16 with WDE_BF16_IO; strides in elements),
// seq_starts [num_seqs + 1], order (longest first), bias NULL or float32 [heads, L, L]; d a multiple of 16,
// at most 128.
void wde_varlen_attention(const elem_t *q, const elem_t *k, const elem_t *v, elem_t *out, const int64_t *seq_starts,
                          int64_t num_seqs, int64_t heads, int64_t kv_heads, int64_t d, int64_t q_row,
                          int64_t q_head, int64_t k_row, int64_t k_head, int64_t v_row, int64_t v_head,
                          int64_t out_row, float scale, const int64_t *order, int num_threads, const float *bias,
                          int64_t bias_head, int64_t bias_row) {
    const int64_t max_pad = max_padded_len(seq_starts, num_seqs);
    const int64_t per_kv = heads / kv_heads;
    const int64_t total = num_seqs * heads;
#pragma omp parallel num_threads(num_threads)
    {
        // words: kt d / 2 x max_pad, vt max_pad / 2 x d, rows max_pad x d / 2, scores QB x max_pad (floats),
        // pp QB x max_pad / 2
        const size_t words = (size_t)(d * max_pad / 2) * 3 + QB * max_pad + QB * max_pad / 2 + 64;
        uint32_t *buf = (uint32_t *)aligned_alloc(64, ((words * sizeof(uint32_t) + 63) / 64) * 64);
        uint32_t *kt = buf, *vt = kt + d * max_pad / 2, *rows = vt + d * max_pad / 2;
        float *scores = (float *)(rows + d * max_pad / 2);
        uint32_t *pp = (uint32_t *)(scores + QB * max_pad);
#pragma omp for schedule(dynamic, 1)
        for (int64_t w = 0; w < total; ++w) {
            const int64_t s = order[w / heads], h = w % heads, hk = h / per_kv;
            const int64_t start = seq_starts[s], n = seq_starts[s + 1] - start;
            if (n == 0) continue;
            attend_one(q + start * q_row + h * q_head, k + start * k_row + hk * k_head, v + start * v_row + hk * v_head,
                       out + start * out_row + h * d, n, d, q_row, k_row, v_row, out_row, scale, kt, vt, rows,
                       scores, pp, bias ? bias + h * bias_head : NULL, bias_row);
        }
        free(buf);
    }
}
