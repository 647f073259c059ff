"""``brrr.diagnose``: tell any PyTorch step which regime it is in, and what to do about it.

::

    from brrr.diagnose import diagnose
    d = diagnose(step, *args)      # step(*args) runs one training or inference step
    print(d.report())

or, for a callable that returns ``(step, args)``::

    python -m brrr.diagnose module:callable [--try [FIXES]] [--json PATH] [--figure PATH] [--threads
    N]

Modules, one job each: ``profile`` (run, time, count and profile the step, and join
the profiler's time to the ops whose work was counted), ``split`` (where the wall
time goes), ``ops`` (per-op and per-class rows against the measured roofs),
``advice`` (fixes with their bounds), ``trials`` (``--try``: fixes measured on the
step), ``trust`` (whether the readings agree: a busy machine said plainly),
``report`` (text, JSON, figure), ``core`` (:func:`diagnose` itself),
``errors`` (messages for bad input), ``examples`` (three steps, one per regime).
"""

from brrr.diagnose.advice import Advice
from brrr.diagnose.core import Diagnosis, diagnose
from brrr.diagnose.errors import DiagnoseError

__all__ = ["Advice", "Diagnosis", "DiagnoseError", "diagnose"]
