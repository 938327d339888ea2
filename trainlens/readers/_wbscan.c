/* The compiled lane of the W&B run reader: a pass over a run-<id>.wandb transaction log
 * that frames each chunk (32 KiB blocks, LevelDB's log format), checks its CRC-32, joins
 * records split over blocks, and decodes the history records W&B's SDK writes: items of a
 * one-part key and a value_json number, with _step, _timestamp and _runtime.
 *
 * scan(buffer, threads=1) returns (keys, values, rows, mark_step, mark_wall, mark_rec,
 * exact):
 * - keys: list of str, the metrics in order of first appearance (their codes);
 * - values: per key a Column of float64, its values in file order;
 * - rows: per key the history records its values came from, as an index into the marks:
 *   (start, count) when they are the records start..start+count-1 (a metric logged at
 *   every step: its steps and wall times are then slices of the marks, no copy), else a
 *   Column of int64, one index a value;
 * - mark_step / mark_wall / mark_rec: per decoded history record, in file order, its
 *   step (int64), wall time (float64, null when it has no _timestamp) and byte offset;
 * - exact: list of (offset, bytes) of the records this lane leaves to the exact decoder
 *   (config, stats, run, and history records of another layout);
 * or a str saying why the file is outside this lane (any damage: the numpy lane then
 * reads and reports it). Columns go to polars through the Arrow PyCapsule interface.
 *
 * threads > 1 splits the file's blocks into that many ranges read side by side (the GIL
 * released), then joins their results in file order: the same result as one thread, the
 * same files refused (see scan_range and joined_at).
 *
 * Values are parsed exactly (_wbfloat.h), else by strtod, correctly rounded like
 * Python's float(); a value neither consumes whole sends its record to the exact
 * decoder. Parsing is bounded by the record's length everywhere: a record is untrusted
 * input.
 *
 * Memory is the larger cost at 12M values: every fresh page is zeroed by the kernel, so
 * each row is written once into a buffer that becomes its column (no joined copy).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__unix__) || defined(__APPLE__)
#define WB_THREADS 1
#include <pthread.h>
#else
#define WB_THREADS 0 /* one range at a time: the same result */
#endif

#define COLUMN_TYPE_NAME "trainlens.readers._wbscan.Column"
#include "_arrow_column.h"
#include "_wbcrc.h"
#include "_wbfloat.h"

#define BLOCK 32768
#define HEADER 7
#define MAX_VALUE 63
#define MAX_THREADS 16

/* ---- growable columns --------------------------------------------------------------------- */

typedef struct {
    char *data;
    size_t len, cap;
} Buf;

static int buf_grow(Buf *b, size_t n) {
    size_t cap = b->cap ? b->cap * 2 : 1 << 12;
    while (cap < b->len + n) cap *= 2;
    char *d = realloc(b->data, cap); /* (a large block moves by remapping: no copy) */
    if (!d) return -1;
    b->data = d;
    b->cap = cap;
    return 0;
}

static inline int buf_put(Buf *b, const void *src, size_t n) {
    if (n == 0) return 0; /* (an empty source may be NULL: memcpy(NULL, NULL, 0) is undefined) */
    if (b->len + n > b->cap && buf_grow(b, n) < 0) return -1;
    memcpy(b->data + b->len, src, n);
    b->len += n;
    return 0;
}

/* the buffer's memory, handed over (NULL when empty: the Column makes a valid pointer) */
static void *buf_take(Buf *b) {
    void *d = b->data;
    if (d && b->len < b->cap) {
        void *shrunk = realloc(d, b->len ? b->len : 1);
        if (shrunk) d = shrunk;
    }
    b->data = NULL;
    b->len = b->cap = 0;
    return d;
}

/* ---- keys --------------------------------------------------------------------------------- */

typedef struct {
    const uint8_t *key; /* a copy: keys may sit in the scratch buffer of a joined record */
    uint64_t head, mid, tail; /* bytes 0-7, 8-15 (from 16 on) and the last 8 (from 8 on) */
    uint32_t len;
    int32_t code;
} Slot;

