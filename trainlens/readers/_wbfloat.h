/* Decimal text to the nearest double, bit for bit what Python's float() gives, for the
 * numbers W&B writes into value_json (repr of a float: up to 17 significant digits).
 *
 * Two exact paths, then strtod for what neither decides:
 * - Clinger's fast path: at most 2^53 as the digits and a power of ten of at most 1e22,
 *   both exact doubles, so one multiplication or division is correctly rounded;
 * - Eisel–Lemire (D. Lemire, "Number Parsing at a Gigabyte per Second", Software:
 *   Practice and Experience 51(8), 2021; written from the paper): up to 19 significant
 *   digits, the digits times a 128-bit truncated power of five, which the paper shows
 *   decides the rounding except when the product's low word is all ones outside
 *   10^-27..10^55 (then: strtod).
 * strtod costs ~100 ns a value here; 17-digit values (about half of what a training loop
 * logs, and every _timestamp) are outside Clinger's path, so before Eisel–Lemire strtod
 * was the largest part of the compiled lane's time.
 *
 * wb_parse_double returns 1 with *out set, or 0 when the text is not a plain decimal this
 * header reads (more than 19 digits, NaN, Infinity, hex, a stray character...): the
 * caller then asks strtod. Its result for every text it accepts is tested against
 * float() (tests/test_wbscan_parts.py). */
#ifndef TRAINLENS_WBFLOAT_H
#define TRAINLENS_WBFLOAT_H

#include <stdint.h>
#include <string.h>

#include "_pow5.h"

