"""The book's machinery, beside the toolkit and not shipped with it (`pip install brrr` holds none
of this).

| module      | job                                                                        |
|-------------|----------------------------------------------------------------------------|
| pages/      | one module per book page whose notebook needs more than it teaches         |
| book_pages  | the Sphinx extension: MathJax from the build, figures, static explorers    |
| colab       | the set-up cell of every notebook and lab (``python -m brrr_book.colab``)  |
| diagrams    | the book's own pictures: tile order, latency hiding, the host running ahead |
| warm/       | the book build's kernels, forked from one warm process                     |
| gpucheck/   | the GPU check in parts, its runner and its merge (``-m brrr_book.gpucheck``) |

It imports brrr; brrr never imports it. ``make install`` installs both, editable; on Colab the
set-up cell installs both from the book's repository.
"""