typedef struct {
    const uint8_t *key; /* the slot's copy */
    uint32_t len;
} Name;

/* (no Python objects here: ranges are read without the GIL; names are made at the end) */
typedef struct {
    Slot *slots;
    size_t cap, n;
    Buf names; /* Name, in code order */
} Keys;

typedef struct {
    uint64_t head, mid, tail, hash;
} KeyEnds;

/* Every item of every record is looked up, so the lookup reads the key's first and last 8
 * bytes once: they hash it (with its length), and with bytes 8-15 they are the whole of a
 * key of 8 to 24 bytes (most metric names), so no memcmp. A byte-by-byte FNV-1a (still
 * used below 8 bytes) was a tenth of the scan. Keys alike in their ends only share a
 * chain: longer keys are compared whole. */
static KeyEnds key_ends(const uint8_t *p, size_t n) {
    KeyEnds e = {0, 0, 0, 1469598103934665603ULL ^ (n * 0x9E3779B97F4A7C15ULL)};
    if (n >= 8) {
        memcpy(&e.head, p, 8);
        memcpy(&e.tail, p + n - 8, 8);
        if (n >= 16) memcpy(&e.mid, p + 8, 8);
        e.hash = (e.hash ^ e.head) * 0xFF51AFD7ED558CCDULL;
        e.hash = (e.hash ^ (e.hash >> 29) ^ e.tail) * 0xC4CEB9FE1A85EC53ULL;
    } else {
        for (size_t i = 0; i < n; i++) e.hash = (e.hash ^ p[i]) * 1099511628211ULL;
    }
    e.hash ^= e.hash >> 32;
    return e;
}

static inline int slot_is(const Slot *s, const uint8_t *p, uint32_t n, const KeyEnds *e) {
    if (s->len != n) return 0;
    if (n >= 8 && (s->head != e->head || s->mid != e->mid || s->tail != e->tail)) return 0;
    return (n >= 8 && n <= 24) || memcmp(s->key, p, n) == 0;
}

static int32_t key_code(Keys *k, const uint8_t *p, uint32_t n) {
    if (k->n * 2 >= k->cap) {
        size_t cap = k->cap ? k->cap * 2 : 64;
        Slot *s = calloc(cap, sizeof(Slot));
        if (!s) return -1;
        for (size_t i = 0; i < k->cap; i++) {
            if (!k->slots[i].key) continue;
            size_t j = key_ends(k->slots[i].key, k->slots[i].len).hash & (cap - 1);
            while (s[j].key) j = (j + 1) & (cap - 1);
            s[j] = k->slots[i];
        }
        free(k->slots);
        k->slots = s;
        k->cap = cap;
    }
    KeyEnds e = key_ends(p, n);
    size_t j = e.hash & (k->cap - 1);
    while (k->slots[j].key) {
        if (slot_is(&k->slots[j], p, n, &e)) return k->slots[j].code;
        j = (j + 1) & (k->cap - 1);
    }
    uint8_t *copy = malloc(n ? n : 1);
    if (!copy) return -1;
    memcpy(copy, p, n);
    Name name = {copy, n};
    if (buf_put(&k->names, &name, sizeof name) < 0) {
        free(copy);
        return -1;
    }
    k->slots[j].key = copy;
    k->slots[j].head = e.head;
    k->slots[j].mid = e.mid;
    k->slots[j].tail = e.tail;
    k->slots[j].len = n;
    k->slots[j].code = (int32_t)k->n;
    k->n++;
    return k->slots[j].code;
}

static void keys_free(Keys *k) {
    for (size_t i = 0; i < k->cap; i++) free((void *)k->slots[i].key);
    free(k->slots);
    free(k->names.data);
}

/* ---- protobuf ----------------------------------------------------------------------------- */