static const double wb_pow10[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                    1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                    1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* the high and low words of a * b */
static inline uint64_t wb_mul128(uint64_t a, uint64_t b, uint64_t *lo) {
#if defined(__SIZEOF_INT128__)
    unsigned __int128 r = (unsigned __int128)a * b;
    *lo = (uint64_t)r;
    return (uint64_t)(r >> 64);
#else
    uint64_t a0 = (uint32_t)a, a1 = a >> 32, b0 = (uint32_t)b, b1 = b >> 32;
    uint64_t p00 = a0 * b0, p01 = a0 * b1, p10 = a1 * b0, p11 = a1 * b1;
    uint64_t mid = (p00 >> 32) + (uint32_t)p01 + (uint32_t)p10;
    *lo = (mid << 32) | (uint32_t)p00;
    return p11 + (p01 >> 32) + (p10 >> 32) + (mid >> 32);
#endif
}

static inline int wb_clz64(uint64_t x) { /* x != 0 */
#if defined(__GNUC__)
    return __builtin_clzll(x);
#else
    int n = 0;
    while (!(x & 0x8000000000000000ULL)) {
        x <<= 1;
        n++;
    }
    return n;
#endif
}

static inline double wb_from_bits(uint64_t bits) {
    double d;
    memcpy(&d, &bits, 8);
    return d;
}

/* floor(q * log2(10)) + 63, as the paper's (217706 * q) >> 16, with the division
 * rounded down for negative q in portable C (>> of a negative int is the compiler's) */
static inline int32_t wb_power2(int32_t q) {
    int64_t x = (int64_t)217706 * q;
    return (int32_t)(x >= 0 ? x >> 16 : -((-x + 65535) >> 16)) + 63;
}

/* w * 10^q for w != 0 of at most 19 digits: 1 and the double's bits in *bits, or 0 when
 * the 128-bit product cannot decide */
static int wb_eisel_lemire(uint64_t w, int32_t q, uint64_t *bits) {
    if (q < POW5_SMALLEST) { /* below half the smallest subnormal even for w < 2^64 */
        *bits = 0;
        return 1;
    }
    if (q > POW5_LARGEST) {
        *bits = 0x7FFULL << 52; /* infinity, as float("1e400") */
        return 1;
    }
    int lz = wb_clz64(w);
    w <<= lz;
    const uint64_t *p5 = pow5_128[q - POW5_SMALLEST];
    uint64_t lo, hi = wb_mul128(w, p5[0], &lo);
    /* 55 bits are used (52 + the implicit bit + a rounding bit + one the top bit may
     * take); when the 9 below them are all ones, a carry from the truncated rest could
     * reach them: add the product with the next 64 bits of the power */
    if ((hi & 0x1FF) == 0x1FF) {
        uint64_t lo2, hi2 = wb_mul128(w, p5[1], &lo2);
        (void)lo2;
        lo += hi2;
        if (lo < hi2) hi++;
    }
    if (lo == UINT64_MAX && (q < -27 || q > 55)) return 0; /* the paper's one doubt */
    int upper = (int)(hi >> 63);
    int shift = upper + 64 - 52 - 3;
    uint64_t m = hi >> shift;
    int32_t p2 = wb_power2(q) + upper - lz + 1023;
    if (p2 <= 0) { /* subnormal */
        if (-p2 + 1 >= 64) {
            *bits = 0;
            return 1;
        }
        m >>= -p2 + 1;
        m += m & 1; /* round half up: no tie is possible this low (the paper, 5.3) */
        m >>= 1;
        /* rounding up may have made it the smallest normal: the exponent field says so */
        *bits = m < (1ULL << 52) ? m : (1ULL << 52) | (m & ((1ULL << 52) - 1));
        return 1;
    }
    /* a tie (exactly half way between two doubles) is only possible when 5^q fits 64
     * bits and nothing was dropped below the rounding bit: then round to even */
    if (lo <= 1 && q >= -4 && q <= 23 && (m & 3) == 1 && (m << shift) == hi) m &= ~1ULL;
    m += m & 1;
    m >>= 1;
    if (m >= (2ULL << 52)) { /* rounding carried into a new bit */
        m = 1ULL << 52;
        p2++;
    }
    m &= ~(1ULL << 52);
    if (p2 >= 0x7FF) {
        *bits = 0x7FFULL << 52;
        return 1;
    }
    *bits = m | ((uint64_t)p2 << 52);
    return 1;
}

/* Eight ASCII digits at once (SWAR, as in Lemire's and simdjson's parsers): a value of
 * 17 digits is then two steps and a tail, not 17 branches (the byte loop was most of the
 * parser's time). wb_load8 reads s[0..8) as little-endian whatever the machine. */
static inline uint64_t wb_load8(const char *s) {
    uint64_t v;
    memcpy(&v, s, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

static inline int wb_all_digits(uint64_t v) {
    return !(((v + 0x4646464646464646ULL) | (v - 0x3030303030303030ULL)) &
             0x8080808080808080ULL);
}

static inline uint64_t wb_eight_digits(uint64_t v) {
    v -= 0x3030303030303030ULL;
    v = (v * 10) + (v >> 8); /* pairs */
    return (((v & 0x000000FF000000FFULL) * 0x000F424000000064ULL) +
            (((v >> 16) & 0x000000FF000000FFULL) * 0x0000271000000001ULL)) >>
           32;
}

/* the digits from p on into *m (wrapping past 19 digits: the caller then declines) */
static inline const char *wb_digits(const char *p, const char *end, uint64_t *m) {
    while (end - p >= 8 && wb_all_digits(wb_load8(p))) {
        *m = *m * 100000000 + wb_eight_digits(wb_load8(p));
        p += 8;
    }
    while (p < end && *p >= '0' && *p <= '9') *m = *m * 10 + (uint64_t)(*p++ - '0');
    return p;
}

/* 1: m * 10^exp10 (m of at most 19 digits), negated when neg, as the nearest double in
 * *out; 0: not decided here (strtod must). The last step of wb_parse_double, also used
 * by the JSONL lane, whose scan of the text checks JSON's grammar as it reads the digits. */
static inline int wb_scaled(uint64_t m, int32_t exp10, int neg, double *out) {
    double d;
    if (m == 0) {
        d = 0.0;
    } else if (m <= (1ULL << 53) && exp10 >= -22 && exp10 <= 22) {
        d = exp10 < 0 ? (double)m / wb_pow10[-exp10] : (double)m * wb_pow10[exp10];
    } else {
        uint64_t bits;
        if (!wb_eisel_lemire(m, exp10, &bits)) return 0;
        d = wb_from_bits(bits);
    }
    *out = neg ? -d : d;
    return 1;
}

/* 1: s[0..n) is [-]digits[.digits][(e|E)[+|-]digits] read exactly into *out; 0: not read */
static inline int wb_parse_double(const char *s, size_t n, double *out) {
    const char *p = s, *end = s + n;
    int neg = p < end && *p == '-';
    p += neg;
    const char *first = p;
    uint64_t m = 0;
    p = wb_digits(p, end, &m);
    int64_t digits = p - first;
    int32_t exp10 = 0;
    if (p < end && *p == '.') {
        const char *frac = ++p;
        p = wb_digits(p, end, &m);
        exp10 = -(int32_t)(p - frac);
        digits += p - frac;
    }
    if (!digits) return 0;
    if (p < end && (*p == 'e' || *p == 'E')) {
        int eneg = 0;
        int32_t e = 0;
        p++;
        if (p < end && (*p == '+' || *p == '-')) eneg = *p++ == '-';
        const char *at = p;
        for (; p < end && *p >= '0' && *p <= '9'; p++)
            if (e < 100000) e = e * 10 + (*p - '0'); /* far past any double either way */
        if (p == at) return 0;
        exp10 += eneg ? -e : e;
    }
    if (p != end) return 0;
    if (digits > 19) { /* leading zeros are no significant digits: count without them */
        for (const char *q = first; q < end && (*q == '0' || *q == '.'); q++) digits -= *q == '0';
        if (digits > 19) return 0; /* more than a uint64 holds exactly: strtod */
    }
    return wb_scaled(m, exp10, neg, out);
}

#endif
