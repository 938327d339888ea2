/* The compiled lane of the TensorBoard reader: one pass over an events file that frames
 * each record, checks both of its CRC-32C checksums and decodes the Event layout every
 * scalar writer produces (wall_time, step, one Summary of tag + simple_value values).
 *
 * scan(buffer) returns the decoded columns (a ScanResult), or a str saying why the file is
 * outside this lane: a corrupt or truncated record, or any record of another shape (tensors, histograms,
 * graphs, plugin metadata...). The caller then reads the file with the numpy reader, which
 * handles and reports all of that; this lane never has to. Columns are handed to polars
 * through the Arrow PyCapsule interface (__arrow_c_array__), so this lane needs no numpy.
 *
 * Parsing is bounded by the record's length everywhere: a record is untrusted input.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define TB_LITTLE_ENDIAN 1
#else
#define TB_LITTLE_ENDIAN 0
#endif

/* ---- CRC-32C (Castagnoli), as TFRecord uses it: _tbcrc.h ---------------------------- */
#include "_tbcrc.h"

static inline uint64_t load_u64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static inline uint32_t load_u32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* ---- Column: one decoded column, exported to Arrow once ---------------------------------- */

/* the Column type shared with _wbscan (no validity bitmap here: NULL, 0 nulls) */
#define COLUMN_TYPE_NAME "trainlens.readers._tbscan.Column"
#include "_arrow_column.h"

/* ---- the scan ------------------------------------------------------------------------------ */

typedef struct {
    const uint8_t *ptr; /* into the scanned buffer */
    size_t len;
    uint32_t next; /* the tag seen after this one last time: the first guess */
    int64_t count;
    int64_t last_step;
} Tag;

/* One pass over the records: each is framed, checked and decoded once, its rows appended
 * in file order (columns grown geometrically from a first guess made from the file's
 * size). When every tag's steps increase the rows are then moved to one block per tag,
 * a pass over the decoded columns rather than a second one over the records. */
typedef struct {
    size_t n, cap; /* rows written, and room for */
    int64_t *step;
    double *wall;
    double *value;
    uint32_t *code; /* the tag of each row */
    /* tags in order of first appearance, and an open-addressing index over them */
    Tag *tags;
    size_t ntags, tags_cap;
    uint32_t *slots; /* tag index + 1; 0 is empty */
    size_t nslots;
    int increasing; /* every tag's steps strictly increase */
    int in_blocks;  /* the rows already come one block per tag, in tag order */
    uint32_t prev;  /* the previous row's tag, UINT32_MAX before any */
    const uint8_t *version;
    size_t version_len;
    const char *why; /* why the file is outside this lane */
} Scan;

/* The smallest record that holds one value: header and CRC (16), wall_time (9), the
 * summary's and the value's key and length (4), a one-byte tag with its key and length
 * (3), simple_value (5). A file of n bytes holds at most n / 37 such records; events
 * holding several values each can hold more rows, and make the columns grow. */
#define MIN_VALUE_RECORD 37
#define FIRST_GUESS_MAX ((size_t)1 << 26) /* rows: past that, grow as needed */

/* Large columns in 2 MiB pages where the kernel gives them on request (Linux's
 * transparent huge pages in "madvise" mode): a 1.1M-row scan otherwise takes ~10,000 page
 * faults, as much system time as its decoding takes user time. Only a hint: nothing
 * changes where it is refused. */
#define HUGE_PAGE ((size_t)2 << 20)
static void huge_pages(void *p, size_t n) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (n < 2 * HUGE_PAGE) return;
    uintptr_t a = ((uintptr_t)p + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1);
    uintptr_t b = ((uintptr_t)p + n) & ~(uintptr_t)(HUGE_PAGE - 1);
    if (b > a) (void)madvise((void *)a, b - a, MADV_HUGEPAGE);
#else
    (void)p;
    (void)n;
#endif
}