static int varint_long(const uint8_t **pp, const uint8_t *end, uint64_t *out) {
    const uint8_t *p = *pp;
    uint64_t v = 0;
    for (int s = 0; s < 64 && p < end; s += 7) {
        uint8_t b = *p++;
        v |= (uint64_t)(b & 0x7F) << s;
        if (!(b & 0x80)) {
            *out = v;
            *pp = p;
            return 0;
        }
    }
    return -1;
}

/* (one byte is the usual tag and length of a history item: that case inline) */
static inline int varint(const uint8_t **pp, const uint8_t *end, uint64_t *out) {
    const uint8_t *p = *pp;
    if (p < end && !(*p & 0x80)) {
        *out = *p;
        *pp = p + 1;
        return 0;
    }
    return varint_long(pp, end, out);
}

/* one field: its number and wire type; for wire 2 the value's range in [*a, *b) */
static inline int field(const uint8_t **pp, const uint8_t *end, uint32_t *num, int *wire,
                        const uint8_t **a, const uint8_t **b, uint64_t *v) {
    uint64_t tag;
    if (varint(pp, end, &tag) < 0) return -1;
    *num = (uint32_t)(tag >> 3);
    *wire = (int)(tag & 7);
    if (*wire == 0) return varint(pp, end, v);
    if (*wire == 2) {
        uint64_t n;
        if (varint(pp, end, &n) < 0 || n > (uint64_t)(end - *pp)) return -1;
        *a = *pp;
        *b = *pp + n;
        *pp += n;
        return 0;
    }
    size_t n = *wire == 1 ? 8 : *wire == 5 ? 4 : 0;
    if (!n || n > (size_t)(end - *pp)) return -1;
    *pp += n;
    return 0;
}

typedef struct {
    int32_t code;
    double value;
} Item;

typedef struct {
    int64_t start, count; /* the records start..start+count-1 (indexes into the marks) */
} Run;

typedef struct {
    Buf value; /* float64, one a row, in file order */
    Buf runs;  /* Run: which records the rows came from (a metric at every step: one run) */
} Col;

typedef struct {
    int64_t rec;
    const uint8_t *data; /* in the file, or `owned` (a record joined from its chunks) */
    size_t len;
    uint8_t *owned;
} Exact;

/* what one range of blocks holds (one thread's) */
typedef struct {
    Keys keys;
    Col *cols;
    size_t ncols;
    Buf mark_step, mark_wall, mark_rec; /* per decoded history record */
    int64_t marks;
    Item *items;
    size_t items_cap;
    Buf exact; /* Exact, in file order */
} Out;

static int cols_for(Out *o, size_t n) {
    if (n <= o->ncols) return 0;
    size_t cap = o->ncols ? o->ncols : 16;
    while (cap < n) cap *= 2;
    Col *c = realloc(o->cols, cap * sizeof(Col));
    if (!c) return -1;
    memset(c + o->ncols, 0, (cap - o->ncols) * sizeof(Col));
    o->cols = c;
    o->ncols = cap;
    return 0;
}

/* one value_json as a number: 1, or 0 when it is none (a string, a bool, an object, or a
 * spelling only C reads, such as hex) */
static int json_number(const uint8_t *val, size_t val_len, double *d) {
    if (wb_parse_double((const char *)val, val_len, d)) return 1;
    char text[MAX_VALUE + 1];
    memcpy(text, val, val_len);
    text[val_len] = 0;
    char *stop;
    *d = strtod(text, &stop);
    return stop == text + val_len && !memchr(text, 'x', val_len) &&
           !memchr(text, 'X', val_len) &&
           (text[0] == '-' || text[0] == 'N' || text[0] == 'I' ||
            (text[0] >= '0' && text[0] <= '9'));
}

/* the row of an item: its value, and its record appended to the metric's runs */
static int put_row(Col *c, double value, int64_t mark) {
    if (buf_put(&c->value, &value, 8) < 0) return -1;
    Run *last = c->runs.len ? (Run *)(c->runs.data + c->runs.len) - 1 : NULL;
    if (last && last->start + last->count == mark) {
        last->count++;
        return 0;
    }
    Run r = {mark, 1};
    return buf_put(&c->runs, &r, sizeof r);
}

