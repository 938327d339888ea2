/* The compiled lane of the JSONL reader: one pass over a file of flat JSON objects whose
 * values are all numbers, one object a line (what a training loop's json.dumps per step
 * writes), into one column per key.
 *
 * scan(buffer, stop, step_names, every_int=False) reads buffer[0:stop) and returns
 * (names, values, ints, rows):
 * - names: list of str, the keys in order of first appearance (the line a key first
 *   appears on, then its place on that line);
 * - values: per key a Column of float64, one row a line, null where the line lacks it;
 * - ints: per key, for a key whose lower-cased name is in step_names (a tuple of bytes,
 *   lower case), or any key when every_int is true, and whose every value is an integer
 *   literal of at most 18 digits, a Column of int64 (the same rows and nulls); else None
 *   (every_int is for a small file read whole, where polars infers Int64 for a key of
 *   integer literals only);
 * - rows: the number of lines;
 * or a str saying why the file is outside this lane: anything but `{"key": number, ...}`
 * lines (a string, true/false/null, a nested object or list, a bare NaN or Infinity, a
 * key that is empty or holds an escape, a byte outside printable ASCII or one of
 * `:{}[]`, a key twice on a line, an empty object, a blank line, a number outside JSON's
 * grammar or past 18 digits as an integer or 64 characters, a value past the double
 * range), or more cells than this lane holds. The caller then reads the file as before
 * (polars, or the general path), which handles and reports all of that; this lane never
 * has to, and what it takes is exactly what polars' path takes whole (see
 * trainlens/readers/_jsonl_compiled.py).
 *
 * Numbers are parsed exactly (_wbfloat.h), else by strtod, correctly rounded like
 * polars' and Python's parsers. Parsing is bounded by the buffer everywhere: a file is
 * untrusted input. Columns go to polars through the Arrow PyCapsule interface, so the
 * lane needs no numpy; the GIL is released while it reads.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define COLUMN_TYPE_NAME "trainlens.readers._jlscan.Column"
#include "_arrow_column.h"
#include "_wbfloat.h"

#define MAX_NUMBER 64        /* characters of one number's text */
#define MAX_INT_DIGITS 18    /* an integer literal with more goes to polars */
#define MAX_CELLS (1LL << 28) /* keys x lines: 2 GiB of doubles; past that, polars */
#define MAX_STEP_NAMES 16
#define MAX_STEP_NAME 64

/* ---- keys ----------------------------------------------------------------------------- */

typedef struct {
    const uint8_t *key; /* in the buffer (keys hold no escapes, so the bytes are the name) */
    uint32_t len;
    uint64_t hash;
    double *value;   /* rows, calloc'd */
    uint8_t *valid;  /* bitmap, calloc'd */
    int64_t *ints;   /* rows, for a step-named key (NULL otherwise) */
    int64_t count;   /* values read */
    int int_ok;      /* every value an integer literal (ints holds them) */
} Col;

typedef struct {
    Col *cols;
    size_t n, cap;     /* columns, in order of first appearance */
    int32_t *slots;    /* open addressing: index into cols + 1, 0 empty */
    size_t nslots;
    int32_t *prev;     /* the columns of the line before, in its order: most lines repeat it */
    size_t nprev, prev_cap;
    int64_t rows;
    const char *why;   /* the file is outside this lane */
    int nomem;
    int nsteps;
    int every_int;     /* every key's integers kept, not only a step-named key's */
    uint8_t steps[MAX_STEP_NAMES][MAX_STEP_NAME];
    size_t step_len[MAX_STEP_NAMES];
} Scan;

static uint64_t key_hash(const uint8_t *p, size_t n) {
    uint64_t h = 1469598103934665603ULL ^ (n * 0x9E3779B97F4A7C15ULL);
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ULL;
    return h ^ (h >> 29);
}

