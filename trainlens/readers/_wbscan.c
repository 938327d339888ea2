/* The compiled lane of the W&B run reader: one pass over a run-<id>.wandb transaction log
 * that frames each chunk (32 KiB blocks, LevelDB's log format), checks its CRC-32, joins
 * records split over blocks, and decodes the history records W&B's SDK writes: items of a
 * one-part key and a value_json number, with _step, _timestamp and _runtime.
 *
 * scan(buffer) returns (keys, counts, rec, step, value, wall, mark_step, mark_wall, exact):
 * keys a list of str and counts the rows of each; rec / step / value / wall bytes of
 * int64 / int64 / float64 / float64 (NaN: no wall time), one row per history value, the
 * rows of keys[0] first, then keys[1]..., each metric's in file order (rec: the byte
 * offset of the row's record); mark_step / mark_wall each decoded history record's step
 * and wall time, in file order; exact a list of (offset, bytes) of the records this lane
 * leaves to the exact decoder (config, stats, run, and history records of another
 * layout) -- or a str saying why the file is outside this lane (any damage: the numpy
 * lane then reads and reports it).
 *
 * Values are parsed with strtod, correctly rounded like Python's float(); a value it does
 * not consume whole sends its record to the exact decoder. Parsing is bounded by the
 * record's length everywhere: a record is untrusted input.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK 32768
#define HEADER 7
#define MAX_VALUE 63

/* ---- CRC-32 (zlib's, IEEE), slice by 8 ---------------------------------------------------- */

static uint32_t crc_table[8][256];

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = crc_table[0][i];
        for (int t = 1; t < 8; t++) {
            c = crc_table[0][c & 0xFF] ^ (c >> 8);
            crc_table[t][i] = c;
        }
    }
}

