"""A Sphinx extension for the built book: every page is self-contained (it loads
no script, stylesheet or font from the network) and loads without a JavaScript
error.

Listed in ``_config.yml`` (``sphinx: extra_extensions``). What it does:

- **MathJax from the build.** Sphinx's default ``mathjax_path`` is a CDN. We
  serve MathJax 2.7 from ``_static/mathjax/``, copied at the end of the build
  from the PyPI package ``jupyter-server-mathjax`` (the Jupyter project's own
  MathJax distribution), which the book's requirements install with pip.
- **MathJax 2 configured as MyST expects.** MyST marks prose sections
  ``tex2jax_ignore mathjax_ignore`` and its math ``math``; the MathJax 2 settings
  below process exactly those elements. MyST writes its wish into
  ``mathjax3_config``, which MathJax 2 would misread, so that is cleared.
- **No widget JavaScript from CDNs.** myst-nb would load require.js and the
  Jupyter widget manager from CDNs on any page whose notebook saved widget
  state. We load none, and tell myst-nb never to pick a widget view: an
  explorer (``brrr_book.widgets``) carries a static snapshot as HTML in the same
  output, and that is what the page shows.
- **Outputs wrap.** ``book/brrr_book/book_static/brrr.css`` wraps printed lines wider
  than the column (stamps, table rows), so no output hides behind a scrollbar;
  code cells fit by themselves (``tests/book/test_code_width.py``).
- **No console errors of the theme stack's making.** sphinx-thebe's settings
  (``const THEBE_JS_URL = ...``) reach each page twice, and the second copy is
  a JavaScript error: repeated inline scripts are dropped. The theme logs an
  error when no colour mode is set: the default mode is "auto".

- **Strict.** Every build sets ``BRRR_STRICT=1`` (``brrr.targets.STRICT``)
  before any notebook runs, and the kernels inherit it: a missed target fails
  the build, however it was started (``make book``, the tests, a bare
  ``jupyter-book build``), and no miss lands in the execution cache as a page
  that ran.
- **The essay's pictures.** When a build starts, every picture of :mod:`brrr_book.figures` is drawn
  from its data into ``_figures/`` in the book's source folder (never committed), where the
  chapters' ``figure`` directives find it, and the book's own diagrams
  (:mod:`brrr_book.diagrams`) into ``_diagrams/``.
- **A picture for each colour mode.** A chapter shows a picture's light drawing with a ``figure``
  of class ``only-light`` and its dark drawing with an ``image`` of class ``only-dark`` right
  after it; the theme hides the one not in its mode. The theme also hides a caption that follows
  a hidden image, so :func:`pair_light_dark` moves the dark image into the figure and wraps the
  two in a ``div.brrr-light-dark``: one figure, one caption and one number in either mode.
- **No launch button to nowhere.** While ``repository.url`` in ``_config.yml`` is the
  placeholder (``brrr_book.colab.PLACEHOLDER``), the only setting of where the course lives, the
  pages show no launch buttons (:func:`drop_placeholder_launch_buttons`): a Colab button would
  open a repository that does not exist.
- **Says when Colab cannot install brrr.** At the end of the build it prints,
  as a notice, why the Colab launch buttons open a set-up cell that cannot
  install brrr (``brrr_book.colab.release_problem``: ``repository.url`` is the
  placeholder, or this checkout has no tag ``v<version>``). A notice, not a
  Sphinx warning: the course ships with the placeholder, and ``-W`` builds
  (``make book``, the tests) must pass with it.

Launch buttons still point online: they are links, not assets.
``tests/book/test_book_in_a_browser.py`` (with ``tests/book_browser.py``) loads every page with the
network blocked.
"""

from __future__ import annotations

import os
import shutil
from importlib import resources
from pathlib import Path

from docutils import nodes
from sphinx.transforms import SphinxTransform
from sphinx.util import logging

from brrr import targets
from brrr_book import colab

logger = logging.getLogger(__name__)

STYLESHEET = "brrr.css"  # in book/brrr_book/book_static/, copied to _static/
MATHJAX_PACKAGE = "jupyter_server_mathjax"
MATHJAX_FOLDER = "mathjax"  # under _static/ in the built book
MATHJAX_PATH = f"{MATHJAX_FOLDER}/MathJax.js?config=TeX-AMS-MML_HTMLorMML-full"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
MYST_MATH_CLASSES = "tex2jax_process|mathjax_process|math|output_area"
MYST_IGNORE_CLASSES = "tex2jax_ignore|mathjax_ignore"
MATHJAX2_CONFIG = {
    "tex2jax": {
        "processClass": MYST_MATH_CLASSES,
        "ignoreClass": MYST_IGNORE_CLASSES,
    },
    # The package ships the STIX web fonts, not MathJax's TeX fonts: use them,
    # as Jupyter's classic notebook did, and never look for local or image fonts.
    "HTML-CSS": {
        "availableFonts": [],
        "preferredFont": None,
        "webFont": "STIX-Web",
        "imageFont": None,
        # MathJax 2 declares a blank font at about:blank, which Chromium
        # refuses with a console error; a missing local font is as blank.
        "styles": {"@font-face": {"font-family": "MathJax_Blank", "src": "local('MathJax_Blank')"}},
    },
    "messageStyle": "none",  # no "Loading MathJax" box in the corner
}


