"""Triton's interpreter, mended where the Triton releases that GPU nodes and Colab run break it.

Two faults, both in ``triton.runtime.interpreter`` of triton 3.6 (Colab's and our GPU nodes'
release):

- **A device call leaves the language patched.** An interpreted kernel runs with
``triton.language``'s
  builtins swapped for the interpreter's, and put back when the kernel returns. A ``@triton.jit``
  function it calls (``tl.sigmoid``, ``tl.max``, ``tl.cdiv`` or the student's own helper) swaps them
  again (``InterpretedFunction.__call__``) and never puts them back. Where kernels are also compiled
  in the same process (the grader on a GPU interprets a kernel to check its bounds, then compiles
  it), the compiler then meets the interpreter's ``tl.tensor.__mul__`` and fails at the first
  operator with ``'triton._C.libtriton.ir.value' object has no attribute 'dtype'``. triton 3.9 has
  the same fault.
- **A loop bound from an argument.** ``for k in range(0, K, BLOCK_K)`` converts the interpreted
``K`` with
  ``int(array)`` of a one-element array, which NumPy 2.4 and later refuse ("only 0-dimensional
  arrays can be converted to Python scalars"); triton 3.9 squeezes the array first, 3.6 does not.

:func:`mend` fixes both in the loaded module; importing :mod:`brrr.device` arranges for it to run
whenever ``triton.runtime.interpreter`` is imported, before or after brrr. A Triton release whose
interpreter lacks the functions mended here is left as it is.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from types import ModuleType

NAME = "triton.runtime.interpreter"


def mend(module: ModuleType) -> bool:
    """Mend a loaded ``triton.runtime.interpreter``; return whether it was mended (now or
    before)."""
    if getattr(module, "_brrr_mended", False):
        return True
    patch_lang = getattr(module, "_patch_lang", None)
    patch_tensor = getattr(module, "_patch_lang_tensor", None)
    function = getattr(module, "InterpretedFunction", None)
    error = getattr(module, "InterpreterError", RuntimeError)
    if patch_lang is None or patch_tensor is None or function is None:
        return False

    def patch_lang_tensor(tensor, scope):
        patch_tensor(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.item()))

    def device_call(self, *args, **kwargs):
        """A jit function called from an interpreted kernel, with the language put back after it."""
        scope = patch_lang(self.fn)
        try:
            return self.rewrite()(*args, **kwargs)
        except Exception as e:
            raise error(repr(e)) from e
        finally:
            if scope is not None:
                scope.restore()

    module._patch_lang_tensor = patch_lang_tensor
    function.__call__ = device_call
    module._brrr_mended = True
    return True


class _MendOnImport(importlib.abc.MetaPathFinder):
    """Finds ``triton.runtime.interpreter`` as Python would, and mends it once it has loaded."""

    def find_spec(self, name, path, target=None):
        if name != NAME:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        load = spec.loader.exec_module

        def exec_module(module):
            load(module)
            mend(module)

        spec.loader.exec_module = exec_module
        return spec


def mend_when_imported() -> None:
    """Mend the interpreter now if it is loaded, else as soon as anything imports it."""
    if NAME in sys.modules:
        mend(sys.modules[NAME])
    elif not any(isinstance(finder, _MendOnImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _MendOnImport())
