"""The book's machinery, beside the toolkit and not shipped with it (`pip install brrr` holds none
of this).

| module      | job                                                                        |
|-------------|----------------------------------------------------------------------------|
| pages/      | one module per book page whose notebook needs more than it teaches         |
| claims      | the essay's claims, each bound to the number that tests it (the ledger)    |
| figures     | the essay's pictures, drawn from data (flames: one op as a flamegraph)     |
| two_gpus    | each kernel's ratio from one recorded GPU to another, predicted            |
| widgets     | the roofline explorer: live sliders, and small multiples                   |
| timeline    | a trace as a zoomable timeline in the static book, offline                 |
| source      | showing a kernel's source on a page                                        |
| capstone    | notebook 40: diagnose a small GPT, apply the fix it points to, again       |
| book_pages  | the Sphinx extension: MathJax from the build, figures, static explorers    |
| colab       | the set-up cell of every notebook and lab (``python -m brrr_book.colab``)  |
| diagrams    | the book's own pictures: tile order, latency hiding, the host running ahead |
| warm/       | the book build's kernels, forked from one warm process                     |
| gpucheck/   | the GPU check in parts, its runner and its merge (``-m brrr_book.gpucheck``) |

It imports brrr; brrr never imports it. ``make install`` installs both, editable; on Colab the
set-up cell installs both from the book's repository.
"""
