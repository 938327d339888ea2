/* A guard for reading memory-mapped files that another process may cut short meanwhile.

   Touching a page of a file mapping that lies past the file's end (the file was truncated
   after it was mapped) raises SIGBUS, and the default action ends the process with no
   message. The readers map files (the compiled lanes, the numpy TensorBoard reader, and
   polars, which maps a file it reads from a path, in its own threads), and a file a job
   still writes is the normal input of `watch` and of a gate over a running job's folder.

   While a guard is held (enter() .. leave(), nested and from several threads alike), a
   SIGBUS for an address with no backing (si_code BUS_ADRERR: a page cut from under a
   mapping) is answered by mapping one private zero page at that address, and the access
   resumes. The read then sees zeros where the cut bytes were; the caller compares
   patched() before and after its read and, when pages were patched, reads the file
   again by copying it (see trainlens/readers/_shrink.py): the guard only keeps the
   process alive, it never makes a result out of the zeros.

   Why not read every file by copying: measured on this project's 2-core machine, reading
   the 562 MB events file of a 1M-step run into a fresh buffer costs 0.16-0.27 s of CPU,
   against 0.57 s for the compiled lane's whole scan of the mapping (and polars is given
   bytes at 0.2-0.7 s more CPU than a path, for a 422 MB JSONL). The guard costs two
   sigaction calls per read.

   Any other SIGBUS (an unaligned access, a hardware memory error), or one the zero page
   cannot be mapped for, goes to the handler that was there before: ours puts it back and
   returns, the access faults again and is handled as if no guard were held. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#ifndef _WIN32 /* (Windows refuses to truncate a mapped file; this module then guards nothing) */
#include <sys/mman.h>
#include <unistd.h>
#endif

#if !defined(_WIN32) && defined(SA_SIGINFO) && defined(BUS_ADRERR) && defined(MAP_ANONYMOUS) && defined(MAP_FIXED)
#define GUARD 1
#else
#define GUARD 0
#endif

#if GUARD
static struct sigaction previous;  /* the handler before the outermost enter() */
static int depth;                  /* guards held (changed with the GIL held) */
static uintptr_t page_mask;
static volatile long patched_pages; /* (only ever incremented, by the handler) */

static void on_sigbus(int sig, siginfo_t *info, void *context) {
    (void)sig;
    (void)context;
    int saved = errno;
    if (info->si_code == BUS_ADRERR && info->si_addr != NULL) {
        void *page = (void *)((uintptr_t)info->si_addr & page_mask);
        /* (mmap is a bare system call, safe in a handler; MAP_FIXED replaces the one
           page that has no backing, nothing beside it) */
        void *got = mmap(page, (size_t)(~page_mask + 1), PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
        if (got == page) {
            __atomic_add_fetch(&patched_pages, 1, __ATOMIC_RELAXED);
            errno = saved;
            return;
        }
    }
    sigaction(SIGBUS, &previous, NULL);
    errno = saved;
}
#endif

PyDoc_STRVAR(enter_doc, "enter() -> None: hold the guard (until the matching leave())");

static PyObject *enter(PyObject *self, PyObject *unused) {
#if GUARD
    if (depth++ == 0) {
        struct sigaction ours;
        memset(&ours, 0, sizeof ours);
        ours.sa_sigaction = on_sigbus;
        ours.sa_flags = SA_SIGINFO;
        sigemptyset(&ours.sa_mask);
        if (sigaction(SIGBUS, &ours, &previous) != 0) {
            depth--;
            return PyErr_SetFromErrno(PyExc_OSError);
        }
    }
#endif
    Py_RETURN_NONE;
}

PyDoc_STRVAR(leave_doc, "leave() -> None: give the guard back (the handler before is restored "
                        "when the last one is)");

static PyObject *leave(PyObject *self, PyObject *unused) {
#if GUARD
    if (depth > 0 && --depth == 0) sigaction(SIGBUS, &previous, NULL);
#endif
    Py_RETURN_NONE;
}

PyDoc_STRVAR(patched_doc, "patched() -> int: pages cut from under a mapping, made zero pages, "
                          "since the module was loaded");

static PyObject *patched(PyObject *self, PyObject *unused) {
#if GUARD
    return PyLong_FromLong(__atomic_load_n(&patched_pages, __ATOMIC_RELAXED));
#else
    return PyLong_FromLong(0);
#endif
}

static PyMethodDef methods[] = {
    {"enter", enter, METH_NOARGS, enter_doc},
    {"leave", leave, METH_NOARGS, leave_doc},
    {"patched", patched, METH_NOARGS, patched_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_mapguard",
    "Reading mapped files that may shrink meanwhile, without SIGBUS.", -1, methods,
};

PyMODINIT_FUNC PyInit__mapguard(void) {
#if GUARD
    page_mask = ~((uintptr_t)sysconf(_SC_PAGESIZE) - 1);
    PyObject *m = PyModule_Create(&module);
    if (m && PyModule_AddIntConstant(m, "AVAILABLE", 1) < 0) Py_CLEAR(m);
    return m;
#else
    PyObject *m = PyModule_Create(&module);
    if (m && PyModule_AddIntConstant(m, "AVAILABLE", 0) < 0) Py_CLEAR(m);
    return m;
#endif
}
