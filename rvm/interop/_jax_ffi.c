/* An XLA FFI handler that calls an rvm host function: the JAX side of
 * rvm.interop.jax_function without jax.pure_callback's Python machinery (docs/interop.md).
 *
 * rvm/interop/jax_ffi.py compiles this file with the system C compiler against jaxlib's FFI
 * headers (jax.ffi.include_dir(); the plain C API, xla/ffi/api/c_api.h) and registers
 * rvm_jax_call as the CPU target "rvm_host_call".  Every call names, by the integer attribute
 * `key`, a Python callable in a registry (a dict key -> weak reference, given to rvm_jax_init)
 * and the handler, holding the GIL:
 *   - passes each operand as a Python float (a rank-0 buffer) or as bytes holding its values
 *     as float64 (any other rank; float32 operands are widened);
 *   - calls the callable with them;
 *   - expects a tuple with one item per result: a float (a result of one element) or a
 *     C-contiguous float64 buffer of the result's size, copied (narrowed to float32 if the
 *     result is float32) into XLA's result buffer.
 * A Python exception becomes an FFI error whose message is "TypeName: message".
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#include "xla/ffi/api/c_api.h"

static PyObject *registry = NULL;          /* dict: int key -> weakref.ref(callable) */

/* Called once, with the GIL (ctypes.PyDLL), before any handler call. */
int rvm_jax_init(PyObject *reg)
{
    if (!PyDict_Check(reg))
        return -1;
    Py_XINCREF(reg);
    Py_XDECREF(registry);
    registry = reg;
    return 0;
}

static XLA_FFI_Error *ffi_error(const XLA_FFI_Api *api, XLA_FFI_Error_Code code,
                                const char *message)
{
    XLA_FFI_Error_Create_Args args;
    memset(&args, 0, sizeof args);
    args.struct_size = XLA_FFI_Error_Create_Args_STRUCT_SIZE;
    args.message = message;
    args.errc = code;
    return api->XLA_FFI_Error_Create(&args);
}

/* The pending Python exception as an FFI error (clears it). */
static XLA_FFI_Error *python_error(const XLA_FFI_Api *api)
{
    PyObject *type, *value, *tb;
    char buf[4096];
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    const char *name = type ? ((PyTypeObject *)type)->tp_name : "Error";
    PyObject *text = value ? PyObject_Str(value) : NULL;
    const char *msg = text ? PyUnicode_AsUTF8(text) : NULL;
    if (msg == NULL) {
        PyErr_Clear();
        msg = "(no message)";
    }
    snprintf(buf, sizeof buf, "%s: %s", name, msg);
    Py_XDECREF(text);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    return ffi_error(api, XLA_FFI_Error_Code_INTERNAL, buf);
}

static int64_t elements(const XLA_FFI_Buffer *b)
{
    int64_t n = 1;
    for (int64_t k = 0; k < b->rank; k++)
        n *= b->dims[k];
    return n;
}

static int is_float(XLA_FFI_DataType t)
{
    return t == XLA_FFI_DataType_F64 || t == XLA_FFI_DataType_F32;
}

static double load(const XLA_FFI_Buffer *b, int64_t k)
{
    return b->dtype == XLA_FFI_DataType_F64 ? ((const double *)b->data)[k]
                                            : (double)((const float *)b->data)[k];
}

static void store(XLA_FFI_Buffer *b, int64_t k, double v)
{
    if (b->dtype == XLA_FFI_DataType_F64)
        ((double *)b->data)[k] = v;
    else
        ((float *)b->data)[k] = (float)v;
}