/* Room for ``cap`` rows (the arrays keep their rows; on failure the old ones stay). */
static int reserve(Scan *s, size_t cap) {
    int64_t *step = realloc(s->step, cap * sizeof(int64_t));
    if (step == NULL) return 0;
    s->step = step;
    double *wall = realloc(s->wall, cap * sizeof(double));
    if (wall == NULL) return 0;
    s->wall = wall;
    double *value = realloc(s->value, cap * sizeof(double));
    if (value == NULL) return 0;
    s->value = value;
    uint32_t *code = realloc(s->code, cap * sizeof(uint32_t));
    if (code == NULL) return 0;
    s->code = code;
    s->cap = cap;
    huge_pages(s->step, cap * 8);
    huge_pages(s->wall, cap * 8);
    huge_pages(s->value, cap * 8);
    huge_pages(s->code, cap * 4);
    return 1;
}

/* Equal bytes, ``n`` of them readable at both: words, the last one overlapping. */
static inline int same_bytes(const uint8_t *a, const uint8_t *b, size_t n) {
    if (n >= 8 && n <= 16) { /* most tags: two words, overlapping */
        uint64_t x0, y0, x1, y1;
        memcpy(&x0, a, 8);
        memcpy(&y0, b, 8);
        memcpy(&x1, a + n - 8, 8);
        memcpy(&y1, b + n - 8, 8);
        return ((x0 ^ y0) | (x1 ^ y1)) == 0;
    }
    if (n >= 8) {
        size_t i = 0;
        for (; i + 8 <= n; i += 8) {
            uint64_t x, y;
            memcpy(&x, a + i, 8);
            memcpy(&y, b + i, 8);
            if (x != y) return 0;
        }
        if (i == n) return 1;
        uint64_t x, y;
        memcpy(&x, a + n - 8, 8);
        memcpy(&y, b + n - 8, 8);
        return x == y;
    }
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i]) return 0;
    return 1;
}