def mathjax_source() -> Path:
    """The folder of MathJax files shipped by ``jupyter-server-mathjax``."""
    try:
        folder = resources.files(MATHJAX_PACKAGE) / "static"
    except ModuleNotFoundError as error:
        raise RuntimeError(
            "The offline book needs MathJax from the PyPI package "
            "jupyter-server-mathjax: pip install 'brrr[book]' "
            "(or make book, which installs requirements.txt)."
        ) from error
    return Path(str(folder))


def _configure(app, config) -> None:
    config.html_static_path = [
        *config.html_static_path,
        str(Path(__file__).with_name("book_static")),
    ]
    config.mathjax_path = MATHJAX_PATH
    config.mathjax2_config = MATHJAX2_CONFIG
    config.html_context.setdefault("default_mode", "auto")  # pydata theme
    drop_placeholder_launch_buttons(config.html_theme_options)
    config.nb_ipywidgets_js = {}
    config.nb_mime_priority_overrides = [
        *config.nb_mime_priority_overrides,
        ("*", WIDGET_VIEW, None),
    ]


def drop_placeholder_launch_buttons(theme_options: dict) -> bool:
    """Remove the launch buttons from ``theme_options`` (Jupyter Book's ``launch_buttons``) where
    its ``repository_url`` is :data:`brrr_book.colab.PLACEHOLDER`; returns whether it did."""
    placeholder = theme_options.get("repository_url", "").rstrip("/") == colab.PLACEHOLDER
    return placeholder and theme_options.pop("launch_buttons", None) is not None


FIGURES_DIR = "_figures"


def _is_brrrs_book(app) -> bool:
    """Whether this build is of brrr's own book (a checkout), not a small book built for a test."""
    return (Path(app.srcdir) / "pyproject.toml").is_file()


def _draw_figures(app) -> None:
    if not _is_brrrs_book(app):  # its chapters' pictures: half a minute no other book needs
        return
    from brrr_book import figures  # matplotlib and the record: only for a build
    from brrr_book import diagrams

    figures.draw_all(Path(app.srcdir) / FIGURES_DIR)
    diagrams.draw_all(Path(app.srcdir) / diagrams.FOLDER)


LIGHT_DARK = "brrr-light-dark"  # the class of the div that holds a figure's two drawings


def pair_light_dark(doctree) -> int:
    """Move each ``only-dark`` image that directly follows a figure whose image is ``only-light``
    into that figure, beside its image, the two wrapped in a ``div.brrr-light-dark`` (the caption
    then follows the div, not a hidden image, and stays shown); returns how many were moved."""
    moved = 0
    for figure in list(doctree.findall(nodes.figure)):
        parent = figure.parent
        index = parent.index(figure)
        following = parent[index + 1] if index + 1 < len(parent) else None
        light = figure.next_node(nodes.image)
        if (
            not isinstance(following, nodes.image)
            or "only-dark" not in following["classes"]
            or light is None
            or "only-light" not in light["classes"]
            or light.parent is not figure
        ):
            continue
        parent.remove(following)
        pair = nodes.container("", classes=[LIGHT_DARK])
        figure.replace(light, pair)
        pair += [light, following]
        moved += 1
    return moved


class PairLightDark(SphinxTransform):
    """:func:`pair_light_dark` on every page."""

    default_priority = 500

    def apply(self, **kwargs) -> None:
        pair_light_dark(self.document)


def _clear_mathjax3_config(app) -> None:
    app.config.mathjax3_config = None  # MyST's MathJax 3 settings; see above


def _copy_mathjax(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    target = Path(app.outdir) / "_static" / MATHJAX_FOLDER
    shutil.copytree(mathjax_source(), target, dirs_exist_ok=True)


def _colab_notice(app, exception) -> None:
    """Print :func:`brrr_book.colab.release_problem` for this book, if any, when the build is
    done."""
    if exception is not None or not _is_brrrs_book(app):
        return
    problem = colab.release_problem(Path(app.srcdir))
    if problem:
        logger.info(f"brrr: the Colab launch buttons: {problem}", color="darkred")


def _drop_repeated_scripts(app, pagename, templatename, context, doctree):
    """Keep the first of identical scripts (an inline one may be listed with
    filename None once and '' once)."""
    scripts = context.get("script_files")
    if not scripts:
        return
    unique = {}
    for script in scripts:
        key = (script.filename or "", script.priority, tuple(sorted(script.attributes.items())))
        unique.setdefault(key, script)
    scripts[:] = unique.values()


def setup(app):
    mathjax_source()  # fail at the start of a build, not after it
    os.environ[targets.STRICT] = "1"  # before any notebook's kernel starts (see above)
    app.connect("config-inited", _configure)
    # myst-parser fills mathjax3_config at builder-inited (priority 500).
    app.connect("builder-inited", _clear_mathjax3_config, priority=900)
    app.connect("builder-inited", _draw_figures)
    app.connect("html-page-context", _drop_repeated_scripts, priority=900)
    app.connect("build-finished", _copy_mathjax)
    app.connect("build-finished", _colab_notice)
    app.add_transform(PairLightDark)
    app.add_css_file(STYLESHEET)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
