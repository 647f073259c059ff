"""The grader process's first code: import ``brrr`` from the bytes on standard input, then run the
server.

    python -I -B -c "$(source of this file)" --lab LAB --socket PATH
    python -I -B -c "$(source of this file)" --zygote --socket PATH

The gradebook runs it so (:data:`brrr.grading.assemble.GRADER_BOOTSTRAP` is
this file's source, read when the gradebook starts). It reads one line from
standard input, :meth:`brrr.grading.assemble.Snapshot.grader_payload` (every
``brrr`` file, base64 in JSON), puts a finder first on ``sys.meta_path`` that
serves ``brrr`` from those bytes and refuses any brrr module they do not hold,
so nothing of brrr is ever read from disk, then runs
:func:`brrr.grading.server.main`, which reads the signing key, the next line (with ``--zygote``,
:func:`brrr.grading.zygote.main`, which forks grader processes that do).
Its module paths name no real file; source for tracebacks and ``inspect`` comes
from the loader. ``-I`` keeps PYTHONPATH, the user's site folder and the
working directory off ``sys.path``; ``-B`` writes no bytecode next to the
environment's modules.

It imports nothing from brrr before its finder is in place: importing this
module runs nothing.
"""

import base64
import importlib.abc
import importlib.util
import json
import sys

ROOT = "/<brrr grader, from memory>/"


class Loader(importlib.abc.SourceLoader):
    def __init__(self, files, relative):
        self.files = files
        self.relative = relative

    def get_filename(self, fullname):
        return ROOT + self.relative

    def get_data(self, path):
        relative = path[len(ROOT) :] if path.startswith(ROOT) else None
        if relative not in self.files:
            raise OSError(f"{path} is not part of the grader")
        return base64.b64decode(self.files[relative])


class Finder(importlib.abc.MetaPathFinder):
    """Serves ``brrr`` and its modules from ``files`` ({"brrr/x.py": base64 text}); refuses any
    other of them."""

    def __init__(self, files):
        self.files = files

    def find_spec(self, name, path=None, target=None):
        if name != "brrr" and not name.startswith("brrr."):
            return None
        relative = name.replace(".", "/")
        for file, package in ((relative + "/__init__.py", True), (relative + ".py", False)):
            if file in self.files:
                spec = importlib.util.spec_from_loader(
                    name, Loader(self.files, file), origin=ROOT + file, is_package=package
                )
                spec.has_location = True
                if package:
                    spec.submodule_search_locations = [ROOT + relative]
                return spec
        raise ModuleNotFoundError(f"No module named {name!r} in the grader", name=name)


def main(argv):
    sys.meta_path.insert(0, Finder(json.loads(sys.stdin.buffer.readline())))
    if argv[:1] == ["--zygote"]:  # the gradebook's grader zygote, which forks graders
        from brrr.grading import zygote

        sys.argv[0] = "brrr.grading.zygote"
        return zygote.main(argv[1:])
    from brrr.grading import server

    sys.argv[0] = "brrr.grading.server"
    return server.main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
