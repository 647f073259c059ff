"""What a book page checks and records, out of the reader's way.

A notebook page reads like a Triton tutorial: kernel, wrapper, check, one
sweep, one plot, what it means. What the build needs on top of that (each
claim's verdict published beside the recorded GPU, every speed target
enforced with its retries, the figures recorded for ``make gpu-check``, the
sentences glued into the prose) is one call at the end of the page, in a
cell the book hides (its output, the verdicts, still shows): one module
here per page, one ``finish`` per module. Nothing checked on the page
before is checked less here: a missed target still fails the build.
"""
