/* CRC-32C (Castagnoli) as TFRecord uses it, and the TFRecord framing constants, for the
 * compiled TensorBoard lane (_tbscan.c, which includes this once, after its own headers):
 * slice-by-8 tables, or the CPU's crc32 instruction where it has SSE4.2 (asked once, at
 * import). */
#ifndef TRAINLENS_TBCRC_H
#define TRAINLENS_TBCRC_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define TB_X86_CRC 1
#include <nmmintrin.h>
#else
#define TB_X86_CRC 0
#endif

/* The TFRecord format, as trainlens/readers/_tfrecord_format.py writes it for Python; the
 * module exports these and a test checks that both agree. */
#define TFR_CRC32C_POLY 0x82F63B78u
#define TFR_MASK_DELTA 0xA282EAD8u
#define TFR_HEADER 12   /* uint64 length + its masked CRC */
#define TFR_OVERHEAD 16 /* header + the data's masked CRC */

static uint32_t crc_table[8][256];
static int have_sse42 = 0;

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (TFR_CRC32C_POLY & (0u - (c & 1u)));
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = crc_table[0][i];
        for (int t = 1; t < 8; t++) {
            c = crc_table[0][c & 0xFF] ^ (c >> 8);
            crc_table[t][i] = c;
        }
    }
#if TB_X86_CRC
    __builtin_cpu_init();
    have_sse42 = __builtin_cpu_supports("sse4.2");
#endif
}

static uint32_t crc_soft(const uint8_t *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    while (n >= 8) {
        uint32_t lo = (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
                      ((uint32_t)p[3] << 24);
        uint32_t hi = (uint32_t)p[4] | ((uint32_t)p[5] << 8) | ((uint32_t)p[6] << 16) |
                      ((uint32_t)p[7] << 24);
        c ^= lo;
        c = crc_table[7][c & 0xFF] ^ crc_table[6][(c >> 8) & 0xFF] ^
            crc_table[5][(c >> 16) & 0xFF] ^ crc_table[4][c >> 24] ^ crc_table[3][hi & 0xFF] ^
            crc_table[2][(hi >> 8) & 0xFF] ^ crc_table[1][(hi >> 16) & 0xFF] ^
            crc_table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--) c = crc_table[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

#if TB_X86_CRC
__attribute__((target("sse4.2"))) static uint32_t crc_hard(const uint8_t *p, size_t n) {
#if defined(__x86_64__)
    uint64_t c = 0xFFFFFFFFu;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c = _mm_crc32_u64(c, w);
        p += 8;
        n -= 8;
    }
    uint32_t c32 = (uint32_t)c;
#else
    uint32_t c32 = 0xFFFFFFFFu;
#endif
    if (n >= 4) {
        uint32_t w;
        memcpy(&w, p, 4);
        c32 = _mm_crc32_u32(c32, w);
        p += 4;
        n -= 4;
    }
    while (n--) c32 = _mm_crc32_u8(c32, *p++);
    return c32 ^ 0xFFFFFFFFu;
}
#endif

static inline uint32_t crc32c(const uint8_t *p, size_t n) {
#if TB_X86_CRC
    if (have_sse42) return crc_hard(p, n);
#endif
    return crc_soft(p, n);
}

static inline uint32_t masked(uint32_t crc) {
    return ((crc >> 15) | (crc << 17)) + TFR_MASK_DELTA;
}

#endif