/* 1: decoded; 0: not this lane's layout (the exact decoder takes it); -1: error */
static int history(Out *o, const uint8_t *p, const uint8_t *end, int64_t rec) {
    size_t n = 0;
    int has_step = 0;
    double step = 0, wall = NAN;
    while (p < end) {
        uint32_t num;
        int wire;
        const uint8_t *a = NULL, *b = NULL;
        uint64_t v;
        if (field(&p, end, &num, &wire, &a, &b, &v) < 0) return 0;
        if (num != 1 || wire != 2) continue; /* the step message, _info */
        const uint8_t *key = NULL, *val = NULL;
        size_t key_len = 0, val_len = 0;
        int parts = 0;
        const uint8_t *q = a;
        while (q < b) {
            uint32_t f;
            int w;
            const uint8_t *x = NULL, *y = NULL;
            uint64_t u;
            if (field(&q, b, &f, &w, &x, &y, &u) < 0) return 0;
            if ((f == 1 || f == 2) && w == 2) {
                key = x;
                key_len = (size_t)(y - x);
                parts++;
            } else if (f == 16 && w == 2) {
                val = x;
                val_len = (size_t)(y - x);
            } else {
                return 0;
            }
        }
        if (parts != 1 || !val || !val_len || val_len > MAX_VALUE) return 0;
        if (key_len == 8 && memcmp(key, "_runtime", 8) == 0) continue; /* W&B's own, unused */
        double d;
        if (!json_number(val, val_len, &d)) return 0;
        if (key_len == 5 && memcmp(key, "_step", 5) == 0) {
            has_step = 1;
            step = d;
            continue;
        }
        if (key_len == 10 && memcmp(key, "_timestamp", 10) == 0) {
            wall = d;
            continue;
        }
        int32_t code = key_code(&o->keys, key, (uint32_t)key_len);
        if (code < 0) return -1;
        if (n == o->items_cap) {
            size_t cap = o->items_cap ? o->items_cap * 2 : 64;
            Item *it = realloc(o->items, cap * sizeof(Item));
            if (!it) return -1;
            o->items = it;
            o->items_cap = cap;
        }
        o->items[n].code = code;
        o->items[n].value = d;
        n++;
    }
    /* a step the exact decoder must judge (trainlens.core.steps): not a whole number, below
     * 0 (W&B never writes one), or past 2^53, where the double may not be the integer the
     * text says */
    if (!has_step || !(step >= 0 && step <= 9007199254740992.0) || step != floor(step)) return 0;
    int64_t s = (int64_t)step;
    if (cols_for(o, o->keys.n) < 0) return -1;
    for (size_t i = 0; i < n; i++)
        if (put_row(&o->cols[o->items[i].code], o->items[i].value, o->marks) < 0) return -1;
    if (buf_put(&o->mark_step, &s, 8) < 0 || buf_put(&o->mark_wall, &wall, 8) < 0 ||
        buf_put(&o->mark_rec, &rec, 8) < 0)
        return -1;
    o->marks++;
    return 1;
}

/* a record for the exact decoder; joined records are copied (the join buffer is reused) */
static int exact(Out *o, const uint8_t *p, size_t n, int64_t rec, int joined) {
    Exact e = {rec, p, n, NULL};
    if (joined) {
        e.owned = malloc(n ? n : 1);
        if (!e.owned) return -1;
        memcpy(e.owned, p, n);
        e.data = e.owned;
    }
    if (buf_put(&o->exact, &e, sizeof e) == 0) return 0;
    free(e.owned);
    return -1;
}

