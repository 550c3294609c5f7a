/*
 * Compiled line scanner for /proc/<pid>/numa_maps totals.
 *
 * scan(text, end, lineno, check) reads the lines of text[:end] with the grammar of
 * numa_maps.parse_numa_maps_line (the reference parser; a property test holds the two
 * together) and returns
 *
 *   (lines, mappings, errors, [(lineno, start, stop)] of the first errors,
 *    [(raw policy, kind, page kB, node, pages)], [raw policies of valid lines])
 *
 * check(raw_policy) -> bool validates a policy text with the reference parser; it is called
 * once per distinct policy text in a call. Every input is bounded work: no allocation grows
 * with the input except the returned lists, no integer can overflow (values are capped before
 * they are multiplied, sums are flushed every 8 MiB of text).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define MAX_NUMNODES 1024
#define MAX_PAGES (1ULL << 40)
#define MAX_PAGE_KB (1ULL << 24)
#define MAX_POLICY 63
#define MAX_VALUE_DIGITS 20
#define MAX_LINE (1 << 20)
#define MAX_KEPT_ERRORS 5
#define NPOL 64
#define NSLOT 4096        /* a line adds at most MAX_NUMNODES slots after a flush check */
#define FLUSH_SLOTS 2048
#define FLUSH_BYTES (8 << 20)

enum { K_ANON = 0, K_FILE = 1, K_SHMEM = 2, K_HUGETLB = 3 };

typedef struct {
    PyObject *raw;
    int valid;
    int seen;
} pol_t;

typedef struct {
    uint64_t pages;
    uint32_t kb;
    int16_t pol;
    int16_t node;
    int8_t kind;
    int8_t used;
} slot_t;

typedef struct {
    pol_t pols[NPOL];
    int npol;
    int last;
    slot_t slots[NSLOT];
    int nused;
    PyObject *entries;
    PyObject *seen;
    PyObject *check;
    uint64_t line_pages[MAX_NUMNODES];
    uint16_t touched[MAX_NUMNODES];
    uint8_t present[MAX_NUMNODES];
    int ntouched;
} state_t;

static const char *SHMEM[] = {"/dev/shm/", "/run/shm/", "/SYSV", "/memfd:", "/dev/zero",
                              "/i915"};

/* Append the accumulated sums and seen policies to the result lists; reset. -1 on error. */
static int flush(state_t *st) {
    for (int i = 0; i < NSLOT; i++) {
        slot_t *s = &st->slots[i];
        if (!s->used)
            continue;
        PyObject *t = Py_BuildValue("(OiKiK)", st->pols[s->pol].raw, s->kind,
                                    (unsigned long long)s->kb, s->node,
                                    (unsigned long long)s->pages);
        if (t == NULL || PyList_Append(st->entries, t) < 0) {
            Py_XDECREF(t);
            return -1;
        }
        Py_DECREF(t);
        s->used = 0;
    }
    st->nused = 0;
    for (int i = 0; i < st->npol; i++) {
        if (st->pols[i].seen && PyList_Append(st->seen, st->pols[i].raw) < 0)
            return -1;
        Py_CLEAR(st->pols[i].raw);
    }
    st->npol = 0;
    st->last = -1;
    return 0;
}

