/*
 * Compiled helpers of the kubelet checkpoint checksum (go_json.py holds the
 * reference implementations; a property test holds the two together).
 *
 * fnv32a(data, h=0x811c9dc5) -> int: the 32-bit FNV-1a hash of data (Go's hash/fnv
 *   New32a), continued from h, so a text can be hashed in parts.
 * decimal_bytes(data) -> bytes: the bytes of data as decimal numbers joined by single
 *   spaces (go-spew's %#v of a []byte, without the brackets).
 *
 * Both are linear in the input, allocate only their result and release the GIL while they
 * run over a buffer they hold a reference to.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define FNV_OFFSET 0x811c9dc5u
#define FNV_PRIME 0x01000193u

static PyObject *
fnv32a(PyObject *self, PyObject *args)
{
    Py_buffer buf;
    unsigned long start = FNV_OFFSET;
    if (!PyArg_ParseTuple(args, "y*|k:fnv32a", &buf, &start))
        return NULL;
    uint32_t h = (uint32_t)start;
    const unsigned char *p = (const unsigned char *)buf.buf;
    Py_ssize_t n = buf.len;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= FNV_PRIME;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&buf);
    return PyLong_FromUnsignedLong(h);
}

static PyObject *
decimal_bytes(PyObject *self, PyObject *args)
{
    Py_buffer buf;
    if (!PyArg_ParseTuple(args, "y*:decimal_bytes", &buf))
        return NULL;
    Py_ssize_t n = buf.len;
    if (n == 0) {
        PyBuffer_Release(&buf);
        return PyBytes_FromStringAndSize("", 0);
    }
    if (n > (PY_SSIZE_T_MAX - 1) / 4) {
        PyBuffer_Release(&buf);
        return PyErr_NoMemory();
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, 4 * n);  /* at most "255 " a byte */
    if (out == NULL) {
        PyBuffer_Release(&buf);
        return NULL;
    }
    char *o = PyBytes_AS_STRING(out);
    const unsigned char *p = (const unsigned char *)buf.buf;
    Py_ssize_t k = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned int b = p[i];
        if (i)
            o[k++] = ' ';
        if (b >= 100)
            o[k++] = (char)('0' + b / 100);
        if (b >= 10)
            o[k++] = (char)('0' + (b / 10) % 10);
        o[k++] = (char)('0' + b % 10);
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&buf);
    if (_PyBytes_Resize(&out, k) < 0)
        return NULL;
    return out;
}

static PyMethodDef methods[] = {
    {"fnv32a", fnv32a, METH_VARARGS,
     "fnv32a(data, h=0x811c9dc5) -> int: FNV-1a (32-bit) of data, continued from h."},
    {"decimal_bytes", decimal_bytes, METH_VARARGS,
     "decimal_bytes(data) -> bytes: data's bytes as decimal numbers joined by spaces."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_kubelet_fast", NULL, -1, methods,
};

PyMODINIT_FUNC
PyInit__kubelet_fast(void)
{
    return PyModule_Create(&module);
}
