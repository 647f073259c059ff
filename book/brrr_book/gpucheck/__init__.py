"""The GPU check in two parts, each one command of at most 5 minutes that hands back one archive.

A lease gives 15 minutes of GPU time, the node's start included, and one command at most 10. The
check is two parts, each running what never passed on a GPU first
(:func:`brrr_book.gpucheck.plan.parts`):

1. the ceilings, then the labs' grader verdicts and GPU timing (Labs 2-6);
2. the overhead notebooks (30-33) and the GPU-only tests;

then what failed on the H200 and was fixed since, then what passed there, the least valuable dropped
first where time is short (:mod:`brrr_book.gpucheck.plan`).

``.ci/gpu-check --part N`` (``make gpu-check PART=N``) checks the node, installs the wheels it lacks
(:mod:`brrr_book.gpucheck.wheels`), then runs ``python -m brrr_book.gpucheck run --part N --out
DIR`` (:mod:`brrr_book.gpucheck.run`): each notebook in a process of its own, its time printed as
soon as it is done, its outputs and figures saved (:mod:`brrr_book.gpucheck.outputs`), the record
written to ``DIR/record/``; then it archives ``DIR``, whatever happened. ``python -m
brrr_book.gpucheck merge`` (:mod:`brrr_book.gpucheck.merge`) folds the parts into
``brrr/data/reference/<gpu>.json``.

Nothing here imports torch: the runner starts the processes that do.
"""