/* Return the index of the policy text, looked up or checked; -1 invalid, -2 Python error. */
static int policy(state_t *st, const char *p, Py_ssize_t n) {
    if (n > MAX_POLICY)
        return -1;
    int idx = -1;
    if (st->last >= 0) {
        PyObject *r = st->pols[st->last].raw;
        if (PyBytes_GET_SIZE(r) == n && memcmp(PyBytes_AS_STRING(r), p, (size_t)n) == 0)
            idx = st->last;
    }
    for (int i = 0; idx < 0 && i < st->npol; i++) {
        PyObject *r = st->pols[i].raw;
        if (PyBytes_GET_SIZE(r) == n && memcmp(PyBytes_AS_STRING(r), p, (size_t)n) == 0)
            idx = i;
    }
    if (idx < 0) {
        if (st->npol == NPOL && flush(st) < 0)
            return -2;
        PyObject *raw = PyBytes_FromStringAndSize(p, n);
        if (raw == NULL)
            return -2;
        PyObject *ok = PyObject_CallOneArg(st->check, raw);
        if (ok == NULL) {
            Py_DECREF(raw);
            return -2;
        }
        int valid = PyObject_IsTrue(ok);
        Py_DECREF(ok);
        if (valid < 0) {
            Py_DECREF(raw);
            return -2;
        }
        idx = st->npol++;
        st->pols[idx].raw = raw;
        st->pols[idx].valid = valid;
        st->pols[idx].seen = 0;
    }
    st->last = idx;
    return st->pols[idx].valid ? idx : -1;
}

/* Parse 1-20 ASCII digits; the value saturates at cap + 1. Return 0 if not digits. */
static int digits(const char *p, Py_ssize_t n, uint64_t cap, uint64_t *out) {
    if (n < 1 || n > MAX_VALUE_DIGITS)
        return 0;
    uint64_t v = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned c = (unsigned char)p[i] - '0';
        if (c > 9)
            return 0;
        if (v <= cap)
            v = v * 10 + c;
    }
    *out = v > cap ? cap + 1 : v;
    return 1;
}

static int all_digits(const char *p, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++)
        if ((unsigned)((unsigned char)p[i] - (unsigned char)'0') > 9u)
            return 0;
    return n > 0;
}