/* Write one result item into its buffer; 0, or -1 with a Python exception set. */
static int put_result(PyObject *item, XLA_FFI_Buffer *b, Py_ssize_t index)
{
    int64_t n = elements(b);
    if (PyFloat_Check(item)) {
        if (n != 1) {
            PyErr_Format(PyExc_ValueError, "result %zd: a scalar for %lld elements", index,
                         (long long)n);
            return -1;
        }
        store(b, 0, PyFloat_AS_DOUBLE(item));
        return 0;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(item, &view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0)
        return -1;
    int ok = view.itemsize == 8 && view.format != NULL && strcmp(view.format, "d") == 0 &&
             view.len == n * 8;
    if (!ok) {
        PyErr_Format(PyExc_ValueError, "result %zd: expected %lld float64 values, got %zd "
                     "bytes of format %s", index, (long long)n, view.len,
                     view.format ? view.format : "B");
    } else if (b->dtype == XLA_FFI_DataType_F64) {
        memcpy(b->data, view.buf, (size_t)n * 8);
    } else {
        for (int64_t k = 0; k < n; k++)
            store(b, k, ((const double *)view.buf)[k]);
    }
    PyBuffer_Release(&view);
    return ok ? 0 : -1;
}

XLA_FFI_Error *rvm_jax_call(XLA_FFI_CallFrame *frame)
{
    const XLA_FFI_Api *api = frame->api;
    /* XLA asks a handler for its metadata first: the API version it was built for */
    if (frame->extension_start != NULL &&
        frame->extension_start->type == XLA_FFI_Extension_Metadata) {
        XLA_FFI_Metadata *meta = ((XLA_FFI_Metadata_Extension *)frame->extension_start)->metadata;
        meta->api_version.struct_size = XLA_FFI_Api_Version_STRUCT_SIZE;
        meta->api_version.extension_start = NULL;
        meta->api_version.major_version = XLA_FFI_API_MAJOR;
        meta->api_version.minor_version = XLA_FFI_API_MINOR;
        meta->traits = 0;
        return NULL;
    }
    if (frame->stage != XLA_FFI_ExecutionStage_EXECUTE)
        return NULL;
    int64_t key = -1;
    for (int64_t k = 0; k < frame->attrs.size; k++) {
        XLA_FFI_ByteSpan *name = frame->attrs.names[k];
        if (frame->attrs.types[k] == XLA_FFI_AttrType_SCALAR && name->len == 3 &&
            memcmp(name->ptr, "key", 3) == 0) {
            XLA_FFI_Scalar *s = (XLA_FFI_Scalar *)frame->attrs.attrs[k];
            if (s->dtype == XLA_FFI_DataType_S64)
                key = *(int64_t *)s->value;
        }
    }
    if (key < 0)
        return ffi_error(api, XLA_FFI_Error_Code_INVALID_ARGUMENT,
                         "rvm_host_call: no int64 attribute `key`");
    for (int64_t k = 0; k < frame->args.size; k++)
        if (frame->args.types[k] != XLA_FFI_ArgType_BUFFER ||
            !is_float(((XLA_FFI_Buffer *)frame->args.args[k])->dtype))
            return ffi_error(api, XLA_FFI_Error_Code_INVALID_ARGUMENT,
                             "rvm_host_call: operands must be float32 or float64 arrays");
    for (int64_t k = 0; k < frame->rets.size; k++)
        if (frame->rets.types[k] != XLA_FFI_RetType_BUFFER ||
            !is_float(((XLA_FFI_Buffer *)frame->rets.rets[k])->dtype))
            return ffi_error(api, XLA_FFI_Error_Code_INVALID_ARGUMENT,
                             "rvm_host_call: results must be float32 or float64 arrays");

    XLA_FFI_Error *err = NULL;
    PyGILState_STATE gil = PyGILState_Ensure();
    PyObject *fn = NULL, *args = NULL, *out = NULL;
    PyObject *pykey = PyLong_FromLongLong(key);
    PyObject *ref = pykey && registry ? PyDict_GetItemWithError(registry, pykey) : NULL;
    Py_XDECREF(pykey);
    if (ref != NULL && PyWeakref_Check(ref)) {
        fn = PyWeakref_GetObject(ref);        /* borrowed; Py_None once it has gone */
        if (fn == Py_None)
            fn = NULL;
    }
    if (fn == NULL) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_LookupError, "rvm function %lld no longer exists (the "
                         "jax_function was garbage collected)", (long long)key);
        goto fail;
    }
    Py_INCREF(fn);
    args = PyTuple_New(frame->args.size);
    if (args == NULL)
        goto fail;
    for (int64_t k = 0; k < frame->args.size; k++) {
        XLA_FFI_Buffer *b = (XLA_FFI_Buffer *)frame->args.args[k];
        PyObject *v;
        if (b->rank == 0) {
            v = PyFloat_FromDouble(load(b, 0));
        } else {
            int64_t n = elements(b);
            v = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(n * 8));
            if (v != NULL) {
                double *d = (double *)PyBytes_AS_STRING(v);
                if (b->dtype == XLA_FFI_DataType_F64)
                    memcpy(d, b->data, (size_t)n * 8);
                else
                    for (int64_t i = 0; i < n; i++)
                        d[i] = load(b, i);
            }
        }
        if (v == NULL)
            goto fail;
        PyTuple_SET_ITEM(args, k, v);
    }
    out = PyObject_Call(fn, args, NULL);
    if (out == NULL)
        goto fail;
    if (!PyTuple_Check(out) || PyTuple_GET_SIZE(out) != frame->rets.size) {
        PyErr_Format(PyExc_ValueError, "rvm_host_call: the host function returned %s, not a "
                     "tuple of %lld results", Py_TYPE(out)->tp_name,
                     (long long)frame->rets.size);
        goto fail;
    }
    for (int64_t k = 0; k < frame->rets.size; k++)
        if (put_result(PyTuple_GET_ITEM(out, k), (XLA_FFI_Buffer *)frame->rets.rets[k],
                       (Py_ssize_t)k) != 0)
            goto fail;
    goto done;
fail:
    err = python_error(api);
done:
    Py_XDECREF(out);
    Py_XDECREF(args);
    Py_XDECREF(fn);
    PyGILState_Release(gil);
    return err;
}
