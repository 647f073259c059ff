"""Bad input to ``diagnose``: one clear paragraph instead of a traceback from inside the profiler.

Each function here turns one kind of failure into a :class:`DiagnoseError` whose
message says what happened, where it came from and what to do. The command
(``python -m brrr.diagnose``) prints the message and exits with status 2.
"""

from __future__ import annotations

import os
import traceback


class DiagnoseError(Exception):
    """The step, or the way it was named, cannot be diagnosed; the message says why."""


_INTERNAL_PARTS = (os.sep + "torch" + os.sep, os.sep + "brrr" + os.sep + "diagnose" + os.sep)


def _where_in_the_step(error: BaseException) -> str:
    """``file:line in function`` of the deepest frame of the traceback that is the user's code."""
    frames = [
        frame
        for frame in traceback.extract_tb(error.__traceback__)
        if not any(part in frame.filename for part in _INTERNAL_PARTS)
    ]
    if not frames:
        return "inside torch"
    frame = frames[-1]
    return f"{frame.filename}:{frame.lineno} in {frame.name}"


def is_out_of_memory(error: BaseException) -> bool:
    """True for a device or host allocation failure (CUDA's OutOfMemoryError, the CPU allocator's
    message)."""
    out_of_memory = getattr(__import__("torch"), "OutOfMemoryError", ())
    text = str(error).lower()
    return (
        isinstance(error, out_of_memory)
        or isinstance(error, MemoryError)
        or (
            isinstance(error, RuntimeError)
            and ("out of memory" in text or "can't allocate memory" in text)
        )
    )


def step_failed(error: BaseException, *, phase: str) -> DiagnoseError:
    """The error to raise when the step raised ``error`` while ``phase`` (warm-up, timing...) ran
    it."""
    first_line = (str(error).strip().splitlines() or [""])[0]
    if is_out_of_memory(error):
        return DiagnoseError(
            f"The step ran out of memory during {phase} ({type(error).__name__}: "
            f"{first_line[:300]}). "
            "The model, its activations or its batch do not fit on this device: diagnose a smaller "
            "batch or model, then scale up. Nothing was measured."
        )
    return DiagnoseError(
        f"The step raised {type(error).__name__} during {phase}, from {_where_in_the_step(error)}: "
        f"{first_line[:300]}. The error is the step's own, not the profiler's: run step(*args) "
        "once by "
        "itself to debug it, then diagnose it again."
    )


def no_device_work() -> DiagnoseError:
    """A GPU step that returned nothing and ran no kernel."""
    return DiagnoseError(
        "The step returned nothing and the profiler saw no GPU kernel in it, so there is nothing "
        "to diagnose. On a GPU this matters twice: work whose result nobody keeps can be removed "
        "by torch.compile as dead code, and a step whose tensors live on the CPU never reaches the "
        "GPU. Return the step's output (or the loss), and move the model and inputs to the GPU "
        "(.to('cuda'))."
    )


def bad_target(target: str, reason: str) -> DiagnoseError:
    """A ``module:callable`` for the command that cannot be loaded or does not return ``(step,
    args)``."""
    return DiagnoseError(
        f"Cannot diagnose {target!r}: {reason}. The command takes module:callable, where the "
        "module can "
        "be imported (it is on PYTHONPATH or installed) and the callable, called with no "
        "arguments, returns (step, args): step(*args) runs one training or inference step. "
        "Example: python -m brrr.diagnose brrr.diagnose.examples:tiny_mlp"
    )


def no_torch_op(step_s: float) -> DiagnoseError:
    """A step in which the dispatch-level count saw no torch op."""
    from brrr import units

    return DiagnoseError(
        f"The step ran no torch op (it took {units.seconds(step_s)}), so there is nothing to "
        "diagnose: brrr "
        "diagnose measures the torch ops a step runs. Pass the function that runs the model "
        "(forward, loss, backward, optimizer step) and the tensors it takes; for Python or NumPy "
        "code, use a Python profiler (python -m cProfile) instead."
    )


def too_short(step_s: float, floor_s: float) -> DiagnoseError:
    """A step shorter than what the profiler adds to each step by itself."""
    from brrr import units

    return DiagnoseError(
        f"The step takes {units.seconds(step_s)} with the profiler off, less than the "
        f"{units.seconds(floor_s)} the profiler adds to each step by itself, so its profile would "
        "describe "
        "the profiler, not the step. Diagnose a longer step: several steps in one call (a loop "
        "inside step), a bigger batch, or the whole training step rather than one op."
    )


def factory_failed(target: str, error: BaseException) -> DiagnoseError:
    """The ``module:callable`` raised while building ``(step, args)``: before any step ran."""
    first_line = (str(error).strip().splitlines() or [""])[0]
    return DiagnoseError(
        f"{target}() raised {type(error).__name__} while building the step, from "
        f"{_where_in_the_step(error)}: {first_line[:300]}. No step ran: the error is in the code "
        f"that builds (step, args). Call {target.partition(':')[2]}() once by itself to debug it, "
        "then diagnose it again."
    )