/* 0 handled, -1 error */
static int record(Out *o, const uint8_t *p, size_t n, int64_t rec, int joined) {
    const uint8_t *q = p, *end = p + n;
    while (q < end) {
        uint32_t num;
        int wire;
        const uint8_t *a = NULL, *b = NULL;
        uint64_t v;
        if (field(&q, end, &num, &wire, &a, &b, &v) < 0) return exact(o, p, n, rec, joined);
        if (wire != 2) continue;
        if (num == 2) {
            int r = history(o, a, b, rec);
            if (r < 0) return -1;
            return r ? 0 : exact(o, p, n, rec, joined);
        }
        if (num == 5 || num == 7 || num == 17 || num == 18) return exact(o, p, n, rec, joined);
    }
    return 0;
}

/* One range of blocks, [start, stop) (block-aligned), read by one thread.
 *
 * A range after the first begins by skipping the chunks that continue a record begun
 * before it (the range before reads those, past its own stop, until the record ends);
 * `skipped` is where the last of them ends (`start` when none). A range stops at the first
 * chunk boundary at or after `stop` with no record open; `end` is where the last chunk it
 * read or skipped ends when that is past `stop`, else `stop`. The ranges read what one
 * thread reads when each range's `end` is the next one's `skipped` (joined_at checks it):
 * every chunk is then framed and checksummed by exactly one range, in order. Any other
 * file (an orphan chunk at a range's start, say) is refused, as one thread refuses it. */
typedef struct {
    Out o;
    Buf join;
    const uint8_t *buf;
    size_t size, start, stop, skipped, end;
    const char *why; /* damage: the file is outside this lane */
    int err;         /* out of memory */
} Range;

static const char *frame(Range *r) {
    const uint8_t *buf = r->buf;
    size_t size = r->size, pos = r->start ? r->start : HEADER, last_end = 0;
    int64_t join_at = -1;
    int skipping = r->start != 0;
    r->skipped = r->start;
    while (pos < size) {
        if (pos >= r->stop && join_at < 0 && !skipping) break;
        size_t block_end = (pos / BLOCK + 1) * BLOCK;
        if (block_end - pos < HEADER) {
            pos = block_end;
            continue;
        }
        if (pos + HEADER > size) return "the file ends inside a chunk header";
        const uint8_t *h = buf + pos;
        uint32_t crc = (uint32_t)h[0] | ((uint32_t)h[1] << 8) | ((uint32_t)h[2] << 16) |
                       ((uint32_t)h[3] << 24);
        size_t len = (size_t)h[4] | ((size_t)h[5] << 8);
        int kind = h[6];
        if (len == 0 && kind == 0) {
            pos = block_end;
            continue;
        }
        size_t data = pos + HEADER;
        if (kind < 1 || kind > 4 || data + len > block_end || data + len > size)
            return "a chunk header that cannot be, or a cut record";
        if (skipping) {
            if (kind >= 3) { /* the range before reads (and checks) it */
                pos = last_end = r->skipped = data + len;
                continue;
            }
            skipping = 0;
            if (pos >= r->stop) break; /* (a record longer than the range: none starts here) */
        }
        uint8_t k = (uint8_t)kind;
        if (wb_crc32(wb_crc32(0, &k, 1), buf + data, len) != crc) return "bad checksum";
        if (kind == 1) {
            if (join_at >= 0) return "a split record without its end";
            if (record(&r->o, buf + data, len, (int64_t)pos, 0) < 0) goto fail;
        } else if (kind == 2) {
            if (join_at >= 0) return "a split record without its end";
            r->join.len = 0;
            join_at = (int64_t)pos;
            if (buf_put(&r->join, buf + data, len) < 0) goto fail;
        } else {
            if (join_at < 0) return "the middle or end of a record whose start is lost";
            if (buf_put(&r->join, buf + data, len) < 0) goto fail;
            if (kind == 4) {
                if (record(&r->o, (const uint8_t *)r->join.data, r->join.len, join_at, 1) < 0)
                    goto fail;
                join_at = -1;
            }
        }
        pos = last_end = data + len;
    }
    r->end = last_end > r->stop ? last_end : r->stop;
    return join_at >= 0 ? "a record split over blocks, cut short" : NULL;
fail:
    r->err = 1;
    return NULL;
}