static int counter_key(const char *p, Py_ssize_t n) {
    if (n < 1 || p[0] < 'a' || p[0] > 'z')
        return 0;
    for (Py_ssize_t i = 1; i < n; i++) {
        char c = p[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'))
            return 0;
    }
    return 1;
}

static void add(state_t *st, int pol, int kind, uint64_t kb, int node, uint64_t pages) {
    unsigned h = ((unsigned)pol * 2654435761u) ^ ((unsigned)kind * 40503u) ^
                 ((unsigned)kb * 97u) ^ ((unsigned)node * 2246822519u);
    for (unsigned i = 0;; i++) {
        slot_t *s = &st->slots[(h + i) & (NSLOT - 1)];
        if (!s->used) {
            s->used = 1;
            s->pol = (int16_t)pol;
            s->kind = (int8_t)kind;
            s->kb = (uint32_t)kb;
            s->node = (int16_t)node;
            s->pages = pages;
            st->nused++;
            return;
        }
        if (s->pol == pol && s->kind == kind && s->kb == kb && s->node == node) {
            s->pages += pages;
            return;
        }
    }
}

/* One line without its newline: 1 valid (totals added), 0 malformed, -1 Python error. */
static int line(state_t *st, const char *p, Py_ssize_t n) {
    for (int i = 0; i < st->ntouched; i++) {
        st->present[st->touched[i]] = 0;
        st->line_pages[st->touched[i]] = 0;
    }
    st->ntouched = 0;

    const char *end = p + n;
    const char *sp = memchr(p, ' ', (size_t)n);
    if (sp == NULL)
        return 0;
    Py_ssize_t alen = sp - p;
    if (alen < 1 || alen > 16)
        return 0;
    for (const char *q = p; q < sp; q++)
        if (!((*q >= '0' && *q <= '9') || (*q >= 'a' && *q <= 'f')))
            return 0;

    const char *rest = sp + 1;
    Py_ssize_t rn = end - rest;
    const char *pol_end = NULL;
    static const char *MW[] = {"weighted interleave", "prefer (many)"};
    for (int m = 0; m < 2 && pol_end == NULL; m++) {
        Py_ssize_t L = (Py_ssize_t)strlen(MW[m]);
        if (rn >= L && memcmp(rest, MW[m], (size_t)L) == 0 &&
            (rn == L || rest[L] == ':' || rest[L] == '=' || rest[L] == ' ')) {
            const char *e = memchr(rest + L, ' ', (size_t)(rn - L));
            pol_end = e ? e : end;
        }
    }
    if (pol_end == NULL) {
        const char *e = memchr(rest, ' ', (size_t)rn);
        pol_end = e ? e : end;
    }
    int pol = policy(st, rest, pol_end - rest);
    if (pol == -2)
        return -1;
    if (pol < 0)
        return 0;

    int huge = 0, has_path = 0, flagged = 0, has_anon = 0, kind;
    const char *path = NULL;
    Py_ssize_t plen = 0;
    uint64_t page_kb = 0;
    const char *q = pol_end < end ? pol_end + 1 : end;
    while (q < end) {
        const char *te = memchr(q, ' ', (size_t)(end - q));
        if (te == NULL)
            te = end;
        Py_ssize_t tl = te - q;
        const char *tok = q;
        q = te + 1;
        if (tl == 0)
            continue;
        if (tl >= 5 && memcmp(tok, "file=", 5) == 0) {
            has_path = 1;
            path = tok + 5;
            plen = tl - 5;
            continue;
        }
        if ((tl == 4 && memcmp(tok, "heap", 4) == 0) ||
            (tl == 5 && memcmp(tok, "stack", 5) == 0)) {
            flagged = 1;
            continue;
        }
        if (tl == 4 && memcmp(tok, "huge", 4) == 0) {
            huge = 1;
            continue;
        }
        const char *eq = memchr(tok, '=', (size_t)tl);
        if (eq == NULL)
            return 0;
        Py_ssize_t kl = eq - tok;
        const char *val = eq + 1;
        Py_ssize_t vl = te - val;
        uint64_t v;
        if (kl == 17 && memcmp(tok, "kernelpagesize_kB", 17) == 0) {
            if (!digits(val, vl, MAX_PAGE_KB, &v) || v == 0 || v > MAX_PAGE_KB)
                return 0;
            page_kb = v;
        } else if (kl >= 2 && tok[0] == 'N' && all_digits(tok + 1, kl - 1)) {
            if (!digits(val, vl, MAX_PAGES, &v))
                return 0;
            uint64_t node;
            if (kl - 1 > 4 || !digits(tok + 1, kl - 1, MAX_NUMNODES, &node) ||
                node >= MAX_NUMNODES || v > MAX_PAGES)
                return 0;
            if (!st->present[node]) {
                st->present[node] = 1;
                st->touched[st->ntouched++] = (uint16_t)node;
            }
            st->line_pages[node] += v;
        } else if (counter_key(tok, kl)) {
            if (!digits(val, vl, 0, &v))
                return 0;
            if (kl == 4 && memcmp(tok, "anon", 4) == 0)
                has_anon = 1;
        } else {
            return 0;
        }
    }
    if (st->ntouched && !page_kb)
        return 0;
    if (huge)
        kind = K_HUGETLB;
    else if (!has_path)
        kind = K_ANON;
    else {
        kind = K_FILE;
        for (size_t i = 0; i < sizeof SHMEM / sizeof SHMEM[0]; i++) {
            Py_ssize_t L = (Py_ssize_t)strlen(SHMEM[i]);
            if (plen >= L && memcmp(path, SHMEM[i], (size_t)L) == 0) {
                kind = K_SHMEM;
                break;
            }
        }
    }
    st->pols[pol].seen = 1;
    /* no file, heap, stack, huge flag or anon= count: kernel pages mapped into the process
       (7.x's vDSO data page in [vvar], uprobes' XOL page), not its memory: not counted */
    if (!huge && !has_path && !flagged && !has_anon)
        return 1;
    for (int i = 0; i < st->ntouched; i++) {
        int node = st->touched[i];
        add(st, pol, kind, page_kb, node, st->line_pages[node]);
    }
    return 1;
}

static int blank(const char *p, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) {
        char c = p[i];
        if (!(c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'))
            return 0;
    }
    return 1;
}

static PyObject *scan(PyObject *self, PyObject *args) {
    PyObject *text, *check;
    Py_ssize_t end, lineno;
    (void)self;
    if (!PyArg_ParseTuple(args, "SnnO:scan", &text, &end, &lineno, &check))
        return NULL;
    Py_ssize_t size = PyBytes_GET_SIZE(text);
    if (end < 0 || end > size) {
        PyErr_SetString(PyExc_ValueError, "end outside the text");
        return NULL;
    }
    state_t *st = PyMem_Calloc(1, sizeof *st);
    if (st == NULL)
        return PyErr_NoMemory();
    st->last = -1;
    st->check = check;
    st->entries = PyList_New(0);
    st->seen = PyList_New(0);
    PyObject *errs = PyList_New(0);
    PyObject *result = NULL;
    if (st->entries == NULL || st->seen == NULL || errs == NULL)
        goto done;

    const char *buf = PyBytes_AS_STRING(text);
    const char *p = buf, *stop = buf + end;
    Py_ssize_t n_lines = 0, n_map = 0, n_err = 0, since_flush = 0;
    while (p < stop) {
        const char *nl = memchr(p, '\n', (size_t)(stop - p));
        const char *le = nl ? nl : stop;
        Py_ssize_t n = le - p;
        n_lines++;
        int ok;
        if (n > MAX_LINE)
            ok = 0;
        else if (blank(p, n))
            ok = 2;
        else
            ok = line(st, p, n);
        if (ok < 0)
            goto done;
        if (ok == 1) {
            n_map++;
        } else if (ok == 0) {
            n_err++;
            if (PyList_GET_SIZE(errs) < MAX_KEPT_ERRORS) {
                PyObject *t = Py_BuildValue("(nnn)", lineno + n_lines, (Py_ssize_t)(p - buf),
                                            (Py_ssize_t)(le - buf));
                if (t == NULL || PyList_Append(errs, t) < 0) {
                    Py_XDECREF(t);
                    goto done;
                }
                Py_DECREF(t);
            }
        }
        since_flush += n + 1;
        if (st->nused >= FLUSH_SLOTS || since_flush >= FLUSH_BYTES) {
            if (flush(st) < 0)
                goto done;
            since_flush = 0;
        }
        p = le + 1;
    }
    if (flush(st) < 0)
        goto done;
    result = Py_BuildValue("(nnnOOO)", n_lines, n_map, n_err, errs, st->entries, st->seen);
done:
    for (int i = 0; i < st->npol; i++)
        Py_CLEAR(st->pols[i].raw);
    Py_XDECREF(st->entries);
    Py_XDECREF(st->seen);
    Py_XDECREF(errs);
    PyMem_Free(st);
    return result;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS, "Total the numa_maps lines of text[:end]."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_numa_maps_fast", "Compiled numa_maps line scanner.", -1, methods,
    NULL, NULL, NULL, NULL,
};

/* The module exports the limits and the shared-memory prefixes it was compiled with, so
 * that a test can hold them equal to numa_maps.py's (one grammar, two implementations). */
PyMODINIT_FUNC PyInit__numa_maps_fast(void) {
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    size_t n = sizeof SHMEM / sizeof SHMEM[0];
    PyObject *prefixes = PyTuple_New((Py_ssize_t)n);
    if (prefixes == NULL)
        goto fail;
    for (size_t i = 0; i < n; i++) {
        PyObject *s = PyUnicode_FromString(SHMEM[i]);
        if (s == NULL) {
            Py_DECREF(prefixes);
            goto fail;
        }
        PyTuple_SET_ITEM(prefixes, (Py_ssize_t)i, s);
    }
    if (PyModule_AddObject(m, "SHMEM_PREFIXES", prefixes) < 0) {
        Py_DECREF(prefixes);
        goto fail;
    }
    if (PyModule_AddIntConstant(m, "MAX_NUMNODES", MAX_NUMNODES) < 0 ||
        PyModule_AddIntConstant(m, "MAX_LINE", MAX_LINE) < 0)
        goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