static int is_step_name(const Scan *s, const uint8_t *p, size_t n) {
    for (int i = 0; i < s->nsteps; i++) {
        if (s->step_len[i] != n) continue;
        size_t j = 0;
        for (; j < n; j++) {
            uint8_t c = p[j];
            if (c >= 'A' && c <= 'Z') c = (uint8_t)(c - 'A' + 'a');
            if (c != s->steps[i][j]) break;
        }
        if (j == n) return 1;
    }
    return 0;
}

static int grow_slots(Scan *s) {
    size_t cap = s->nslots ? s->nslots * 2 : 64;
    int32_t *slots = calloc(cap, sizeof(int32_t));
    if (!slots) return -1;
    for (size_t c = 0; c < s->n; c++) {
        size_t j = s->cols[c].hash & (cap - 1);
        while (slots[j]) j = (j + 1) & (cap - 1);
        slots[j] = (int32_t)(c + 1);
    }
    free(s->slots);
    s->slots = slots;
    s->nslots = cap;
    return 0;
}

static int key_ok(const uint8_t *p, size_t n) {
    if (n == 0) return 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t k = p[i];
        /* (an escape is decoded by polars; ':' counts as a key to the proof of polars'
         * path, and brackets as nesting to its sample's check) */
        if (k < 0x20 || k > 0x7E || k == '\\' || k == ':' || k == '{' || k == '}' ||
            k == '[' || k == ']')
            return 0;
    }
    return 1;
}

/* the column of key p[0..n), made on first sight (a key is checked then: one that
 * matches a column's is the same bytes); NULL when out of memory, past the lane's size
 * or no key it takes (s->why says which) */
static Col *column(Scan *s, const uint8_t *p, uint32_t n) {
    if ((s->n + 1) * 2 > s->nslots && grow_slots(s) < 0) goto nomem;
    uint64_t h = key_hash(p, n);
    size_t j = h & (s->nslots - 1);
    while (s->slots[j]) {
        Col *c = &s->cols[s->slots[j] - 1];
        if (c->hash == h && c->len == n && memcmp(c->key, p, n) == 0) return c;
        j = (j + 1) & (s->nslots - 1);
    }
    if (!key_ok(p, n)) {
        s->why = "a key that is empty, holds an escape, or a byte outside printable ASCII "
                 "or one of :{}[]";
        return NULL;
    }
    if ((int64_t)(s->n + 1) * s->rows > MAX_CELLS || s->n >= INT32_MAX - 1) {
        s->why = "more keys x lines than the compiled lane holds";
        return NULL;
    }
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 16;
        Col *cols = realloc(s->cols, cap * sizeof(Col));
        if (!cols) goto nomem;
        s->cols = cols;
        s->cap = cap;
    }
    Col *c = &s->cols[s->n];
    memset(c, 0, sizeof *c);
    c->key = p;
    c->len = n;
    c->hash = h;
    size_t rows = (size_t)s->rows;
    c->value = calloc(rows, sizeof(double));
    c->valid = calloc((rows + 7) / 8, 1);
    if (s->every_int || is_step_name(s, p, n)) {
        c->ints = calloc(rows, sizeof(int64_t));
        c->int_ok = 1;
    }
    if (!c->value || !c->valid || (c->int_ok && !c->ints)) {
        free(c->value);
        free(c->valid);
        free(c->ints);
        goto nomem;
    }
    s->slots[j] = (int32_t)(s->n + 1);
    s->n++;
    return c;
nomem:
    s->nomem = 1;
    return NULL;
}

/* ---- one line --------------------------------------------------------------------------- */

static inline const uint8_t *skip_ws(const uint8_t *p, const uint8_t *e) {
    while (p < e && (*p == ' ' || *p == '\t')) p++;
    return p;
}

static inline int is_digit(uint8_t c) { return c >= '0' && c <= '9'; }

/* the bytes that may continue a number's text: digits, '.', e/E, +/- */
static const uint8_t NUMCH[256] = {
    ['0'] = 1, ['1'] = 1, ['2'] = 1, ['3'] = 1, ['4'] = 1, ['5'] = 1, ['6'] = 1, ['7'] = 1,
    ['8'] = 1, ['9'] = 1, ['.'] = 1, ['e'] = 1, ['E'] = 1, ['+'] = 1, ['-'] = 1,
};