static void *scan_range(void *arg) {
    Range *r = (Range *)arg;
    r->why = frame(r);
    return NULL;
}

/* ---- joining the ranges ------------------------------------------------------------------ */

/* a later range's rows of one metric appended to the joined ones, record indexes moved by
 * `base` (the records before the range); a run that continues the last one joins it, so a
 * metric at every step is still one run (its steps a slice of the marks) */
static int join_col(Col *to, Col *from, int64_t base) {
    if (from->value.len && buf_put(&to->value, from->value.data, from->value.len) < 0) return -1;
    Run *runs = (Run *)from->runs.data;
    for (size_t i = 0; i < from->runs.len / sizeof(Run); i++) {
        Run r = {runs[i].start + base, runs[i].count};
        Run *last = to->runs.len ? (Run *)(to->runs.data + to->runs.len) - 1 : NULL;
        if (last && last->start + last->count == r.start)
            last->count += r.count;
        else if (buf_put(&to->runs, &r, sizeof r) < 0)
            return -1;
    }
    return 0;
}

/* range `from` joined onto `to` (the ranges before it, already joined) */
static int join_range(Out *to, Out *from) {
    int64_t base = to->marks;
    Name *names = (Name *)from->keys.names.data;
    for (size_t c = 0; c < from->keys.n; c++) {
        int32_t g = key_code(&to->keys, names[c].key, names[c].len);
        if (g < 0 || cols_for(to, to->keys.n) < 0) return -1;
        if (c < from->ncols && join_col(&to->cols[g], &from->cols[c], base) < 0) return -1;
    }
    if (buf_put(&to->mark_step, from->mark_step.data, from->mark_step.len) < 0 ||
        buf_put(&to->mark_wall, from->mark_wall.data, from->mark_wall.len) < 0 ||
        buf_put(&to->mark_rec, from->mark_rec.data, from->mark_rec.len) < 0 ||
        buf_put(&to->exact, from->exact.data, from->exact.len) < 0)
        return -1;
    from->exact.len = 0; /* (its owned copies are `to`'s now) */
    to->marks += from->marks;
    return 0;
}

/* NULL when every range ends where the next one's skipped chunks end (see Range) */
static const char *joined_at(Range *ranges, int n) {
    for (int i = 0; i < n; i++)
        if (ranges[i].why) return ranges[i].why;
    for (int i = 1; i < n; i++)
        if (ranges[i - 1].end != ranges[i].skipped)
            return "the middle or end of a record whose start is lost";
    return NULL;
}

/* ---- the result --------------------------------------------------------------------------- */

/* a metric's records: (start, count) for one run, else an int64 Column, one a row */
static PyObject *rows_of(Col *c) {
    size_t nruns = c->runs.len / sizeof(Run);
    Run *runs = (Run *)c->runs.data;
    if (nruns == 1)
        return Py_BuildValue("(LL)", (long long)runs[0].start, (long long)runs[0].count);
    size_t rows = c->value.len / 8;
    int64_t *idx = malloc(rows ? rows * 8 : 1);
    if (!idx) return PyErr_NoMemory();
    size_t at = 0;
    for (size_t r = 0; r < nruns; r++)
        for (int64_t i = 0; i < runs[r].count; i++) idx[at++] = runs[r].start + i;
    return column_new(idx, NULL, (Py_ssize_t)rows, 0, "l");
}

/* the wall times as a Column, null where a record had no _timestamp (NaN here) */
static PyObject *wall_column(Buf *b) {
    size_t n = b->len / 8;
    const double *w = (const double *)b->data;
    size_t nulls = 0;
    for (size_t i = 0; i < n; i++) nulls += isnan(w[i]) != 0;
    uint8_t *valid = NULL;
    if (nulls) {
        valid = calloc((n + 7) / 8, 1);
        if (!valid) return PyErr_NoMemory();
        for (size_t i = 0; i < n; i++)
            if (!isnan(w[i])) valid[i / 8] |= (uint8_t)(1u << (i % 8));
    }
    return column_new(buf_take(b), valid, (Py_ssize_t)n, (Py_ssize_t)nulls, "g");
}

