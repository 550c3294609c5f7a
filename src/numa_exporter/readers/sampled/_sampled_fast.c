/*
 * Compiled inner loops of the sampled placement reader (readers/sampled/reader.py).
 *
 * The pure-Python path (parsers/pid_maps.py, model/sampling.py, sources/move_pages.py) is the
 * reference; each function here gives exactly what it gives, so that an estimate is the same
 * for the same seed whichever path ran (tests/unit/test_sampled_fast.py holds them together):
 *
 *   maps_frame(text, page_size, mounts, max_entries, bases)
 *       -> (mappings, errors, [(starts, cumulative, largest_pages) or None per kind code 0..3],
 *           [kind codes in the order of their first range])
 *     Reads the lines of a maps text with the grammar of pid_maps._LINE_RE. The path of each
 *     accessible mapping is classified here, by prefix (no call into Python): kind code 0..3,
 *     or -1 when the mapping holds no pages numa_maps counts, by the rules of
 *     pid_maps._path, sampling.sampleable and pid_maps.mapping_kind; mounts: the hugetlbfs
 *     mount prefixes ("<mount>/" as bytes, at most MAX_MOUNTS).
 *   path_kind(raw_path, mounts) -> the kind code of one raw path column (the same rules).
 *     starts: page-aligned range starts, cumulative: pages before each range then the total,
 *     counted from bases[kind] (a text read in pieces continues the counts of the piece
 *     before), both packed native uint64 (array('Q') bytes).
 *   draw(fractions, starts, cumulative, page_size) -> addresses
 *     the page addresses that fractions (array('d') of the caller's rng.random() draws)
 *     pick, exactly as sorted(address(int(u * pages)) for u in fractions); packed uint64.
 *   pages(starts, cumulative, page_size) -> addresses   every page of a stratum, in order.
 *   query(nr, pid, addresses, lo, hi, max_node) -> (errno, queried, resident, other, nodes)
 *     One move_pages(2) system call in query mode (nodes NULL: nothing moves) for
 *     addresses[lo:hi] (at most 256), and its tally: resident = statuses 0..max_node,
 *     other = statuses other than a node, -ENOENT or -EFAULT, nodes = [(node, count)].
 *     errno is 0 on success (then the counts are set), else the call's errno.
 *
 * Module constants SHMEM_PREFIXES, PSEUDO_PATHS, DELETED, NEWLINE_ESCAPE, HUGETLB_ANON_PATH,
 * DEV_PREFIX, ANON_SHMEM_PREFIX: the texts the rules compare with (a test holds them equal to
 * the Python reference's).
 *
 * Bounded work: every loop is bounded by the input's size or a capped argument; no buffer
 * that Python owns is freed or kept.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MAX_DRAW (1 << 22)
#define MAX_PAGES_OUT (1 << 22)
#define MAX_QUERY 256
#define NKIND 4
#define CACHE 1024

/* ---- growable uint64 arrays ---- */

typedef struct {
    uint64_t *v;
    Py_ssize_t n, cap;
} vec_t;