/* digits from p on into *m, eight at a time where they come eight in a row */
static inline const uint8_t *digits(const uint8_t *p, const uint8_t *e, uint64_t *m) {
    while (e - p >= 8 && wb_all_digits(wb_load8((const char *)p))) {
        *m = *m * 100000000 + wb_eight_digits(wb_load8((const char *)p));
        p += 8;
    }
    while (p < e && is_digit(*p)) *m = *m * 10 + (uint64_t)(*p++ - '0');
    return p;
}

/* A value at p (before e): its double, whether it is an integer literal (and then its
 * int64), and where it ends; NULL when it is no number this lane reads (a bare NaN or
 * Infinity among them: polars refuses those, and the reader's path for them swaps them
 * first, which this lane does not copy). JSON's grammar, -?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?,
 * is checked as the digits are read (one pass); the value is wb_parse_double's. */
static const uint8_t *value(const uint8_t *p, const uint8_t *e, double *d, int *is_int,
                            int64_t *iv) {
    const uint8_t *start = p;
    int neg = p < e && *p == '-';
    const uint8_t *first = p + neg;
    if (first >= e || !is_digit(*first)) return NULL;
    uint64_t m = 0;
    const uint8_t *q = digits(first, e, &m);
    size_t int_digits = (size_t)(q - first), all = int_digits;
    if (*first == '0' && int_digits > 1) return NULL; /* a leading zero */
    int32_t exp10 = 0;
    int integer = 1;
    if (q < e && *q == '.') {
        const uint8_t *frac = ++q;
        q = digits(q, e, &m);
        if (q == frac) return NULL;
        exp10 = -(int32_t)(q - frac);
        all += (size_t)(q - frac);
        integer = 0;
    }
    if (q < e && (*q == 'e' || *q == 'E')) {
        q++;
        int eneg = q < e && *q == '-';
        q += q < e && (*q == '-' || *q == '+');
        const uint8_t *at = q;
        int32_t x = 0;
        for (; q < e && is_digit(*q); q++)
            if (x < 100000) x = x * 10 + (*q - '0'); /* far past any double either way */
        if (q == at) return NULL;
        exp10 += eneg ? -x : x;
        integer = 0;
    }
    if (q < e && NUMCH[*q]) return NULL; /* "1.2.3", "1e5e6", "1-2" */
    size_t len = (size_t)(q - start);
    if (len > MAX_NUMBER || (integer && int_digits > MAX_INT_DIGITS)) return NULL;
    if (all > 19) { /* leading zeros are no significant digits: count without them */
        for (const uint8_t *r = first; r < q && (*r == '0' || *r == '.'); r++) all -= *r == '0';
    }
    if (all > 19 || !wb_scaled(m, exp10, neg, d)) { /* more than a uint64 holds: strtod */
        char text[MAX_NUMBER + 1];
        memcpy(text, start, len);
        text[len] = 0;
        char *stop;
        *d = strtod(text, &stop);
        if (stop != text + len) return NULL;
    }
    if (!isfinite(*d)) return NULL; /* past the double range: polars says what it makes of it */
    *is_int = integer;
    if (integer) { /* (at most 18 digits: exact) */
        *iv = neg ? -(int64_t)m : (int64_t)m;
        *d = (double)*iv; /* as polars makes a float of an integer literal: -0 is 0.0 */
    }
    return q;
}

/* one line from p as row `row` (end: the buffer's end); where the next line starts, or
 * NULL with s->why / nomem */
