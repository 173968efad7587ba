"""A tiny C extension source for the tests of cupric.runtime._cext: `tiny(n)` builds a
module whose ``answer()`` returns n (a different n is a different source, so a different
module name)."""

from __future__ import annotations

from cupric.runtime import _cext

TINY = r"""
#include <Python.h>
static PyObject *answer(PyObject *self, PyObject *args) { return PyLong_FromLong(ANSWER); }
static PyMethodDef methods[] = {{"answer", answer, METH_NOARGS, ""}, {NULL, NULL, 0, NULL}};
""" + _cext.MODULE_INIT


def tiny(answer: int) -> str:
    return f"#define ANSWER {answer}\n" + TINY