static uint64_t hash_bytes(const uint8_t *p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static int reindex(Scan *s, size_t nslots) {
    uint32_t *slots = calloc(nslots, sizeof(uint32_t));
    if (slots == NULL) return 0;
    for (size_t i = 0; i < s->ntags; i++) {
        size_t j = hash_bytes(s->tags[i].ptr, s->tags[i].len) & (nslots - 1);
        while (slots[j]) j = (j + 1) & (nslots - 1);
        slots[j] = (uint32_t)(i + 1);
    }
    free(s->slots);
    s->slots = slots;
    s->nslots = nslots;
    return 1;
}

/* The tag's index, added on first sight; UINT32_MAX when out of memory. */
static uint32_t tag_id(Scan *s, const uint8_t *p, size_t n) {
    if (s->prev != UINT32_MAX) {
        Tag *g = &s->tags[s->tags[s->prev].next];
        if (g->len == n && same_bytes(g->ptr, p, n)) return s->tags[s->prev].next;
    }
    size_t j = hash_bytes(p, n) & (s->nslots - 1);
    while (s->slots[j]) {
        Tag *t = &s->tags[s->slots[j] - 1];
        if (t->len == n && same_bytes(t->ptr, p, n)) return s->slots[j] - 1;
        j = (j + 1) & (s->nslots - 1);
    }
    if (s->ntags == s->tags_cap) {
        size_t cap = 2 * s->tags_cap;
        Tag *tags = realloc(s->tags, cap * sizeof(Tag));
        if (tags == NULL) return UINT32_MAX;
        s->tags = tags;
        s->tags_cap = cap;
    }
    uint32_t id = (uint32_t)s->ntags++;
    s->tags[id] = (Tag){p, n, id, 0, 0};
    s->slots[j] = id + 1;
    if (2 * s->ntags > s->nslots && !reindex(s, 2 * s->nslots)) return UINT32_MAX;
    return id;
}

static inline int read_varint(const uint8_t *d, size_t end, size_t *pos, uint64_t *out) {
    if (*pos < end && d[*pos] < 0x80) { /* lengths: one byte, nearly always */
        *out = d[(*pos)++];
        return 1;
    }
    uint64_t v = 0;
    for (int i = 0; i < 10 && *pos < end; i++) {
        uint8_t b = d[(*pos)++];
        v |= (uint64_t)(b & 0x7F) << (7 * i);
        if (!(b & 0x80)) {
            *out = v;
            return 1;
        }
    }
    return 0;
}

/* A length-delimited field's length, which must fit before ``end``. */
static inline int read_len(const uint8_t *d, size_t end, size_t *pos, size_t *out) {
    uint64_t n;
    if (!read_varint(d, end, pos, &n) || n > end - *pos) return 0;
    *out = (size_t)n;
    return 1;
}

#define OUTSIDE(reason)   \
    do {                  \
        s->why = (reason); \
        return 0;         \
    } while (0)

/* One decoded value: its tag's bookkeeping (steps increasing, rows in blocks) and a row. */
static inline int add_value(Scan *s, const uint8_t *tag, size_t tlen, uint64_t step, double wall,
                            float f) {
    uint32_t id = tag_id(s, tag, tlen);
    if (id == UINT32_MAX) OUTSIDE("out of memory");
    uint32_t before = s->prev;
    if (before != UINT32_MAX) s->tags[before].next = id;
    s->prev = id;
    Tag *t = &s->tags[id];
    int64_t st = (int64_t)step;
    if (t->count) {
        if (st <= t->last_step) s->increasing = 0;
        if (before != id) s->in_blocks = 0; /* back to a tag after another */
    }
    t->count++;
    t->last_step = st;
    if (s->n == s->cap && !reserve(s, 2 * s->cap)) OUTSIDE("out of memory");
    size_t k = s->n++;
    s->step[k] = st;
    s->wall[k] = wall;
    s->value[k] = (double)f;
    s->code[k] = id;
    return 1;
}

/* The Event nearly every record of a scalar log is, tested field by field at the places
 * its layout puts them: 1 wall_time, 2 step, 5 a summary of one value (1 tag, 2
 * simple_value), every length one byte. Returns -1 when the record is not exactly that
 * (parse_event then decodes it field by field), else what add_value returns. Every byte
 * read is before ``n``. */
static inline int parse_one_value(Scan *s, const uint8_t *d, size_t n) {
    /* the least such record: wall_time 9, step 2, summary and value keys and lengths 4,
     * a tag of one byte with its key and length 3, simple_value 5 */
    if (n < 23 || d[0] != 0x09 || d[9] != 0x10) return -1;
    uint64_t step;
    size_t pos;
    if (d[10] < 0x80) { /* the step: one, two or three bytes (steps below 2**21) */
        step = d[10];
        pos = 11;
    } else if (d[11] < 0x80) {
        step = (uint64_t)(d[10] & 0x7F) | ((uint64_t)d[11] << 7);
        pos = 12;
    } else if (d[12] < 0x80) {
        step = (uint64_t)(d[10] & 0x7F) | ((uint64_t)(d[11] & 0x7F) << 7) |
               ((uint64_t)d[12] << 14);
        pos = 13;
    } else {
        step = 0;
        pos = 10;
        for (int i = 0;; i++) { /* at most 10 bytes, all before n - 12 */
            uint8_t b = d[pos++];
            step |= (uint64_t)(b & 0x7F) << (7 * i);
            if (!(b & 0x80)) break;
            if (i == 9 || pos + 12 > n) return -1;
        }
    }
    /* pos + 12 <= n here: the summary's key and length, the value's, the tag's key and
     * length, at least one byte of tag, simple_value's 5 */
    if (pos + 12 > n) return -1;
    /* the summary's length (one byte) runs to the end, and holds the value's key and
     * length, the value the tag's key and length, the tag and simple_value: each length
     * follows from the record's, and the six bytes are compared at once (little-endian) */
    size_t summary = n - pos - 2, tlen = summary - 9;
    if (summary >= 0x80 || d[n - 5] != 0x15) return -1;
    uint64_t want = 0x2Au | ((uint64_t)summary << 8) | (0x0Au << 16) |
                    ((uint64_t)(summary - 2) << 24) | ((uint64_t)0x0A << 32) |
                    ((uint64_t)tlen << 40);
    if ((load_u64(d + pos) & 0xFFFFFFFFFFFFull) != want) return -1;
    double wall;
    float f;
    memcpy(&wall, d + 1, 8);
    memcpy(&f, d + n - 4, 4);
    return add_value(s, d + pos + 6, tlen, step, wall, f);
}

/* One Event: 1 wall_time, then 3 file_version and 10 source_metadata, or 2 step (optional)
 * and 5 summary whose values are each exactly 1 tag and 2 simple_value. */
static int parse_event(Scan *s, const uint8_t *d, size_t n) {
    int fast = parse_one_value(s, d, n);
    if (fast >= 0) return fast;
    if (n < 9 || d[0] != 0x09) OUTSIDE("an Event without wall_time first");
    double wall;
    memcpy(&wall, d + 1, 8);
    size_t pos = 9, len;
    if (pos < n && (d[pos] == 0x1A || d[pos] == 0x52)) {
        /* the file's first Event: file_version (3), and the writer's name in
         * source_metadata (10), which nothing reads */
        int versions = 0;
        while (pos < n) {
            uint8_t key = d[pos++];
            if ((key != 0x1A && key != 0x52) || !read_len(d, n, &pos, &len))
                OUTSIDE("an unusual file_version Event");
            if (key == 0x1A && versions++) OUTSIDE("an unusual file_version Event");
            if (key == 0x1A && s->version == NULL) {
                s->version = d + pos;
                s->version_len = len;
            }
            pos += len;
        }
        return 1;
    }
    uint64_t step = 0;
    if (pos < n && d[pos] == 0x10) {
        pos++;
        if (!read_varint(d, n, &pos, &step)) OUTSIDE("a malformed step");
    }
    if (pos >= n || d[pos] != 0x2A) OUTSIDE("an Event that is not a summary");
    pos++;
    if (!read_len(d, n, &pos, &len) || pos + len != n) OUTSIDE("a malformed summary");
    while (pos < n) {
        size_t vlen, tlen;
        if (d[pos] != 0x0A) OUTSIDE("a Summary field other than value");
        pos++;
        if (!read_len(d, n, &pos, &vlen)) OUTSIDE("a malformed Summary.Value");
        size_t vend = pos + vlen;
        if (pos >= vend || d[pos] != 0x0A) OUTSIDE("a Summary.Value without its tag first");
        pos++;
        if (!read_len(d, vend, &pos, &tlen) || tlen == 0) OUTSIDE("a malformed tag");
        const uint8_t *tag = d + pos;
        pos += tlen;
        if (pos + 5 != vend || d[pos] != 0x15) OUTSIDE("a value that is not a simple_value");
        float f;
        memcpy(&f, d + pos + 1, 4);
        pos = vend;
        if (!add_value(s, tag, tlen, step, wall, f)) return 0;
    }
    return 1;
}

/* The records, framed and checked, with ``CRC`` the CRC-32C implementation: inlined into
 * scan_records_hw (built for SSE4.2, chosen at run time) and scan_records_soft. */
static inline __attribute__((always_inline)) int scan_loop(Scan *s, const uint8_t *p,
                                                           size_t size, Py_ssize_t *records,
                                                           uint32_t (*crc)(const uint8_t *,
                                                                           size_t)) {
    size_t off = 0;
    uint64_t last_len = UINT64_MAX;
    uint32_t last_len_crc = 0;
    *records = 0;
    while (off < size) {
        if (size - off < TFR_OVERHEAD) OUTSIDE("a truncated record");
        uint64_t len = load_u64(p + off);
        uint32_t len_crc = load_u32(p + off + TFR_HEADER - 4);
        if (len != last_len || len_crc != last_len_crc) {
            if (masked(crc(p + off, 8)) != len_crc) OUTSIDE("a corrupt record header");
            last_len = len;
            last_len_crc = len_crc;
        }
        if (len > size - off - TFR_OVERHEAD) OUTSIDE("a truncated record");
        const uint8_t *d = p + off + TFR_HEADER;
        if (masked(crc(d, (size_t)len)) != load_u32(d + len)) OUTSIDE("a corrupt record");
        if (!parse_event(s, d, (size_t)len)) return 0;
        off += TFR_OVERHEAD + (size_t)len;
        (*records)++;
    }
    return 1;
}

#if TB_X86_CRC
__attribute__((target("sse4.2"))) static int scan_records_hw(Scan *s, const uint8_t *p,
                                                             size_t size, Py_ssize_t *records) {
    return scan_loop(s, p, size, records, crc_hard);
}
#endif

static int scan_records_soft(Scan *s, const uint8_t *p, size_t size, Py_ssize_t *records) {
    return scan_loop(s, p, size, records, crc_soft);
}

static int scan_records(Scan *s, const uint8_t *p, size_t size, Py_ssize_t *records) {
#if TB_X86_CRC
    if (have_sse42) return scan_records_hw(s, p, size, records);
#endif
    return scan_records_soft(s, p, size, records);
}

static void scan_free(Scan *s) {
    free(s->step);
    free(s->wall);
    free(s->value);
    free(s->code);
    free(s->tags);
    free(s->slots);
}

/* Each tag's first row in the blocks, in ``cur`` (one per tag). */
static void block_starts(const Tag *tags, size_t ntags, size_t *cur) {
    size_t sum = 0;
    for (size_t t = 0; t < ntags; t++) {
        cur[t] = sum;
        sum += (size_t)tags[t].count;
    }
}

/* Move an 8-byte column's rows (file order) to one block per tag, each tag's rows in
 * their order; ``cur`` (a cursor per tag) is set here. */
static void scatter8(const void *from, void *to, const uint32_t *code, size_t n,
                     const Tag *tags, size_t ntags, size_t *cur) {
    block_starts(tags, ntags, cur);
    const uint8_t *src = from;
    uint8_t *dst = to;
    for (size_t k = 0; k < n; k++) memcpy(dst + 8 * cur[code[k]]++, src + 8 * k, 8);
}

/* Move an 8-byte column's rows to the places ``at`` gives them. */
static void place8(const void *from, void *to, const uint32_t *at, size_t n) {
    const uint8_t *src = from;
    uint8_t *dst = to;
    for (size_t k = 0; k < n; k++) memcpy(dst + 8 * (size_t)at[k], src + 8 * k, 8);
}

/* The rows one block per tag, in tag order, when every tag's steps increase: one array
 * is allocated, and each column's old array takes the next one's rows. Each row's place
 * is worked out once, over its tag's code (which the grouped result does not keep), then
 * each column is moved there; past 2**32 rows a place does not fit a code, and each
 * column is moved by its codes. */
static int group_rows(Scan *s) {
    if (s->in_blocks) return 1;
    void *spare = malloc(s->n * sizeof(int64_t));
    size_t *cur = malloc(s->ntags * sizeof(size_t));
    if (spare == NULL || cur == NULL) {
        free(spare);
        free(cur);
        return 0;
    }
    huge_pages(spare, s->n * sizeof(int64_t));
    void *old_step = s->step, *old_wall = s->wall;
    if (s->n <= (size_t)UINT32_MAX) {
        block_starts(s->tags, s->ntags, cur);
        uint32_t *at = s->code;
        for (size_t k = 0; k < s->n; k++) at[k] = (uint32_t)cur[at[k]]++;
        place8(s->step, spare, at, s->n);
        place8(s->wall, old_step, at, s->n);
        place8(s->value, old_wall, at, s->n);
    } else {
        scatter8(s->step, spare, s->code, s->n, s->tags, s->ntags, cur);
        scatter8(s->wall, old_step, s->code, s->n, s->tags, s->ntags, cur);
        scatter8(s->value, old_wall, s->code, s->n, s->tags, s->ntags, cur);
    }
    s->step = spare;
    s->wall = old_step;
    free(s->value);
    s->value = old_wall;
    free(cur);
    return 1;
}

PyDoc_STRVAR(scan_doc,
             "scan(buffer) -> ScanResult | str\n\n"
             "Frame, check and decode a whole events file held in ``buffer``. Returns a "
             "ScanResult: the number of records, the first file_version (bytes or None), the "
             "tags in order of first appearance, each tag's row count, and the columns: step "
             "(int64), wall time and value (float64), and code (uint32 tag index per row). When "
             "every tag's steps strictly increase, ``grouped`` is True, the rows come one block "
             "per tag in tag order (file order within each) and code is None; otherwise they "
             "are in file order. Returns a str naming the first thing outside this lane "
             "instead (the reason the reader gives for reading the file without this lane).");

/* The named result of scan(): a struct sequence (a tuple with field names), built as cheaply
 * as the 9-tuple it replaces. */
static PyStructSequence_Field scan_result_fields[] = {
    {"records", "number of records in the file"},
    {"file_version", "the first Event's file_version (bytes), or None"},
    {"tags", "the tags (bytes), in order of first appearance"},
    {"counts", "each tag's number of rows"},
    {"grouped", "True when the rows come one block per tag (every tag's steps increase)"},
    {"step", "int64 column"},
    {"wall", "float64 column: wall time in seconds"},
    {"value", "float64 column"},
    {"code", "uint32 column: tag index of each row, in file order; None when grouped"},
    {NULL, NULL}};

static PyStructSequence_Desc scan_result_desc = {
    "trainlens.readers._tbscan.ScanResult", "What scan() decoded from an events file.",
    scan_result_fields, 9};

static PyTypeObject ScanResultType;

static PyObject *scan(PyObject *module, PyObject *arg) {
    (void)module;
    if (!TB_LITTLE_ENDIAN) return PyUnicode_FromString("a big-endian machine");
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) != 0) return NULL;
    Scan s;
    memset(&s, 0, sizeof(s));
    s.increasing = 1;
    s.in_blocks = 1;
    s.prev = UINT32_MAX;
    s.tags_cap = 64;
    s.tags = malloc(s.tags_cap * sizeof(Tag));
    PyObject *result = NULL;
    Py_ssize_t records = 0;
    size_t guess = (size_t)view.len / MIN_VALUE_RECORD + 16;
    if (guess > FIRST_GUESS_MAX) guess = FIRST_GUESS_MAX;
    if (s.tags == NULL || !reindex(&s, 256) || !reserve(&s, guess)) {
        PyErr_NoMemory();
        goto done;
    }
    int ok, moved = 1;
    Py_BEGIN_ALLOW_THREADS;
    ok = scan_records(&s, (const uint8_t *)view.buf, (size_t)view.len, &records);
    if (ok && s.n > 0 && s.increasing) moved = group_rows(&s);
    Py_END_ALLOW_THREADS;
    if (!moved) {
        PyErr_NoMemory();
        goto done;
    }
    if (!ok) {
        result = PyUnicode_FromString(s.why);
        goto done;
    }
    if (s.n == 0) {
        result = PyUnicode_FromString("no scalar values");
        goto done;
    }
    PyObject *tags = PyList_New((Py_ssize_t)s.ntags);
    PyObject *counts = PyList_New((Py_ssize_t)s.ntags);
    if (tags == NULL || counts == NULL) {
        Py_XDECREF(tags);
        Py_XDECREF(counts);
        goto done;
    }
    for (size_t t = 0; t < s.ntags; t++) {
        PyObject *b = PyBytes_FromStringAndSize((const char *)s.tags[t].ptr,
                                                (Py_ssize_t)s.tags[t].len);
        PyObject *c = PyLong_FromLongLong(s.tags[t].count);
        if (b == NULL || c == NULL) {
            Py_XDECREF(b);
            Py_XDECREF(c);
            Py_DECREF(tags);
            Py_DECREF(counts);
            goto done;
        }
        PyList_SET_ITEM(tags, (Py_ssize_t)t, b);
        PyList_SET_ITEM(counts, (Py_ssize_t)t, c);
    }
    PyObject *version = s.version != NULL ? PyBytes_FromStringAndSize((const char *)s.version,
                                                                      (Py_ssize_t)s.version_len)
                                          : Py_NewRef(Py_None);
    /* the columns take over the arrays (column_new frees one it cannot wrap) */
    Py_ssize_t n = (Py_ssize_t)s.n;
    PyObject *step = column_new(s.step, NULL, n, 0, "l");
    PyObject *wall = column_new(s.wall, NULL, n, 0, "g");
    PyObject *value = column_new(s.value, NULL, n, 0, "g");
    PyObject *code = s.increasing ? Py_NewRef(Py_None) : column_new(s.code, NULL, n, 0, "I");
    s.step = NULL;
    s.wall = NULL;
    s.value = NULL;
    if (!s.increasing) s.code = NULL; /* (else freed with the scan) */
    if (version == NULL || step == NULL || wall == NULL || value == NULL || code == NULL) {
        Py_DECREF(tags);
        Py_DECREF(counts);
        Py_XDECREF(version);
        Py_XDECREF(step);
        Py_XDECREF(wall);
        Py_XDECREF(value);
        Py_XDECREF(code);
        goto done;
    }
    PyObject *nrec = PyLong_FromSsize_t(records);
    result = nrec != NULL ? PyStructSequence_New(&ScanResultType) : NULL;
    PyObject *grouped = Py_NewRef(s.increasing ? Py_True : Py_False);
    PyObject *items[9] = {nrec, version, tags, counts, grouped, step, wall, value, code};
    for (Py_ssize_t i = 0; i < 9; i++) {
        if (result != NULL)
            PyStructSequence_SET_ITEM(result, i, items[i]); /* steals the reference */
        else
            Py_XDECREF(items[i]);
    }