static const uint8_t *line(Scan *s, const uint8_t *p, const uint8_t *end, int64_t row) {
    p = skip_ws(p, end);
    if (p >= end || *p != '{') {
        s->why = p < end && *p == '\n' ? "a blank line" : "a line that is no JSON object";
        return NULL;
    }
    p = skip_ws(p + 1, end);
    if (p < end && *p == '}') {
        s->why = "an empty object";
        return NULL;
    }
    if (row >= s->rows) goto bad; /* (the count said fewer lines: cannot be, but bounded) */
    size_t byte = (size_t)row >> 3, pos = 0;
    uint8_t bit = (uint8_t)(1u << (row & 7));
    for (;;) {
        if (p >= end || *p != '"') goto bad;
        const uint8_t *key = ++p;
        Col *c = NULL;
        if (pos < s->nprev) { /* most lines name the keys of the line before, in its order */
            Col *guess = &s->cols[s->prev[pos]];
            size_t n = guess->len;
            if ((size_t)(end - key) > n && key[n] == '"' && memcmp(guess->key, key, n) == 0) {
                c = guess;
                p = key + n;
            }
        }
        if (!c) {
            p = memchr(key, '"', (size_t)(end - key));
            if (!p) goto bad;
            /* (a key with an escaped quote ends at its backslash here: refused as a key) */
            if (!(c = column(s, key, (uint32_t)(p - key)))) return NULL;
        }
        p = skip_ws(p + 1, end);
        if (p >= end || *p != ':') goto bad;
        p = skip_ws(p + 1, end);
        double d;
        int is_int;
        int64_t iv = 0;
        const uint8_t *after = value(p, end, &d, &is_int, &iv);
        if (!after) {
            s->why = "a value that is no number (a string, true/false/null, NaN, an object "
                     "or a list), or one outside this lane's numbers";
            return NULL;
        }
        p = after;
        if (pos == s->prev_cap) {
            size_t cap = s->prev_cap ? s->prev_cap * 2 : 64;
            int32_t *prev = realloc(s->prev, cap * sizeof(int32_t));
            if (!prev) {
                s->nomem = 1;
                return NULL;
            }
            s->prev = prev;
            s->prev_cap = cap;
        }
        s->prev[pos++] = (int32_t)(c - s->cols);
        if (c->valid[byte] & bit) {
            s->why = "a key twice on one line";
            return NULL;
        }
        c->valid[byte] |= bit;
        c->value[row] = d;
        c->count++;
        if (c->ints) {
            if (is_int)
                c->ints[row] = iv;
            else
                c->int_ok = 0;
        }
        p = skip_ws(p, end);
        if (p < end && *p == ',') {
            p = skip_ws(p + 1, end);
            continue;
        }
        if (p < end && *p == '}') break;
        goto bad;
    }
    s->nprev = pos;
    p = skip_ws(p + 1, end);
    if (p < end && *p == '\n') return p + 1;
    if (p >= end) {
        s->why = "a last line without its newline";
        return NULL;
    }
bad:
    s->why = "a line that is no flat JSON object";
    return NULL;
}

static void read_lines(Scan *s, const uint8_t *buf, size_t size) {
    const uint8_t *p = buf, *end = buf + size;
    for (int64_t row = 0; p && p < end; row++) p = line(s, p, end, row);
}

/* ---- the result --------------------------------------------------------------------------- */

static void scan_free(Scan *s) {
    for (size_t c = 0; c < s->n; c++) {
        free(s->cols[c].value);
        free(s->cols[c].valid);
        free(s->cols[c].ints);
    }
    free(s->cols);
    free(s->slots);
    free(s->prev);
}

/* the validity of a column: NULL when every row holds a value (its bitmap freed) */
static uint8_t *validity(Col *c, int64_t rows) {
    if (c->count == rows) {
        free(c->valid);
        c->valid = NULL;
    }
    return c->valid;
}

