/* Column: a decoded column handed to polars through the Arrow PyCapsule interface
 * (__arrow_c_array__), so polars takes the memory over without a copy and a compiled lane
 * needs no numpy (its import alone is ~0.1 s of a whole-process read). _tbscan's Column,
 * plus an optional validity bitmap (Arrow's: bit i set = row i is a value), for any lane:
 * define COLUMN_TYPE_NAME, then include once, after Python.h, in the module that
 * registers ColumnType (PyType_Ready). _tbscan and _wbscan both use it. */
#ifndef TRAINLENS_ARROW_COLUMN_H
#define TRAINLENS_ARROW_COLUMN_H

#ifndef COLUMN_TYPE_NAME
#error "define COLUMN_TYPE_NAME (the module's Column type name) before including"
#endif

#include <stdint.h>
#include <stdlib.h>

struct ArrowSchema {
    const char *format;
    const char *name;
    const char *metadata;
    int64_t flags;
    int64_t n_children;
    struct ArrowSchema **children;
    struct ArrowSchema *dictionary;
    void (*release)(struct ArrowSchema *);
    void *private_data;
};

struct ArrowArray {
    int64_t length;
    int64_t null_count;
    int64_t offset;
    int64_t n_buffers;
    int64_t n_children;
    const void **buffers;
    struct ArrowArray **children;
    struct ArrowArray *dictionary;
    void (*release)(struct ArrowArray *);
    void *private_data;
};

typedef struct {
    PyObject_HEAD void *data; /* malloc'd; NULL once exported */
    uint8_t *valid;           /* malloc'd bitmap, or NULL: no nulls */
    Py_ssize_t length, null_count;
    const char *format; /* Arrow format: "l" int64, "g" float64 */
} Column;

typedef struct {
    const void *buffers[2]; /* validity, values */
    void *data;
    uint8_t *valid;
} ArrayPrivate;

static void release_schema(struct ArrowSchema *s) { s->release = NULL; }

static void release_array(struct ArrowArray *a) {
    ArrayPrivate *priv = (ArrayPrivate *)a->private_data;
    if (priv != NULL) {
        free(priv->data);
        free(priv->valid);
        free(priv);
    }
    a->private_data = NULL;
    a->release = NULL;
}

static void schema_capsule_free(PyObject *cap) {
    struct ArrowSchema *s = (struct ArrowSchema *)PyCapsule_GetPointer(cap, "arrow_schema");
    if (s == NULL) {
        PyErr_Clear();
        return;
    }
    if (s->release != NULL) s->release(s);
    free(s);
}

static void array_capsule_free(PyObject *cap) {
    struct ArrowArray *a = (struct ArrowArray *)PyCapsule_GetPointer(cap, "arrow_array");
    if (a == NULL) {
        PyErr_Clear();
        return;
    }
    if (a->release != NULL) a->release(a);
    free(a);
}

static void Column_dealloc(Column *self) {
    free(self->data);
    free(self->valid);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static Py_ssize_t Column_len(Column *self) { return self->length; }

/* __arrow_c_array__(requested_schema=None): hands the column's memory over to the consumer
 * (polars), which frees it through the array's release callback. A column exports once. */
static PyObject *Column_arrow_c_array(Column *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"requested_schema", NULL};
    PyObject *requested = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O", kwlist, &requested)) return NULL;
    if (self->data == NULL && self->length > 0) {
        PyErr_SetString(PyExc_ValueError, "this column was already exported");
        return NULL;
    }
    struct ArrowSchema *schema = calloc(1, sizeof(struct ArrowSchema));
    struct ArrowArray *array = calloc(1, sizeof(struct ArrowArray));
    ArrayPrivate *priv = calloc(1, sizeof(ArrayPrivate));
    void *data = self->data != NULL ? self->data : malloc(1); /* valid even when empty */
    if (schema == NULL || array == NULL || priv == NULL || data == NULL) {
        free(schema);
        free(array);
        free(priv);
        if (data != self->data) free(data);
        return PyErr_NoMemory();
    }
    schema->format = self->format;
    schema->name = "";
    schema->flags = 2; /* ARROW_FLAG_NULLABLE */
    schema->release = release_schema;
    priv->data = data;
    priv->valid = self->valid;
    priv->buffers[0] = self->valid;
    priv->buffers[1] = data;
    array->length = self->length;
    array->null_count = self->valid != NULL ? self->null_count : 0;
    array->n_buffers = 2;
    array->buffers = priv->buffers;
    array->release = release_array;
    array->private_data = priv;
    self->data = NULL;
    self->valid = NULL;
    PyObject *s_cap = PyCapsule_New(schema, "arrow_schema", schema_capsule_free);
    if (s_cap == NULL) {
        release_array(array);
        free(array);
        free(schema);
        return NULL;
    }
    PyObject *a_cap = PyCapsule_New(array, "arrow_array", array_capsule_free);
    if (a_cap == NULL) {
        release_array(array);
        free(array);
        Py_DECREF(s_cap);
        return NULL;
    }
    return Py_BuildValue("(NN)", s_cap, a_cap);
}

static PyMethodDef Column_methods[] = {
    {"__arrow_c_array__", (PyCFunction)(void (*)(void))Column_arrow_c_array,
     METH_VARARGS | METH_KEYWORDS, "Export the column (once) through the Arrow C data interface."},
    {NULL, NULL, 0, NULL}};

static PySequenceMethods Column_as_sequence = {.sq_length = (lenfunc)Column_len};

static PyTypeObject ColumnType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = COLUMN_TYPE_NAME,
    .tp_basicsize = sizeof(Column),
    .tp_dealloc = (destructor)Column_dealloc,
    .tp_as_sequence = &Column_as_sequence,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A decoded column, exported to Arrow once.",
    .tp_methods = Column_methods,
};

/* a Column owning data (and valid, when not NULL); frees them if it cannot be made */
static PyObject *column_new(void *data, uint8_t *valid, Py_ssize_t length, Py_ssize_t nulls,
                            const char *format) {
    Column *c = PyObject_New(Column, &ColumnType);
    if (c == NULL) {
        free(data);
        free(valid);
        return NULL;
    }
    c->data = data;
    c->valid = valid;
    c->length = length;
    c->null_count = nulls;
    c->format = format;
    return (PyObject *)c;
}

#endif