static PyObject *names_list(Keys *k) {
    PyObject *list = PyList_New((Py_ssize_t)k->n);
    Name *names = (Name *)k->names.data;
    for (size_t c = 0; list && c < k->n; c++) {
        /* (bytes that are no UTF-8 as \\xNN escapes, as the other lanes: two keys that differ
         * only there stay two metrics, where "replace" made them one name twice) */
        PyObject *s =
            PyUnicode_DecodeUTF8((const char *)names[c].key, names[c].len, "backslashreplace");
        if (!s) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)c, s);
    }
    return list;
}

static PyObject *exact_list(Buf *b) {
    size_t n = b->len / sizeof(Exact);
    Exact *e = (Exact *)b->data;
    PyObject *list = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; list && i < n; i++) {
        PyObject *t = Py_BuildValue("(Ly#)", (long long)e[i].rec, (const char *)e[i].data,
                                    (Py_ssize_t)e[i].len);
        if (!t) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, t);
    }
    return list;
}

static PyObject *result(Out *o) {
    Py_ssize_t nk = (Py_ssize_t)o->keys.n;
    PyObject *names = names_list(&o->keys), *exact = exact_list(&o->exact);
    PyObject *values = PyList_New(nk), *rows = PyList_New(nk);
    if (!names || !exact || !values || !rows) goto fail;
    for (Py_ssize_t k = 0; k < nk; k++) {
        Col *c = &o->cols[k];
        PyObject *r = rows_of(c);
        if (!r) goto fail;
        PyList_SET_ITEM(rows, k, r);
        Py_ssize_t n = (Py_ssize_t)(c->value.len / 8);
        PyObject *v = column_new(buf_take(&c->value), NULL, n, 0, "g");
        if (!v) goto fail;
        PyList_SET_ITEM(values, k, v);
    }
    PyObject *mstep = column_new(buf_take(&o->mark_step), NULL, (Py_ssize_t)o->marks, 0, "l");
    PyObject *mwall = mstep ? wall_column(&o->mark_wall) : NULL;
    PyObject *mrec =
        mwall ? column_new(buf_take(&o->mark_rec), NULL, (Py_ssize_t)o->marks, 0, "l") : NULL;
    if (!mrec) {
        Py_XDECREF(mstep);
        Py_XDECREF(mwall);
        goto fail;
    }
    return Py_BuildValue("(NNNNNNN)", names, values, rows, mstep, mwall, mrec, exact);
fail:
    Py_XDECREF(names);
    Py_XDECREF(exact);
    Py_XDECREF(values);
    Py_XDECREF(rows);
    return NULL;
}

static void out_free(Out *o) {
    keys_free(&o->keys);
    for (size_t k = 0; k < o->ncols; k++) {
        free(o->cols[k].value.data);
        free(o->cols[k].runs.data);
    }
    free(o->cols);
    free(o->mark_step.data);
    free(o->mark_wall.data);
    free(o->mark_rec.data);
    free(o->items);
    Exact *e = (Exact *)o->exact.data;
    for (size_t i = 0; i < o->exact.len / sizeof(Exact); i++) free(e[i].owned);
    free(o->exact.data);
}

/* the ranges read side by side (the first in this thread; one a thread could not be made
 * for here too, after it) */
static void read_ranges(Range *ranges, int n) {
#if WB_THREADS
    pthread_t ids[MAX_THREADS];
    int made = 1;
    for (; made < n; made++)
        if (pthread_create(&ids[made], NULL, scan_range, &ranges[made]) != 0) break;
    scan_range(&ranges[0]);
    for (int i = 1; i < made; i++) pthread_join(ids[i], NULL);
    for (int i = made; i < n; i++) scan_range(&ranges[i]); /* (no thread: read them here) */
#else
    for (int i = 0; i < n; i++) scan_range(&ranges[i]);
#endif
}