static PyObject *result(Scan *s) {
    Py_ssize_t n = (Py_ssize_t)s->n, rows = (Py_ssize_t)s->rows;
    PyObject *names = PyList_New(n), *values = PyList_New(n), *ints = PyList_New(n);
    if (!names || !values || !ints) goto fail;
    for (Py_ssize_t k = 0; k < n; k++) {
        Col *c = &s->cols[k];
        PyObject *name = PyUnicode_DecodeASCII((const char *)c->key, c->len, "strict");
        if (!name) goto fail;
        PyList_SET_ITEM(names, k, name);
        uint8_t *valid = validity(c, s->rows);
        Py_ssize_t nulls = rows - (Py_ssize_t)c->count;
        PyObject *ic = Py_None;
        if (c->ints && c->int_ok) {
            uint8_t *copy = NULL;
            if (valid) {
                copy = malloc(((size_t)rows + 7) / 8);
                if (!copy) {
                    PyErr_NoMemory();
                    goto fail;
                }
                memcpy(copy, valid, ((size_t)rows + 7) / 8);
            }
            ic = column_new(c->ints, copy, rows, nulls, "l");
            c->ints = NULL;
            if (!ic) goto fail;
        } else {
            Py_INCREF(ic);
        }
        PyList_SET_ITEM(ints, k, ic);
        PyObject *vc = column_new(c->value, valid, rows, nulls, "g");
        c->value = NULL;
        c->valid = NULL;
        if (!vc) goto fail;
        PyList_SET_ITEM(values, k, vc);
    }
    return Py_BuildValue("(NNNn)", names, values, ints, rows);
fail:
    Py_XDECREF(names);
    Py_XDECREF(values);
    Py_XDECREF(ints);
    return NULL;
}

PyDoc_STRVAR(scan_doc,
             "scan(buffer, stop, step_names, every_int=False) -> (names, values, ints, rows) | str");

static PyObject *scan(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t stop;
    PyObject *step_names;
    int every_int = 0;
    if (!PyArg_ParseTuple(args, "y*nO!|p", &view, &stop, &PyTuple_Type, &step_names, &every_int))
        return NULL;
    Scan s;
    memset(&s, 0, sizeof s);
    PyObject *res = NULL;
    if (stop < 0 || stop > view.len) {
        PyErr_SetString(PyExc_ValueError, "stop outside the buffer");
        goto done;
    }
    Py_ssize_t nsteps = PyTuple_GET_SIZE(step_names);
    if (nsteps > MAX_STEP_NAMES) {
        PyErr_SetString(PyExc_ValueError, "too many step names");
        goto done;
    }
    for (Py_ssize_t i = 0; i < nsteps; i++) {
        char *name;
        Py_ssize_t len;
        if (PyBytes_AsStringAndSize(PyTuple_GET_ITEM(step_names, i), &name, &len) < 0) goto done;
        if (len > MAX_STEP_NAME) {
            PyErr_SetString(PyExc_ValueError, "a step name too long");
            goto done;
        }
        memcpy(s.steps[i], name, (size_t)len);
        s.step_len[i] = (size_t)len;
    }
    s.nsteps = (int)nsteps;
    s.every_int = every_int;
    const uint8_t *buf = (const uint8_t *)view.buf;
    size_t size = (size_t)stop;
    Py_BEGIN_ALLOW_THREADS;
    for (const uint8_t *p = buf, *end = buf + size; p < end; s.rows++) {
        const uint8_t *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl) break; /* (read_lines says so) */
        p = nl + 1;
    }
    if (s.rows == 0)
        s.why = "no line";
    else
        read_lines(&s, buf, size);
    Py_END_ALLOW_THREADS;
    if (s.nomem) {
        PyErr_NoMemory();
        goto done;
    }
    if (s.why) {
        res = PyUnicode_FromString(s.why);
        goto done;
    }
    res = result(&s);
done:
    scan_free(&s);
    PyBuffer_Release(&view);
    return res;
}

static PyMethodDef methods[] = {{"scan", scan, METH_VARARGS, scan_doc}, {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_jlscan",
    "The compiled lane of the JSONL reader (see trainlens.readers.jsonl).", -1, methods};

PyMODINIT_FUNC PyInit__jlscan(void) {
    if (PyType_Ready(&ColumnType) < 0) return NULL;
    return PyModule_Create(&module);
}
