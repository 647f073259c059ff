"""``python -m brrr.diagnose module:callable [--json PATH] [--figure PATH] [--threads N]``.

The callable, called with no arguments, returns ``(step, args)``. The report goes
to stdout; ``--json`` writes the stamped JSON, ``--figure`` the roofline figure.
Bad input prints one paragraph and exits with status 2.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path

from brrr.diagnose.core import diagnose
from brrr.diagnose.errors import DiagnoseError, bad_target, step_failed


def load_target(target: str):
    """``(step, args)`` from ``module:callable``, or a DiagnoseError saying what is wrong."""
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
    try:
        built = factory()
    except Exception as error:
        raise step_failed(error, phase=f"building the step with {target}()") from error
    if not (isinstance(built, tuple) and len(built) == 2 and callable(built[0])):
        raise bad_target(target, f"{attribute}() returned {type(built).__name__}, not (step, args)")
    step, args = built
    return step, tuple(args)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m brrr.diagnose", description=__doc__.split("\n\n")[0])
    parser.add_argument("target", help="module:callable returning (step, args)")
    parser.add_argument("--json", type=Path, help="write the stamped JSON report here")
    parser.add_argument("--figure", type=Path, help="write the roofline figure here (PNG, SVG...)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads for the step")
    parser.add_argument("--explain", action="store_true", help="add torch._dynamo.explain's graph breaks")
    args = parser.parse_args(argv)
    try:
        step, step_args = load_target(args.target)
        found = diagnose(step, *step_args, threads=args.threads, explain=args.explain)
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
