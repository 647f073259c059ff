"""``python -m brrr.diagnose module:callable [--try [FIXES]] [--json PATH] [--figure PATH]
[--threads N]``.

The callable, called with no arguments, returns ``(step, args)``. The report goes
to stdout; ``--json`` writes the stamped JSON, ``--figure`` the roofline figure.
Bad input prints one paragraph and exits with status 2.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
from pathlib import Path

from brrr import ceilings
from brrr.diagnose import trials
from brrr.diagnose.core import diagnose
from brrr.diagnose.errors import DiagnoseError, bad_target, factory_failed, step_failed

EPILOG = """\
the target: module:callable, where the callable, called with no arguments, returns (step, args),
and step(*args) runs one training or inference step (forward, loss, backward, optimizer step).
Return the loss or the output. For example, in mymodel.py:

  def make_step(batch=32):
      model = Net()
      x, y = torch.randn(batch, 3, 32, 32), torch.randint(0, 10, (batch,))
      optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
      def step(model, x, y):
          optimizer.zero_grad()
          loss = torch.nn.functional.cross_entropy(model(x), y)
          loss.backward()
          optimizer.step()
          return loss
      return step, (model, x, y)

  python -m brrr.diagnose mymodel:make_step --try

--try measures fixes on the step itself: compile (torch.compile), bf16 (autocast), batch (twice the
batch: needs a batch parameter with a default, as make_step has above, and make_step(batch=n) must
build the step for a batch of n), channels_last (the image inputs in that layout), dropout (off, to
show what it costs). Each is read several times: its interval is shown, and a fix whose readings
straddle 1x reads "no measurable gain". Try a few: --try compile,bf16.
"""


def load_factory(target: str):
    """The callable ``module:callable`` names, or a DiagnoseError saying what is wrong."""
    module_name, colon, attribute = target.partition(":")
    if not colon or not module_name or not attribute:
        raise bad_target(target, "it is not of the form module:callable")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise bad_target(target, f"module {module_name!r} cannot be imported ({error})") from error
    except Exception as error:
        raise step_failed(error, phase=f"importing {module_name}") from error
    factory = getattr(module, attribute, None)
    if not callable(factory):
        raise bad_target(target, f"module {module_name!r} has no callable named {attribute!r}")
    return factory


def load_target(target: str, factory=None):
    """``(step, args)`` from ``module:callable`` (or its already loaded ``factory``), or a
    DiagnoseError."""
    factory = factory or load_factory(target)
    try:
        built = factory()
    except Exception as error:
        raise factory_failed(target, error) from error
    attribute = target.partition(":")[2]
    if not (isinstance(built, tuple) and len(built) == 2 and callable(built[0])):
        raise bad_target(target, f"{attribute}() returned {type(built).__name__}, not (step, args)")
    step, args = built
    return step, tuple(args)


def positive_threads(text: str) -> int:
    """``--threads``: a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of threads") from None
    if value < 1:
        raise argparse.ArgumentTypeError(
            f"{value} threads: torch needs at least 1 (leave --threads out for its default)"
        )
    return value


def parser() -> argparse.ArgumentParser:
    found = argparse.ArgumentParser(
        prog="python -m brrr.diagnose",
        description="Which regime a PyTorch step is in (compute-, memory- or overhead-bound), "
        "where its time goes, and what to do about it, measured on this machine.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    found.add_argument(
        "target", help="module:callable returning (step, args): step(*args) runs one step"
    )
    found.add_argument(
        "--try",
        dest="tries",
        nargs="?",
        const="all",
        default=None,
        metavar="FIXES",
        help=f"try fixes on the step and measure them: all, or some of {','.join(trials.TRIES)}",
    )
    found.add_argument("--json", type=Path, help="write the stamped JSON report here")
    found.add_argument("--figure", type=Path, help="write the roofline figure here (PNG, SVG...)")
    found.add_argument(
        "--threads", type=positive_threads, default=None, help="torch CPU threads for the step"
    )
    found.add_argument(
        "--explain", action="store_true", help="add torch._dynamo.explain's graph breaks"
    )
    return found


def checked_outputs(json_path: Path | None, figure_path: Path | None) -> None:
    """Refuse, before anything runs, an output the run could not write at its end: a path that is a
    folder, a folder that cannot be made or written, a figure format matplotlib does not write."""
    for path, what in ((json_path, "--json"), (figure_path, "--figure")):
        if path is None:
            continue
        if path.is_dir():
            raise DiagnoseError(f"{what} {path} is a folder: give the path of a file to write")
        folder = next((parent for parent in (path.parent, *path.parent.parents) if parent.exists()))
        if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
            raise DiagnoseError(
                f"{what} {path} cannot be written: {folder} is not a folder this user can write in"
            )
    if figure_path is not None:
        from matplotlib.backend_bases import FigureCanvasBase

        formats = FigureCanvasBase.get_supported_filetypes()
        suffix = figure_path.suffix.lstrip(".").lower()
        if suffix not in formats:
            raise DiagnoseError(
                f"--figure {figure_path}: matplotlib writes no {suffix or 'suffix-less'} files; "
                f"end the name with one of {', '.join('.' + name for name in sorted(formats))}"
            )


def roofs_first(threads: int | None) -> None:
    """Measure this machine's roofs now where none are cached, saying so first: the first run
    otherwise spends half a minute before its report without a word."""
    if ceilings.is_cached(threads):
        return
    print(
        "brrr diagnose: measuring this machine's roofs first (copy bandwidth, matmul peaks, "
        "non-matmul peak, dispatch overhead), once per thread count: about 30-60 s on a 2-core "
        f"CPU, then cached in {ceilings.cache_path(threads)}",
        file=sys.stderr,
        flush=True,
    )
    start = time.monotonic()
    ceilings.measure(threads=threads)
    print(f"brrr diagnose: roofs measured in {time.monotonic() - start:.0f} s", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        checked_outputs(args.json, args.figure)
        factory = load_factory(args.target)
        step, step_args = load_target(args.target, factory)
        roofs_first(args.threads)
        found = diagnose(
            step,
            *step_args,
            threads=args.threads,
            explain=args.explain,
            tries=args.tries,
            factory=factory,
        )
    except DiagnoseError as error:
        print(f"brrr diagnose: {error}", file=sys.stderr)
        return 2
    print(found.report())
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(found.to_json(), indent=1, sort_keys=True) + "\n")
    if args.figure:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        ax = found.plot()
        args.figure.parent.mkdir(parents=True, exist_ok=True)
        ax.figure.savefig(args.figure, dpi=120, bbox_inches="tight")
        plt.close(ax.figure)
    return 0


if __name__ == "__main__":
    sys.exit(main())