static int vec_push(vec_t *a, uint64_t x) {
    if (a->n == a->cap) {
        Py_ssize_t cap = a->cap ? a->cap * 2 : 64;
        uint64_t *v = PyMem_Realloc(a->v, (size_t)cap * sizeof(uint64_t));
        if (v == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = x;
    return 0;
}

/* ---- maps grammar ---- */

static int hexval(char c) {
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* Read 1..maxd lowercase hex digits at *p (< e); set *out; advance. 0 ok, -1 malformed. */
static int read_hex(const char **p, const char *e, int maxd, uint64_t *out) {
    const char *s = *p;
    uint64_t v = 0;
    int d = 0;
    while (s < e && hexval(*s) >= 0) {
        if (++d > maxd)
            return -1;
        v = (v << 4) | (uint64_t)hexval(*s);
        s++;
    }
    if (d == 0)
        return -1;
    *p = s;
    *out = v;
    return 0;
}

static int is_space(char c) {  /* bytes.strip()'s whitespace */
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\x0b' || c == '\x0c';
}

/* Parse one line [s, e) (no newline). 1: a mapping (start, end, accessible, device as
 * major << 32 | minor, inode (modulo 2^64), path [ps, pe)), 0: malformed. */
static int parse_line(const char *s, const char *e, uint64_t *start, uint64_t *end,
                      int *accessible, uint64_t *dev, uint64_t *inode, const char **ps,
                      const char **pe) {
    const char *p = s;
    uint64_t tmp, major, minor;
    if (read_hex(&p, e, 16, start) < 0 || p >= e || *p++ != '-')
        return 0;
    if (read_hex(&p, e, 16, end) < 0 || p >= e || *p++ != ' ')
        return 0;
    if (e - p < 5)
        return 0;
    if ((p[0] != 'r' && p[0] != '-') || (p[1] != 'w' && p[1] != '-') ||
        (p[2] != 'x' && p[2] != '-') || (p[3] != 'p' && p[3] != 's') || p[4] != ' ')
        return 0;
    *accessible = !(p[0] == '-' && p[1] == '-' && p[2] == '-');
    p += 5;
    if (read_hex(&p, e, 16, &tmp) < 0 || p >= e || *p++ != ' ')
        return 0;
    if (read_hex(&p, e, 8, &major) < 0 || p >= e || *p++ != ':')
        return 0;
    if (read_hex(&p, e, 8, &minor) < 0 || p >= e || *p++ != ' ')
        return 0;
    *dev = major << 32 | minor;
    int d = 0;
    uint64_t ino = 0;
    while (p < e && *p >= '0' && *p <= '9') {
        if (++d > 20)
            return 0;
        ino = ino * 10 + (uint64_t)(*p - '0');
        p++;
    }
    *inode = ino;
    if (d == 0)
        return 0;
    if (p == e) {
        *ps = *pe = NULL;
    } else {
        if (*p != ' ')
            return 0;
        while (p < e && *p == ' ')
            p++;
        *ps = p;
        *pe = e;
    }
    if (*end <= *start)
        return 0;
    return 1;
}

typedef struct {
    const char *p;
    Py_ssize_t len;
    uint64_t hash;
    int code;
    int used;
} centry_t;

static uint64_t fnv(const char *p, Py_ssize_t n) {
    uint64_t h = 1469598103934665603ULL;
    for (Py_ssize_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)p[i]) * 1099511628211ULL;
    return h;
}

/* ---- path classification (the rules of parsers/pid_maps.py and model/sampling.py) ---- */

/* Kind codes: index into compiled.KINDS (anon, file, shmem, hugetlb). */
#define K_ANON 0
#define K_FILE 1
#define K_SHMEM 2
#define K_HUGETLB 3

/* numa_maps.SHMEM_PREFIXES, pid_maps.PSEUDO_PATHS and the other texts the rules compare with;
 * exported as module constants so that a test holds them equal to Python's. */
static const char *const SHMEM_PREFIXES[] = {"/dev/shm/", "/run/shm/", "/SYSV", "/memfd:",
                                             "/dev/zero", "/i915"};
static const char *const PSEUDO_PATHS[] = {"[vvar]", "[vvar_vclock]", "[vdso]", "[vsyscall]",
                                           "[uprobes]"};
#define NSHMEM (sizeof(SHMEM_PREFIXES) / sizeof(SHMEM_PREFIXES[0]))
#define NPSEUDO (sizeof(PSEUDO_PATHS) / sizeof(PSEUDO_PATHS[0]))
static const char DELETED[] = " (deleted)";
static const char NEWLINE_ESCAPE[] = "\\012";
static const char HUGETLB_ANON_PATH[] = "/anon_hugepage";
static const char DEV_PREFIX[] = "/dev/";
static const char ANON_SHMEM_PREFIX[] = "[anon_shmem:";
#define MAX_MOUNTS 64

/* The hugetlbfs mount prefixes ("<mount>/"), borrowed from a tuple of bytes. */
typedef struct {
    const char *p[MAX_MOUNTS];
    Py_ssize_t n[MAX_MOUNTS];
    Py_ssize_t count;
} mounts_t;

static int mounts_from(PyObject *tuple, mounts_t *m) {
    if (!PyTuple_Check(tuple) || PyTuple_GET_SIZE(tuple) > MAX_MOUNTS) {
        PyErr_SetString(PyExc_ValueError, "mounts must be a tuple of at most 64 bytes");
        return -1;
    }
    m->count = PyTuple_GET_SIZE(tuple);
    for (Py_ssize_t i = 0; i < m->count; i++) {
        PyObject *b = PyTuple_GET_ITEM(tuple, i);
        if (!PyBytes_Check(b)) {
            PyErr_SetString(PyExc_TypeError, "a mount prefix must be bytes");
            return -1;
        }
        m->p[i] = PyBytes_AS_STRING(b);
        m->n[i] = PyBytes_GET_SIZE(b);
    }
    return 0;
}

static int has_prefix(const char *p, Py_ssize_t n, const char *pre, Py_ssize_t pn) {
    return n >= pn && memcmp(p, pre, (size_t)pn) == 0;
}

static int has_cprefix(const char *p, Py_ssize_t n, const char *pre) {
    return has_prefix(p, n, pre, (Py_ssize_t)strlen(pre));
}

static int is_text(const char *p, Py_ssize_t n, const char *t) {
    return n == (Py_ssize_t)strlen(t) && memcmp(p, t, (size_t)n) == 0;
}

/* Return the kind code of a decoded path [p, p + n) that is not anonymous, or -1 when the
 * mapping holds no pages numa_maps counts (sampling.sampleable, then pid_maps.mapping_kind). */
static int kind_of_path(const char *p, Py_ssize_t n, const mounts_t *m) {
    int shmem = 0, mounted = 0;
    for (size_t i = 0; i < NPSEUDO; i++)
        if (is_text(p, n, PSEUDO_PATHS[i]))
            return -1;
    for (size_t i = 0; i < NSHMEM && !shmem; i++)
        shmem = has_cprefix(p, n, SHMEM_PREFIXES[i]);
    for (Py_ssize_t i = 0; i < m->count && !mounted; i++)
        mounted = has_prefix(p, n, m->p[i], m->n[i]);
    if (has_cprefix(p, n, DEV_PREFIX) && !shmem && !mounted)
        return -1;
    if (n > 0 && p[0] == '[')
        return has_cprefix(p, n, ANON_SHMEM_PREFIX) ? K_SHMEM : K_ANON;
    if (mounted || is_text(p, n, HUGETLB_ANON_PATH))
        return K_HUGETLB;
    return shmem ? K_SHMEM : K_FILE;
}

/* Return the kind code of an accessible mapping whose raw maps path column is [raw, raw+rn)
 * (rn 0: anonymous), -1 when it holds none, -2 on no memory. The path is read as
 * pid_maps._path reads it after the spaces that end the inode column: "\012" is a newline, trailing spaces and then one " (deleted)"
 * go. */
static int path_code(const char *raw, Py_ssize_t rn, const mounts_t *m) {
    char *buf = NULL;
    while (rn > 0 && raw[0] == ' ') { /* the spaces before the column (none from a line) */
        raw++;
        rn--;
    }
    if (rn <= 0)
        return K_ANON;
    const char *p = raw;
    Py_ssize_t n = rn;
    if (memchr(raw, '\\', (size_t)rn) != NULL) {
        buf = PyMem_Malloc((size_t)rn);
        if (buf == NULL)
            return -2;
        n = 0;
        for (Py_ssize_t i = 0; i < rn;) {
            if (rn - i >= 4 && memcmp(raw + i, NEWLINE_ESCAPE, 4) == 0) {
                buf[n++] = '\n';
                i += 4;
            } else {
                buf[n++] = raw[i++];
            }
        }
        p = buf;
    }
    while (n > 0 && p[n - 1] == ' ')
        n--;
    int code = K_ANON;
    if (n > 0) {
        Py_ssize_t dn = (Py_ssize_t)(sizeof(DELETED) - 1);
        if (n > dn && memcmp(p + n - dn, DELETED, (size_t)dn) == 0)
            n -= dn;
        code = kind_of_path(p, n, m);
    }
    PyMem_Free(buf);
    return code;
}

/* Return the kind code of a path (cached by its text); -2 on no memory. */
static int kind_of(centry_t *cache, const mounts_t *m, const char *p, Py_ssize_t n) {
    uint64_t h = fnv(p, n);
    centry_t *c = &cache[h % CACHE];
    if (c->used && c->hash == h && c->len == n && memcmp(c->p, p, (size_t)n) == 0)
        return c->code;
    int code = path_code(p, n, m);
    if (code == -2) {
        PyErr_NoMemory();
        return -2;
    }
    c->p = p;
    c->len = n;
    c->hash = h;
    c->code = code;
    c->used = 1;
    return code;
}

static PyObject *path_kind(PyObject *self, PyObject *args) {
    Py_buffer raw;
    PyObject *mounts;
    mounts_t m;
    if (!PyArg_ParseTuple(args, "y*O", &raw, &mounts))
        return NULL;
    int code = mounts_from(mounts, &m) < 0 ? -3 : path_code(raw.buf, raw.len, &m);
    PyBuffer_Release(&raw);
    if (code == -3)
        return NULL;
    if (code == -2)
        return PyErr_NoMemory();
    return PyLong_FromLong(code);
}

/* ---- frames: the strata of a VMA list, from a maps text or from PROCMAP_QUERY ---- */

/* The strata being built: per kind code, range starts and cumulative pages (from base), the
 * largest range, the order of first appearance; the known records of the mappings seen
 * (KNOWN_FIELDS uint64 each: start, end, device, inode, kind code as int64). */
#define KNOWN_FIELDS 5
typedef struct {
    vec_t starts[NKIND], cum[NKIND], known;
    uint64_t largest[NKIND], base[NKIND], page;
    int order[NKIND], norder, want_known;
} acc_t;

static void acc_free(acc_t *a) {
    for (int k = 0; k < NKIND; k++) {
        PyMem_Free(a->starts[k].v);
        PyMem_Free(a->cum[k].v);
    }
    PyMem_Free(a->known.v);
}

/* Add a known record (when kept) and, for a kind code >= 0, the mapping [lo, hi) to its
 * stratum; -1 on no memory. */
static int acc_add(acc_t *a, int code, uint64_t lo_addr, uint64_t hi, uint64_t dev,
                   uint64_t inode) {
    if (a->want_known &&
        (vec_push(&a->known, lo_addr) < 0 || vec_push(&a->known, hi) < 0 ||
         vec_push(&a->known, dev) < 0 || vec_push(&a->known, inode) < 0 ||
         vec_push(&a->known, (uint64_t)(int64_t)code) < 0))
        return -1;
    if (code < 0)
        return 0;
    uint64_t page = a->page, lo = lo_addr - lo_addr % page, span = hi - lo;
    uint64_t pages = span / page + (span % page != 0);
    if (a->cum[code].n == 0) {
        if (vec_push(&a->cum[code], a->base[code]) < 0)
            return -1;
        a->order[a->norder++] = code;
    }
    if (vec_push(&a->starts[code], lo) < 0 ||
        vec_push(&a->cum[code], a->cum[code].v[a->cum[code].n - 1] + pages) < 0)
        return -1;
    if (pages > a->largest[code])
        a->largest[code] = pages;
    return 0;
}

/* Return ([(starts, cumulative, largest) or None per kind], [codes in order of first range]),
 * a new tuple, or NULL on an error. */
static PyObject *acc_result(acc_t *a) {
    PyObject *kinds = PyList_New(NKIND);
    if (kinds == NULL)
        return NULL;
    for (int k = 0; k < NKIND; k++) {
        PyObject *item;
        if (a->starts[k].n == 0) {
            item = Py_NewRef(Py_None);
        } else {
            item = Py_BuildValue("(y#y#K)", (const char *)a->starts[k].v,
                                 a->starts[k].n * (Py_ssize_t)sizeof(uint64_t),
                                 (const char *)a->cum[k].v,
                                 a->cum[k].n * (Py_ssize_t)sizeof(uint64_t),
                                 (unsigned long long)a->largest[k]);
            if (item == NULL) {
                Py_DECREF(kinds);
                return NULL;
            }
        }
        PyList_SET_ITEM(kinds, k, item);
    }
    PyObject *first = PyList_New(a->norder);
    if (first == NULL) {
        Py_DECREF(kinds);
        return NULL;
    }
    for (int i = 0; i < a->norder; i++)
        PyList_SET_ITEM(first, i, PyLong_FromLong(a->order[i]));
    return Py_BuildValue("(NN)", kinds, first);
}

/* Return the known records as bytes (empty when not kept), a new reference or NULL. */
static PyObject *acc_known(acc_t *a) {
    return PyBytes_FromStringAndSize((const char *)a->known.v,
                                     a->known.n * (Py_ssize_t)sizeof(uint64_t));
}

static int page_ok(unsigned long long page) {
    if (page == 0 || (page & (page - 1)) != 0) {
        PyErr_SetString(PyExc_ValueError, "page size must be a power of two");
        return 0;
    }
    return 1;
}

static PyObject *maps_frame(PyObject *self, PyObject *args) {
    Py_buffer text;
    unsigned long long page;
    PyObject *mount_tuple;
    mounts_t mounts;
    Py_ssize_t max_entries;
    acc_t a = {0};
    if (!PyArg_ParseTuple(args, "y*KOn(KKKK)|p", &text, &page, &mount_tuple, &max_entries,
                          &a.base[0], &a.base[1], &a.base[2], &a.base[3], &a.want_known))
        return NULL;
    PyObject *result = NULL, *got = NULL;
    centry_t *cache = NULL;
    a.page = page;
    if (!page_ok(page) || mounts_from(mount_tuple, &mounts) < 0)
        goto done;
    cache = PyMem_Calloc(CACHE, sizeof(centry_t));
    if (cache == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    const char *t = text.buf, *end = t + text.len;
    Py_ssize_t mappings = 0, errors = 0;
    while (t < end) {
        const char *nl = memchr(t, '\n', (size_t)(end - t));
        const char *le = nl ? nl : end;
        const char *s = t;
        t = nl ? nl + 1 : end;
        int blank = 1;
        for (const char *q = s; q < le; q++)
            if (!is_space(*q)) {
                blank = 0;
                break;
            }
        if (blank)
            continue;
        uint64_t lo, hi, dev, inode;
        int acc;
        const char *ps, *pe;
        if (!parse_line(s, le, &lo, &hi, &acc, &dev, &inode, &ps, &pe)) {
            errors++;
            continue;
        }
        if (mappings >= max_entries)
            continue;
        mappings++;
        if (!acc)
            continue;
        int code = kind_of(cache, &mounts, ps ? ps : "", ps ? pe - ps : 0);
        if (code == -2 || acc_add(&a, code, lo, hi, dev, inode) < 0)
            goto done;
    }
    got = acc_result(&a);
    if (got == NULL)
        goto done;
    if (a.want_known)
        result = Py_BuildValue("(nnOON)", mappings, errors, PyTuple_GET_ITEM(got, 0),
                               PyTuple_GET_ITEM(got, 1), acc_known(&a));
    else
        result = Py_BuildValue("(nnOO)", mappings, errors, PyTuple_GET_ITEM(got, 0),
                               PyTuple_GET_ITEM(got, 1));
done:
    Py_XDECREF(got);
    acc_free(&a);
    PyMem_Free(cache);
    PyBuffer_Release(&text);
    return result;
}

/* PROCMAP_QUERY (include/uapi/linux/fs.h, Linux 6.11): the VMA at or after an address, read
 * through an open /proc/<pid>/maps descriptor without the text (and without the path of a
 * file mapping, which costs the kernel a d_path per line, unless asked for). */
struct procmap_query {
    uint64_t size, query_flags, query_addr, vma_start, vma_end, vma_flags, vma_page_size,
        vma_offset, inode;
    uint32_t dev_major, dev_minor, vma_name_size, build_id_size;
    uint64_t vma_name_addr, build_id_addr;
};
#define PROCMAP_QUERY _IOWR('f', 17, struct procmap_query)
#define PROCMAP_QUERY_VMA_RWX 0x07
#define PROCMAP_QUERY_COVERING_OR_NEXT_VMA 0x10
#define NAME_MAX_BYTES 4096 /* PATH_MAX: the kernel's bound on a name it returns */

/* Ask for the VMA at or after addr (with its name into buf when buf). 0: found, 1: none
 * left, -1: errno set. */
static int query_vma(int fd, uint64_t addr, struct procmap_query *q, char *buf) {
    memset(q, 0, sizeof(*q));
    q->size = sizeof(*q);
    q->query_flags = PROCMAP_QUERY_COVERING_OR_NEXT_VMA;
    q->query_addr = addr;
    if (buf != NULL) {
        q->vma_name_addr = (uint64_t)(uintptr_t)buf;
        q->vma_name_size = NAME_MAX_BYTES;
    }
    int r;
    do {
        r = ioctl(fd, PROCMAP_QUERY, q);
    } while (r < 0 && errno == EINTR);
    if (r == 0)
        return 0;
    return errno == ENOENT ? 1 : -1;
}

/* Return the kind code of the VMA q names (asked again with its name), -2 on no memory,
 * -3 with errno set when the ask failed, -4 when the VMA changed between the two asks. */
static int named_code(int fd, const struct procmap_query *q, char *buf, const mounts_t *m) {
    struct procmap_query n;
    int r = query_vma(fd, q->vma_start, &n, buf);
    if (r < 0)
        return -3;
    if (r == 1 || n.vma_start != q->vma_start || n.vma_end != q->vma_end ||
        n.inode != q->inode || n.dev_major != q->dev_major || n.dev_minor != q->dev_minor)
        return -4;
    Py_ssize_t len = n.vma_name_size > 0 ? (Py_ssize_t)n.vma_name_size - 1 : 0;
    if (len == 0)
        return K_ANON;
    Py_ssize_t dn = (Py_ssize_t)(sizeof(DELETED) - 1);
    while (len > 0 && buf[len - 1] == ' ')
        len--;
    if (len > dn && memcmp(buf + len - dn, DELETED, (size_t)dn) == 0)
        len -= dn;
    return len == 0 ? K_ANON : kind_of_path(buf, len, m);
}

static PyObject *query_frame(PyObject *self, PyObject *args) {
    int fd;
    unsigned long long addr, page;
    Py_ssize_t max_vmas, max_entries, pos;
    PyObject *mount_tuple;
    mounts_t mounts;
    Py_buffer known;
    acc_t a = {0};
    if (!PyArg_ParseTuple(args, "iKnKOn(KKKK)y*n", &fd, &addr, &max_vmas, &page, &mount_tuple,
                          &max_entries, &a.base[0], &a.base[1], &a.base[2], &a.base[3],
                          &known, &pos))
        return NULL;
    PyObject *result = NULL, *got = NULL;
    char *buf = NULL;
    a.page = page;
    a.want_known = 1;
    const uint64_t *kv = known.buf;
    Py_ssize_t kn = known.len / (Py_ssize_t)(KNOWN_FIELDS * sizeof(uint64_t));
    Py_ssize_t mappings = 0, names = 0, changed = 0;
    int done = 0;
    if (!page_ok(page) || mounts_from(mount_tuple, &mounts) < 0)
        goto out;
    if (pos < 0 || pos > kn) {
        PyErr_SetString(PyExc_ValueError, "known position out of range");
        goto out;
    }
    buf = PyMem_Malloc(NAME_MAX_BYTES);
    if (buf == NULL) {
        PyErr_NoMemory();
        goto out;
    }
    for (Py_ssize_t i = 0; i < max_vmas; i++) {
        struct procmap_query q;
        int r = query_vma(fd, addr, &q, NULL);
        if (r < 0) {
            PyErr_SetFromErrno(PyExc_OSError);
            goto out;
        }
        if (r == 1 || q.vma_end <= q.vma_start || mappings >= max_entries) {
            done = 1;
            break;
        }
        addr = q.vma_end;
        mappings++;
        if ((q.vma_flags & PROCMAP_QUERY_VMA_RWX) == 0)
            continue; /* PROT_NONE: no pages numa_maps counts */
        uint64_t dev = (uint64_t)q.dev_major << 32 | q.dev_minor;
        while (pos < kn && kv[pos * KNOWN_FIELDS] < q.vma_start)
            pos++;
        const uint64_t *k = pos < kn ? &kv[pos * KNOWN_FIELDS] : NULL;
        int code;
        if (k != NULL && k[0] == q.vma_start && k[1] == q.vma_end && k[2] == dev &&
            k[3] == q.inode && (int64_t)k[4] >= -1 && (int64_t)k[4] < NKIND) {
            code = (int)(int64_t)k[4];
        } else {
            code = named_code(fd, &q, buf, &mounts);
            names++;
            if (code == -3) {
                PyErr_SetFromErrno(PyExc_OSError);
                goto out;
            }
            if (code == -4) { /* it changed under us: ask again from its start */
                addr = q.vma_start;
                mappings--;
                if (++changed > 64) {
                    errno = EAGAIN;
                    PyErr_SetFromErrno(PyExc_OSError);
                    goto out;
                }
                continue;
            }
        }
        if (acc_add(&a, code, q.vma_start, q.vma_end, dev, q.inode) < 0)
            goto out;
        if (addr == 0) { /* the last VMA ends at the top of the address space */
            done = 1;
            break;
        }
    }
    got = acc_result(&a);
    if (got == NULL)
        goto out;
    result = Py_BuildValue("(nOOKiNnn)", mappings, PyTuple_GET_ITEM(got, 0),
                           PyTuple_GET_ITEM(got, 1), addr, done, acc_known(&a), pos, names);
out:
    Py_XDECREF(got);
    acc_free(&a);
    PyMem_Free(buf);
    PyBuffer_Release(&known);
    return result;
}

/* ---- strata ---- */

typedef struct {
    Py_buffer sb, cb;
    const uint64_t *starts, *cum;
    Py_ssize_t nr; /* ranges */
} strat_t;

static int strat_open(strat_t *s, PyObject *starts, PyObject *cum) {
    memset(s, 0, sizeof(*s));
    if (PyObject_GetBuffer(starts, &s->sb, PyBUF_SIMPLE) < 0)
        return -1;
    if (PyObject_GetBuffer(cum, &s->cb, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&s->sb);
        return -1;
    }
    if (s->sb.len % 8 || s->cb.len % 8 || s->cb.len != s->sb.len + 8 || s->sb.len == 0) {
        PyBuffer_Release(&s->sb);
        PyBuffer_Release(&s->cb);
        PyErr_SetString(PyExc_ValueError, "starts and cumulative do not fit together");
        return -1;
    }
    s->starts = s->sb.buf;
    s->cum = s->cb.buf;
    s->nr = s->sb.len / 8;
    return 0;
}

static void strat_close(strat_t *s) {
    PyBuffer_Release(&s->sb);
    PyBuffer_Release(&s->cb);
}

/* bisect_right(cum, idx) - 1 over cum[0..nr] (cum[0] = 0 <= idx < cum[nr]). */
static Py_ssize_t range_of(const strat_t *s, uint64_t idx) {
    Py_ssize_t lo = 0, hi = s->nr + 1;
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (idx < s->cum[mid])
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo - 1;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* draw(fractions, starts, cumulative, page_size): the addresses of the pages the
 * fractions (Python's random() draws, each in [0, 1)) pick over the stratum's pages,
 * sorted. The random numbers come from the caller's generator, so this module owns no
 * generator and copies none. */
static PyObject *draw(PyObject *self, PyObject *args) {
    PyObject *fractions, *starts, *cum;
    unsigned long long page;
    if (!PyArg_ParseTuple(args, "OOOK", &fractions, &starts, &cum, &page))
        return NULL;
    Py_buffer fb;
    if (PyObject_GetBuffer(fractions, &fb, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    PyObject *out = NULL;
    if (fb.itemsize != sizeof(double) || fb.format == NULL || strcmp(fb.format, "d") != 0) {
        PyErr_SetString(PyExc_ValueError, "fractions must be an array('d')");
        PyBuffer_Release(&fb);
        return NULL;
    }
    Py_ssize_t n = fb.len / (Py_ssize_t)sizeof(double);
    if (n > MAX_DRAW) {
        PyErr_SetString(PyExc_ValueError, "n out of range");
        PyBuffer_Release(&fb);
        return NULL;
    }
    strat_t s;
    if (strat_open(&s, starts, cum) < 0) {
        PyBuffer_Release(&fb);
        return NULL;
    }
    uint64_t total = s.cum[s.nr];
    if (total == 0 || total > (1ULL << 53)) {
        PyErr_SetString(PyExc_ValueError, "a stratum needs 1 to 2**53 pages");
        goto done;
    }
    out = PyBytes_FromStringAndSize(NULL, n * 8);
    if (out == NULL)
        goto done;
    uint64_t *a = (uint64_t *)PyBytes_AS_STRING(out);
    const double *f = (const double *)fb.buf;
    double pages = (double)total;
    for (Py_ssize_t i = 0; i < n; i++) {
        double u = f[i];
        if (!(u >= 0.0 && u < 1.0)) {
            PyErr_SetString(PyExc_ValueError, "a fraction is outside [0, 1)");
            Py_CLEAR(out);
            goto done;
        }
        volatile double x = u * pages; /* one rounding, as in Python */
        uint64_t idx = (uint64_t)x;
        Py_ssize_t k = range_of(&s, idx);
        a[i] = s.starts[k] + (idx - s.cum[k]) * page;
    }
    qsort(a, (size_t)n, sizeof(uint64_t), cmp_u64);
done:
    strat_close(&s);
    PyBuffer_Release(&fb);
    return out;
}

static PyObject *pages(PyObject *self, PyObject *args) {
    PyObject *starts, *cum;
    unsigned long long page;
    if (!PyArg_ParseTuple(args, "OOK", &starts, &cum, &page))
        return NULL;
    strat_t s;
    if (strat_open(&s, starts, cum) < 0)
        return NULL;
    PyObject *out = NULL;
    uint64_t total = s.cum[s.nr];
    if (total > MAX_PAGES_OUT) {
        PyErr_SetString(PyExc_ValueError, "too many pages to list");
        goto done;
    }
    out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total * 8);
    if (out == NULL)
        goto done;
    uint64_t *a = (uint64_t *)PyBytes_AS_STRING(out);
    Py_ssize_t j = 0;
    for (Py_ssize_t k = 0; k < s.nr; k++)
        for (uint64_t i = 0; i < s.cum[k + 1] - s.cum[k] && (uint64_t)j < total; i++)
            a[j++] = s.starts[k] + i * page;
done:
    strat_close(&s);
    return out;
}

/* ---- move_pages ---- */

static PyObject *query(PyObject *self, PyObject *args) {
    long nr;
    int pid, max_node;
    Py_buffer buf;
    Py_ssize_t lo, hi;
    if (!PyArg_ParseTuple(args, "liy*nni", &nr, &pid, &buf, &lo, &hi, &max_node))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t count = buf.len / 8;
    if (lo < 0 || hi < lo || hi > count || hi - lo > MAX_QUERY || max_node < 0) {
        PyErr_SetString(PyExc_ValueError, "bad query range");
        PyBuffer_Release(&buf);
        return NULL;
    }
    int n = (int)(hi - lo);
    void *pg[MAX_QUERY];
    int status[MAX_QUERY];
    const uint64_t *addr = (const uint64_t *)buf.buf + lo;
    for (int i = 0; i < n; i++) {
        pg[i] = (void *)(uintptr_t)addr[i];
        status[i] = -EINVAL;
    }
    long rc;
    int err = 0;
    Py_BEGIN_ALLOW_THREADS
    errno = 0;
    rc = syscall(nr, (long)pid, (unsigned long)n, pg, NULL, status, 0L);
    if (rc < 0)
        err = errno ? errno : EINVAL;
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&buf);
    if (rc < 0)
        return Py_BuildValue("(iiii[])", err, 0, 0, 0);
    int resident = 0, other = 0;
    int nodes[MAX_QUERY], counts[MAX_QUERY], nn = 0;
    for (int i = 0; i < n; i++) {
        int st = status[i];
        if (st >= 0 && st <= max_node) {
            resident++;
            int j = 0;
            while (j < nn && nodes[j] != st)
                j++;
            if (j == nn) {
                nodes[nn] = st;
                counts[nn++] = 0;
            }
            counts[j]++;
        } else if (st != -ENOENT && st != -EFAULT) {
            other++;
        }
    }
    PyObject *lst = PyList_New(nn);
    if (lst == NULL)
        return NULL;
    for (int j = 0; j < nn; j++) {
        PyObject *t = Py_BuildValue("(ii)", nodes[j], counts[j]);
        if (t == NULL) {
            Py_DECREF(lst);
            return NULL;
        }
        PyList_SET_ITEM(lst, j, t);
    }
    result = Py_BuildValue("(iiiiN)", 0, n, resident, other, lst);
    return result;
}

static PyMethodDef methods[] = {
    {"maps_frame", maps_frame, METH_VARARGS, "Parse a maps text into sampling strata."},
    {"query_frame", query_frame, METH_VARARGS, "Read VMAs with PROCMAP_QUERY into strata."},
    {"draw", draw, METH_VARARGS, "Draw n sorted page addresses of a stratum."},
    {"pages", pages, METH_VARARGS, "Every page address of a stratum."},
    {"query", query, METH_VARARGS, "One move_pages query of up to 256 pages, tallied."},
    {"path_kind", path_kind, METH_VARARGS, "The kind code of one raw maps path column."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_sampled_fast", NULL, -1, methods};

static PyObject *texts(const char *const *v, size_t n) {
    PyObject *t = PyTuple_New((Py_ssize_t)n);
    if (t == NULL)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        PyObject *b = PyBytes_FromString(v[i]);
        if (b == NULL) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, (Py_ssize_t)i, b);
    }
    return t;
}

/* Add obj (a new reference, or NULL after an error) to mod as name; -1 on an error. */
static int add(PyObject *mod, const char *name, PyObject *obj) {
    if (obj == NULL)
        return -1;
    int r = PyModule_AddObjectRef(mod, name, obj);
    Py_DECREF(obj);
    return r;
}

PyMODINIT_FUNC PyInit__sampled_fast(void) {
    PyObject *mod = PyModule_Create(&module);
    if (mod == NULL)
        return NULL;
    if (add(mod, "SHMEM_PREFIXES", texts(SHMEM_PREFIXES, NSHMEM)) < 0 ||
        add(mod, "PSEUDO_PATHS", texts(PSEUDO_PATHS, NPSEUDO)) < 0 ||
        add(mod, "DELETED", PyBytes_FromString(DELETED)) < 0 ||
        add(mod, "NEWLINE_ESCAPE", PyBytes_FromString(NEWLINE_ESCAPE)) < 0 ||
        add(mod, "HUGETLB_ANON_PATH", PyBytes_FromString(HUGETLB_ANON_PATH)) < 0 ||
        add(mod, "DEV_PREFIX", PyBytes_FromString(DEV_PREFIX)) < 0 ||
        add(mod, "ANON_SHMEM_PREFIX", PyBytes_FromString(ANON_SHMEM_PREFIX)) < 0 ||
        PyModule_AddIntConstant(mod, "MAX_MOUNTS", MAX_MOUNTS) < 0 ||
        PyModule_AddIntConstant(mod, "KNOWN_FIELDS", KNOWN_FIELDS) < 0) {
        Py_DECREF(mod);
        return NULL;
    }
    return mod;
}
