"""The check library the labs grade with: compare, replay, time, and survive what student code does.

| module     | job                                                                      |
|------------|--------------------------------------------------------------------------|
| core       | compare with a spec, readable diffs, repeats (grader side)               |
| kernels    | student Triton kernels: record launches there, check and replay here     |
| timed      | the kernel labs' GPU performance checks, timed as the grader launches    |
| fairness   | the grader's own timed windows, watched: a busy student, a starved grader |
| thresholds | every grading threshold, by lab, check and device class                  |
| isolation  | run code so that a crash or a hang is an outcome, not a dead process     |
| processes  | wait for a submission, watch its kernel, kill everything it left         |
| reaper     | the program a submission runs under: its limits; kills orphans left      |
| dtypes     | the dtypes a check's tensors may have, by name                           |

The labs (:mod:`brrr.labs`) are built on these modules, and the gradebook
(:mod:`brrr.grading`) on the labs: nothing here imports either of them
(``tests/test_layers.py``; docs/DESIGN.md, "Layers").
"""
