"""How grading works: the verdict is computed in a grader process that student code cannot reach.

    python -m brrr.grading SUBMISSIONS_DIR --out OUT_DIR [--lab 02-fuse-it] [--shard K/N]
    python -m brrr.grading merge OUT_1 ... OUT_N --out FINAL
    python -m brrr.grading gradescope --lab 02-fuse-it --out autograder.zip

| module      | job                                                                       |
|-------------|---------------------------------------------------------------------------|
| gradebook   | grade a folder: one CSV row and one feedback file per submission, in the  |
|             | steps below, each a module                                                |
| preflight   | before anything runs: dependencies, a kernel, the paths; refusals         |
| submissions | find the submissions, their safe folder names and their lab               |
| prepare     | assemble one submission's work folder, notebook, brrr copy and kernel     |
| execute     | run it: its grader, then pytest and nbval in the sandbox beside it        |
| graders     | the grader processes (forked from the run's zygote) and what is in flight |
| environment | private caches and per-user folders of every grading process              |
| collect     | read what a run left into its row: status, verdicts, errors, timeouts     |
| watch       | charge changed files to the submissions that ran meanwhile                |
| report      | write each row, feedback file and journal line as soon as it is graded    |
| interrupt   | Ctrl-C or SIGTERM: stop cleanly, keeping every graded row                 |
| assemble    | the instructor's lab with the student's answer cells; copies of brrr      |
| server      | the grader process: checks, inputs, timing and the signed record          |
| bootstrap   | the grader process's first code: brrr imported from memory, not disk      |
| client      | the grader cells' side: hand a function across, show the verdict          |
| wire        | the messages between them: JSON and raw tensor bytes, never pickle        |
| integrity   | notice a submission that changes the environment, the course or others    |
| shards      | grade a share of a folder (``--shard K/N``), with a manifest of the run   |
| merge       | join the shards' outputs into one gradebook, naming what is missing       |
| gradescope  | the Gradescope autograder bundle, and what it runs per submission         |
| bundle      | the bundle's source and pins, from a checkout or an installed brrr        |
| commands    | ``python -m brrr.grading``: route to the gradebook or a command above     |

The labs, which this package grades, are in :mod:`brrr.labs`; the check library
they are built on (compare, replay, time, thresholds, isolation, processes) is
:mod:`brrr.checks`. The book's page "Grading the labs" (``chapters/grading.md``)
gives the workflow; ``docs/THREATS.md``, the threat model.
"""