PyDoc_STRVAR(scan_doc,
             "scan(buffer, threads=1) -> (keys, values, rows, mark_step, mark_wall, mark_rec, "
             "exact) | str");

static PyObject *scan(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"buffer", "threads", NULL};
    Py_buffer view;
    int threads = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "y*|i", kwlist, &view, &threads))
        return NULL;
    size_t size = (size_t)view.len, blocks = (size + BLOCK - 1) / BLOCK;
    int n = threads < 1 ? 1 : threads > MAX_THREADS ? MAX_THREADS : threads;
    if ((size_t)n > blocks) n = blocks ? (int)blocks : 1;
    Range ranges[MAX_THREADS];
    memset(ranges, 0, sizeof ranges);
    for (int i = 0; i < n; i++) { /* block-aligned, about equal */
        ranges[i].buf = (const uint8_t *)view.buf;
        ranges[i].size = size;
        ranges[i].start = (size_t)(blocks * (size_t)i / (size_t)n) * BLOCK;
        ranges[i].stop = (size_t)(blocks * (size_t)(i + 1) / (size_t)n) * BLOCK;
    }
    PyObject *res = NULL;
    int err = 0;
    Py_BEGIN_ALLOW_THREADS;
    read_ranges(ranges, n);
    Py_END_ALLOW_THREADS;
    for (int i = 0; i < n; i++) err |= ranges[i].err;
    const char *why = err ? NULL : joined_at(ranges, n);
    if (err) goto done;
    if (why) {
        res = PyUnicode_FromString(why);
        goto done;
    }
    for (int i = 1; i < n; i++)
        if (join_range(&ranges[0].o, &ranges[i].o) < 0) goto done;
    if (cols_for(&ranges[0].o, ranges[0].o.keys.n ? ranges[0].o.keys.n : 1) < 0) goto done;
    res = result(&ranges[0].o);
done:
    if (!res && !PyErr_Occurred()) PyErr_NoMemory();
    for (int i = 0; i < n; i++) {
        out_free(&ranges[i].o);
        free(ranges[i].join.data);
    }
    PyBuffer_Release(&view);
    return res;
}

/* ---- test hooks: the parts, against Python's own -------------------------------------- */

PyDoc_STRVAR(parse_double_doc,
             "parse_double(text: bytes) -> float | None: the exact parser alone (None: it "
             "leaves the text to strtod)");

static PyObject *parse_double(PyObject *self, PyObject *arg) {
    char *s;
    Py_ssize_t n;
    if (PyBytes_AsStringAndSize(arg, &s, &n) < 0) return NULL;
    double d;
    if (!wb_parse_double(s, (size_t)n, &d)) Py_RETURN_NONE;
    return PyFloat_FromDouble(d);
}

PyDoc_STRVAR(crc32_doc, "crc32(data, crc=0) -> int: as zlib.crc32");

static PyObject *crc32(PyObject *self, PyObject *args) {
    Py_buffer view;
    unsigned int crc = 0;
    if (!PyArg_ParseTuple(args, "y*|I", &view, &crc)) return NULL;
    uint32_t c = wb_crc32(crc, (const uint8_t *)view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(c);
}

static PyMethodDef methods[] = {{"scan", (PyCFunction)(void (*)(void))scan,
                                 METH_VARARGS | METH_KEYWORDS, scan_doc},
                                {"parse_double", parse_double, METH_O, parse_double_doc},
                                {"crc32", crc32, METH_VARARGS, crc32_doc},
                                {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_wbscan",
    "The compiled lane of the W&B run reader (see trainlens.readers.wandb_run).", -1, methods};

PyMODINIT_FUNC PyInit__wbscan(void) {
    wb_crc_init();
    if (PyType_Ready(&ColumnType) < 0) return NULL;
    return PyModule_Create(&module);
}
