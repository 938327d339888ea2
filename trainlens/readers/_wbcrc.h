/* CRC-32 (IEEE 802.3, zlib's crc32) of the W&B transaction log's chunks.
 *
 * Every chunk is checked, so the CRC runs over the whole file (1.1 GB for a 1M-step run).
 * Slice-by-8 tables take ~0.35 s for that here; folding with carry-less multiplication
 * (PCLMULQDQ: V. Gopal et al., "Fast CRC Computation for Generic Polynomials Using
 * PCLMULQDQ Instruction", Intel, 2009) takes a few hundredths. The CPU is asked once at
 * import; without the instruction (another architecture, an old x86) the tables do it.
 *
 * Folding keeps the data's value modulo the polynomial: four 16-byte lanes are folded
 * 64 bytes ahead while 64 bytes remain, then into one lane, then 16 bytes at a time. The
 * last lane is a 16-byte message with the same CRC remainder as everything folded into it,
 * so the tables finish it and the tail (< 16 bytes) instead of a Barrett reduction.
 * Fold constants: x^(4*128+32), x^(4*128-32), x^(128+32), x^(128-32) mod P (P = zlib's
 * 0x104C11DB7), bit-reflected and shifted left by one as in the paper (computed with a
 * few lines of Python; tests/test_wbscan_parts.py holds the result to zlib.crc32). */
#ifndef TRAINLENS_WBCRC_H
#define TRAINLENS_WBCRC_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__GNUC__) && defined(__x86_64__)
#define WB_CLMUL 1
#include <immintrin.h>
#else
#define WB_CLMUL 0
#endif

static uint32_t wb_crc_table[8][256];
static int wb_have_clmul = 0;

static void wb_crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
        wb_crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = wb_crc_table[0][i];
        for (int t = 1; t < 8; t++) {
            c = wb_crc_table[0][c & 0xFF] ^ (c >> 8);
            wb_crc_table[t][i] = c;
        }
    }
#if WB_CLMUL
    __builtin_cpu_init();
    wb_have_clmul = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
#endif
}

/* the register form (no inversion before or after), slice by 8 */
static uint32_t wb_crc_tables(uint32_t c, const uint8_t *p, size_t n) {
    while (n >= 8) {
        uint32_t lo = ((uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
                       ((uint32_t)p[3] << 24)) ^ c;
        uint32_t hi = (uint32_t)p[4] | ((uint32_t)p[5] << 8) | ((uint32_t)p[6] << 16) |
                      ((uint32_t)p[7] << 24);
        c = wb_crc_table[7][lo & 0xFF] ^ wb_crc_table[6][(lo >> 8) & 0xFF] ^
            wb_crc_table[5][(lo >> 16) & 0xFF] ^ wb_crc_table[4][lo >> 24] ^
            wb_crc_table[3][hi & 0xFF] ^ wb_crc_table[2][(hi >> 8) & 0xFF] ^
            wb_crc_table[1][(hi >> 16) & 0xFF] ^ wb_crc_table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--) c = wb_crc_table[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
    return c;
}

#if WB_CLMUL
/* lane * x^d folded onto the next 16 bytes: k holds the constants for the low and the
 * high 64 bits of the lane */
__attribute__((target("pclmul,sse4.1"))) static inline __m128i wb_fold(__m128i lane, __m128i k,
                                                                      __m128i next) {
    __m128i a = _mm_clmulepi64_si128(lane, k, 0x00);
    __m128i b = _mm_clmulepi64_si128(lane, k, 0x11);
    return _mm_xor_si128(_mm_xor_si128(a, b), next);
}

/* the register form, n >= 64 */
__attribute__((target("pclmul,sse4.1"))) static uint32_t wb_crc_clmul(uint32_t c,
                                                                     const uint8_t *p,
                                                                     size_t n) {
    const __m128i k1k2 = _mm_set_epi64x(0x1c6e41596LL, 0x154442bd4LL); /* 4 lanes on */
    const __m128i k3k4 = _mm_set_epi64x(0x0ccaa009eLL, 0x1751997d0LL); /* 1 lane on */
    __m128i x0 = _mm_loadu_si128((const __m128i *)p);
    __m128i x1 = _mm_loadu_si128((const __m128i *)(p + 16));
    __m128i x2 = _mm_loadu_si128((const __m128i *)(p + 32));
    __m128i x3 = _mm_loadu_si128((const __m128i *)(p + 48));
    x0 = _mm_xor_si128(x0, _mm_cvtsi32_si128((int)c)); /* the register enters as data */
    p += 64;
    n -= 64;
    while (n >= 64) {
        x0 = wb_fold(x0, k1k2, _mm_loadu_si128((const __m128i *)p));
        x1 = wb_fold(x1, k1k2, _mm_loadu_si128((const __m128i *)(p + 16)));
        x2 = wb_fold(x2, k1k2, _mm_loadu_si128((const __m128i *)(p + 32)));
        x3 = wb_fold(x3, k1k2, _mm_loadu_si128((const __m128i *)(p + 48)));
        p += 64;
        n -= 64;
    }
    x0 = wb_fold(x0, k3k4, x1);
    x0 = wb_fold(x0, k3k4, x2);
    x0 = wb_fold(x0, k3k4, x3);
    while (n >= 16) {
        x0 = wb_fold(x0, k3k4, _mm_loadu_si128((const __m128i *)p));
        p += 16;
        n -= 16;
    }
    uint8_t lane[16];
    _mm_storeu_si128((__m128i *)lane, x0);
    return wb_crc_tables(wb_crc_tables(0, lane, 16), p, n);
}
#endif

/* zlib's crc32(crc, p, n) */
static uint32_t wb_crc32(uint32_t crc, const uint8_t *p, size_t n) {
    uint32_t c = ~crc;
#if WB_CLMUL
    if (wb_have_clmul && n >= 64) return ~wb_crc_clmul(c, p, n);
#endif
    return ~wb_crc_tables(c, p, n);
}

#endif