static uint32_t crc32_update(uint32_t crc, const uint8_t *p, size_t n) {
    uint32_t c = ~crc;
    while (n >= 8) {
        uint32_t lo = ((uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
                       ((uint32_t)p[3] << 24)) ^ c;
        uint32_t hi = (uint32_t)p[4] | ((uint32_t)p[5] << 8) | ((uint32_t)p[6] << 16) |
                      ((uint32_t)p[7] << 24);
        c = crc_table[7][lo & 0xFF] ^ crc_table[6][(lo >> 8) & 0xFF] ^
            crc_table[5][(lo >> 16) & 0xFF] ^ crc_table[4][lo >> 24] ^
            crc_table[3][hi & 0xFF] ^ crc_table[2][(hi >> 8) & 0xFF] ^
            crc_table[1][(hi >> 16) & 0xFF] ^ crc_table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--) c = crc_table[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
    return ~c;
}

/* ---- growable columns --------------------------------------------------------------------- */

typedef struct {
    char *data;
    size_t len, cap;
} Buf;

static int buf_put(Buf *b, const void *src, size_t n) {
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 1 << 16;
        while (cap < b->len + n) cap *= 2;
        char *d = realloc(b->data, cap);
        if (!d) return -1;
        b->data = d;
        b->cap = cap;
    }
    memcpy(b->data + b->len, src, n);
    b->len += n;
    return 0;
}

/* ---- keys --------------------------------------------------------------------------------- */

typedef struct {
    const uint8_t *key; /* a copy: keys may sit in the scratch buffer of a joined record */
    uint32_t len;
    int32_t code;
} Slot;

typedef struct {
    Slot *slots;
    size_t cap, n;
    PyObject *names; /* list of str, in code order */
} Keys;

static uint64_t fnv(const uint8_t *p, size_t n) {
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ULL;
    return h;
}

static int32_t key_code(Keys *k, const uint8_t *p, uint32_t n) {
    if (k->n * 2 >= k->cap) {
        size_t cap = k->cap ? k->cap * 2 : 64;
        Slot *s = calloc(cap, sizeof(Slot));
        if (!s) return -1;
        for (size_t i = 0; i < k->cap; i++) {
            if (!k->slots[i].key) continue;
            size_t j = fnv(k->slots[i].key, k->slots[i].len) & (cap - 1);
            while (s[j].key) j = (j + 1) & (cap - 1);
            s[j] = k->slots[i];
        }
        free(k->slots);
        k->slots = s;
        k->cap = cap;
    }
    size_t j = fnv(p, n) & (k->cap - 1);
    while (k->slots[j].key) {
        if (k->slots[j].len == n && memcmp(k->slots[j].key, p, n) == 0) return k->slots[j].code;
        j = (j + 1) & (k->cap - 1);
    }
    uint8_t *copy = malloc(n ? n : 1);
    if (!copy) return -1;
    memcpy(copy, p, n);
    PyObject *name = PyUnicode_DecodeUTF8((const char *)p, n, "replace");
    if (!name || PyList_Append(k->names, name) < 0) {
        Py_XDECREF(name);
        free(copy);
        return -1;
    }
    Py_DECREF(name);
    k->slots[j].key = copy;
    k->slots[j].len = n;
    k->slots[j].code = (int32_t)k->n;
    k->n++;
    return k->slots[j].code;
}

static void keys_free(Keys *k) {
    for (size_t i = 0; i < k->cap; i++) free((void *)k->slots[i].key);
    free(k->slots);
}

/* ---- protobuf ----------------------------------------------------------------------------- */

static int varint(const uint8_t **pp, const uint8_t *end, uint64_t *out) {
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

/* one field: its number and wire type; for wire 2 the value's range in [*a, *b) */
static int field(const uint8_t **pp, const uint8_t *end, uint32_t *num, int *wire,
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

/* Clinger's fast path: a decimal of at most 2^53 as its digits and a power of ten of at
 * most 1e22, both exact doubles, so one multiplication or division is correctly rounded:
 * the same double as strtod and Python's float(). 0 when the text is outside it (17
 * significant digits, NaN, Infinity, a large exponent): strtod then reads it (~100 ns a
 * value: most of this lane's time for 12M values before this path). */
static const double pow10[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                 1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

static int fast_double(const char *s, size_t n, double *out) {
    size_t i = 0;
    int neg = 0, digits = 0, seen = 0, exp10 = 0;
    uint64_t m = 0;
    if (i < n && s[i] == '-') {
        neg = 1;
        i++;
    }
    for (int frac = 0; i < n; i++) {
        char c = s[i];
        if (c == '.' && !frac) {
            frac = 1;
            continue;
        }
        if (c < '0' || c > '9') break;
        seen = 1;
        if (m == 0 && c == '0') {
            if (frac) exp10--;
            continue;
        }
        if (++digits > 19) return 0;
        m = m * 10 + (uint64_t)(c - '0');
        if (frac) exp10--;
    }
    if (!seen) return 0;
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        int eneg = 0, e = 0, ed = 0;
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-')) eneg = s[i++] == '-';
        for (; i < n && s[i] >= '0' && s[i] <= '9'; i++, ed++)
            if (e < 10000) e = e * 10 + (s[i] - '0');
        if (!ed) return 0;
        exp10 += eneg ? -e : e;
    }
    if (i != n || m > (1ULL << 53)) return 0;
    double d = (double)m;
    if (m == 0) {
        d = 0.0;
    } else if (exp10 < -22 || exp10 > 22) {
        return 0;
    } else {
        d = exp10 < 0 ? d / pow10[-exp10] : d * pow10[exp10];
    }
    *out = neg ? -d : d;
    return 1;
}

typedef struct {
    int32_t code;
    double value;
} Item;

typedef struct {
    Buf rec, step, value, wall;
} Col; /* one metric's rows, so the frame comes out one block per metric, in order */

typedef struct {
    Keys keys;
    Col *cols;
    size_t ncols;
    Buf mark_step, mark_wall; /* each decoded history record's step and wall time */
    Item *items;
    size_t items_cap;
    PyObject *exact;
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
        if (!fast_double((const char *)val, val_len, &d)) {
            char text[MAX_VALUE + 1];
            memcpy(text, val, val_len);
            text[val_len] = 0;
            char *stop;
            d = strtod(text, &stop);
            if (stop != text + val_len || memchr(text, 'x', val_len) ||
                memchr(text, 'X', val_len) ||
                !(text[0] == '-' || text[0] == 'N' || text[0] == 'I' ||
                  (text[0] >= '0' && text[0] <= '9')))
                return 0; /* a string, a bool, an object, or a spelling only C reads (hex) */
        }
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
    if (!has_step || !isfinite(step) || step != floor(step) || fabs(step) > 9.0e18) return 0;
    int64_t s = (int64_t)step;
    if (cols_for(o, o->keys.n) < 0) return -1;
    for (size_t i = 0; i < n; i++) {
        Col *c = &o->cols[o->items[i].code];
        if (buf_put(&c->rec, &rec, 8) < 0 || buf_put(&c->step, &s, 8) < 0 ||
            buf_put(&c->value, &o->items[i].value, 8) < 0 || buf_put(&c->wall, &wall, 8) < 0)
            return -1;
    }
    if (buf_put(&o->mark_step, &s, 8) < 0 || buf_put(&o->mark_wall, &wall, 8) < 0) return -1;
    return 1;
}

static int exact(Out *o, const uint8_t *p, size_t n, int64_t rec) {
    PyObject *t = Py_BuildValue("(Ly#)", (long long)rec, (const char *)p, (Py_ssize_t)n);
    if (!t) return -1;
    int r = PyList_Append(o->exact, t);
    Py_DECREF(t);
    return r;
}

/* 0 handled, -1 error */
static int record(Out *o, const uint8_t *p, size_t n, int64_t rec) {
    const uint8_t *q = p, *end = p + n;
    while (q < end) {
        uint32_t num;
        int wire;
        const uint8_t *a = NULL, *b = NULL;
        uint64_t v;
        if (field(&q, end, &num, &wire, &a, &b, &v) < 0) return exact(o, p, n, rec);
        if (wire != 2) continue;
        if (num == 2) {
            int r = history(o, a, b, rec);
            if (r < 0) return -1;
            return r ? 0 : exact(o, p, n, rec);
        }
        if (num == 5 || num == 7 || num == 17) return exact(o, p, n, rec);
    }
    return 0;
}

static PyObject *as_bytes(Buf *b) {
    return PyBytes_FromStringAndSize(b->data ? b->data : "", (Py_ssize_t)b->len);
}

static Buf *col_buf(Col *c, int which) {
    switch (which) {
        case 0: return &c->rec;
        case 1: return &c->step;
        case 2: return &c->value;
        default: return &c->wall;
    }
}

/* one column of every metric's rows, metric after metric (which: 0 rec, 1 step, ...) */
static PyObject *joined_col(Out *o, int which) {
    size_t total = 0;
    for (size_t k = 0; k < o->keys.n; k++) total += col_buf(&o->cols[k], which)->len;
    PyObject *b = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total);
    if (!b) return NULL;
    char *dst = PyBytes_AS_STRING(b);
    for (size_t k = 0; k < o->keys.n; k++) {
        Buf *src = col_buf(&o->cols[k], which);
        if (src->len) memcpy(dst, src->data, src->len);
        dst += src->len;
    }
    return b;
}

static PyObject *row_counts(Out *o) {
    PyObject *list = PyList_New((Py_ssize_t)o->keys.n);
    if (!list) return NULL;
    for (size_t k = 0; k < o->keys.n; k++) {
        PyObject *n = PyLong_FromSize_t(o->cols[k].step.len / 8);
        if (!n) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)k, n);
    }
    return list;
}

