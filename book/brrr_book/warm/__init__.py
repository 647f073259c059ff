"""Warm kernels for the book build: each notebook's kernel forked from a process that has imported
torch.

myst-nb executes every notebook in a fresh Jupyter kernel, and each paid the same start-up:
ipykernel, ``import torch`` and, where a page compiles, torch._dynamo and Inductor (2.8-4.3 s of
set-up cell per notebook on the 2-core CI machine). ``make book`` and the tests' book builds put
:data:`KERNELSPECS` first on JUPYTER_PATH (:func:`jupyter_path`); there the kernelspec ``python3``,
the notebooks' own, names the provisioner ``brrr-warm`` (provisioner.py), which forks each kernel
from one zygote (zygote.py) that imported those modules once. A forked kernel starts as fresh as a
launched one apart from the modules already imported (and Python's hash seed, the zygote's): its own
session, environment, folder, globals and random seeds, no tensor, no thread. Anything that stops
the zygote makes the kernel start the normal way.

The spec keeps the name ``python3`` because nbclient gives IPython's history an in-memory file only
to a kernel of that name (``KernelManager.ipykernel``): under another name each kernel would write
``~/.ipython``'s history database. ``python -m brrr_book.warm.saving NOTEBOOK...`` measures what it
saves."""

from __future__ import annotations

import os
from pathlib import Path

# The folder that, on JUPYTER_PATH, makes the kernelspec ``python3`` the warm one (provisioner
# ``brrr-warm``).
KERNELSPECS = Path(__file__).with_name("jupyter_path")


def provisioner_installed() -> bool:
    """Whether this environment has the entry point ``brrr-warm`` (installed with brrr, by ``make
    install``)."""
    from importlib.metadata import entry_points

    return bool(entry_points(group="jupyter_client.kernel_provisioners", name="brrr-warm"))


def jupyter_path(env: dict | None = None) -> str:
    """The JUPYTER_PATH under which kernels start warm: ours first, then any the environment had.

    Where brrr was installed without the provisioner's entry point (an older editable install), ours
    is left out: jupyter_client would find no kernel at all named python3 there, and every notebook
    would fail."""
    existing = (os.environ if env is None else env).get("JUPYTER_PATH")
    ours = [str(KERNELSPECS)] if provisioner_installed() else []
    return os.pathsep.join([*ours, *([existing] if existing else [])])