done:
    scan_free(&s);
    PyBuffer_Release(&view);
    return result;
}

PyDoc_STRVAR(crc32c_doc,
             "crc32c(buffer, soft=False) -> int\n\n"
             "CRC-32C of ``buffer`` as this lane computes it (the table loop when ``soft``, "
             "else the CPU's instruction where it has one): for tests that check it against "
             "the Python implementations.");

static PyObject *py_crc32c(PyObject *module, PyObject *args) {
    (void)module;
    Py_buffer view;
    int soft = 0;
    if (!PyArg_ParseTuple(args, "y*|p", &view, &soft)) return NULL;
    const uint8_t *p = (const uint8_t *)view.buf;
    uint32_t c = soft ? crc_soft(p, (size_t)view.len) : crc32c(p, (size_t)view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(c);
}

static PyMethodDef methods[] = {{"scan", scan, METH_O, scan_doc},
                                {"crc32c", py_crc32c, METH_VARARGS, crc32c_doc},
                                {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_tbscan",
    "The compiled lane of the TensorBoard reader (see trainlens.readers.tensorboard).", -1,
    methods};

/* (a C long is 32 bits on Windows: the constants above 2**31 go in as unsigned) */
static int add_u32(PyObject *m, const char *name, uint32_t v) {
    PyObject *o = PyLong_FromUnsignedLong(v);
    if (o == NULL) return -1;
    int r = PyModule_AddObjectRef(m, name, o);
    Py_DECREF(o);
    return r;
}

PyMODINIT_FUNC PyInit__tbscan(void) {
    crc_init();
    if (PyType_Ready(&ColumnType) < 0) return NULL;
    if (ScanResultType.tp_name == NULL &&
        PyStructSequence_InitType2(&ScanResultType, &scan_result_desc) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (PyModule_AddObjectRef(m, "ScanResult", (PyObject *)&ScanResultType) < 0 ||
        add_u32(m, "CRC32C_POLY", TFR_CRC32C_POLY) < 0 ||
        add_u32(m, "MASK_DELTA", TFR_MASK_DELTA) < 0 ||
        PyModule_AddIntConstant(m, "HEADER", TFR_HEADER) < 0 ||
        PyModule_AddIntConstant(m, "OVERHEAD", TFR_OVERHEAD) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
