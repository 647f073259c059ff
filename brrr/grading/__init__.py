"""How grading works: the verdict is computed in a grader process that student code cannot reach.

    python -m brrr.grading SUBMISSIONS_DIR --out OUT_DIR [--lab 02-fuse-it]

| module     | job                                                                      |
|------------|--------------------------------------------------------------------------|
| gradebook  | grade a folder: one CSV row and one feedback file per submission         |
| assemble   | the instructor's lab with the student's answer cells; copies of brrr     |
| processes  | wait for a submission, watch its kernel, kill everything it left         |
| server     | the grader process: checks, inputs, timing and the signed record         |
| client     | the grader cells' side: hand a function across, show the verdict         |
| wire       | the messages between them: JSON and raw tensor bytes, never pickle       |
| kernels    | student Triton kernels: record launches there, check and replay here     |
| core       | compare with a spec, readable diffs, repeats (grader side)               |
| thresholds | every grading threshold, by lab, check and device class                  |
| isolation  | run code so that a crash or a hang is an outcome, not a dead process     |

The labs themselves, one module each, are in :mod:`brrr.labs`. The book's page
"Grading the labs" (``chapters/grading.md``) states the threat model.
"""