static const char *frame(Out *o, const uint8_t *buf, size_t size, Buf *join, int *err) {
    size_t pos = HEADER;
    int64_t join_at = -1;
    while (pos < size) {
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
        uint8_t k = (uint8_t)kind;
        if (crc32_update(crc32_update(0, &k, 1), buf + data, len) != crc) return "bad checksum";
        if (kind == 1) {
            if (join_at >= 0) return "a split record without its end";
            if (record(o, buf + data, len, (int64_t)pos) < 0) goto fail;
        } else if (kind == 2) {
            if (join_at >= 0) return "a split record without its end";
            join->len = 0;
            join_at = (int64_t)pos;
            if (buf_put(join, buf + data, len) < 0) goto fail;
        } else {
            if (join_at < 0) return "the middle or end of a record whose start is lost";
            if (buf_put(join, buf + data, len) < 0) goto fail;
            if (kind == 4) {
                if (record(o, (const uint8_t *)join->data, join->len, join_at) < 0) goto fail;
                join_at = -1;
            }
        }
        pos = data + len;
    }
    return join_at >= 0 ? "a record split over blocks, cut short" : NULL;
fail:
    *err = 1;
    return NULL;
}

PyDoc_STRVAR(scan_doc, "scan(buffer) -> (keys, code, rec, step, value, wall, exact) | str");

static PyObject *scan(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    Out o;
    memset(&o, 0, sizeof o);
    Buf join = {0};
    PyObject *result = NULL;
    o.keys.names = PyList_New(0);
    o.exact = PyList_New(0);
    if (!o.keys.names || !o.exact) goto done;
    int err = 0;
    const char *why = frame(&o, (const uint8_t *)view.buf, (size_t)view.len, &join, &err);
    if (err) goto done;
    if (why) {
        result = PyUnicode_FromString(why);
        goto done;
    }
    if (cols_for(&o, o.keys.n ? o.keys.n : 1) < 0) goto done;
    result = Py_BuildValue("(ONNNNNNNO)", o.keys.names, row_counts(&o), joined_col(&o, 0),
                           joined_col(&o, 1), joined_col(&o, 2), joined_col(&o, 3),
                           as_bytes(&o.mark_step), as_bytes(&o.mark_wall), o.exact);
done:
    Py_XDECREF(o.keys.names);
    Py_XDECREF(o.exact);
    keys_free(&o.keys);
    for (size_t k = 0; k < o.ncols; k++) {
        free(o.cols[k].rec.data);
        free(o.cols[k].step.data);
        free(o.cols[k].value.data);
        free(o.cols[k].wall.data);
    }
    free(o.cols);
    free(o.mark_step.data);
    free(o.mark_wall.data);
    free(o.items);
    free(join.data);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {{"scan", scan, METH_O, scan_doc}, {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_wbscan",
    "The compiled lane of the W&B run reader (see trainlens.readers.wandb_run).", -1, methods};

PyMODINIT_FUNC PyInit__wbscan(void) {
    crc_init();
    return PyModule_Create(&module);
}
