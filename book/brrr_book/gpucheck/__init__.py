"""The GPU check in three parts, each one command that fits a short lease (at most 9 minutes).

A GPU node is lent for minutes, ten at most per command. The check is cut into parts run in the order that
buys the most truth first (:data:`brrr_book.gpucheck.plan.PARTS`):

1. set-up, the ceilings, every lab solution with its grader verdicts, notebooks 23 and 40;
2. the chapter notebooks;
3. the overhead notebooks and the GPU-only tests, serially (no two timed things at once).

``.ci/gpu-check --part N --out DIR`` (``make gpu-check PART=N OUT=DIR``) checks the node, sets up, then
runs ``python -m brrr_book.gpucheck run --part N --out DIR`` (:mod:`brrr_book.gpucheck.run`): each notebook in a
process of its own, its time printed as soon as it is done, its outputs and figures saved
(:mod:`brrr_book.gpucheck.outputs`), the record written to ``DIR/record/``. Each part and each stage has a limit
(overridable); a part that runs out of time says what did not run. ``python -m brrr_book.gpucheck merge DIR...``
(:mod:`brrr_book.gpucheck.merge`) folds the parts into ``brrr/data/reference/<gpu>.json``.

Nothing here imports torch: the runner starts the processes that do.
"""
