"""Warm kernels for the book build: each notebook's kernel forked from a process that has imported torch.

myst-nb executes every notebook in a fresh Jupyter kernel, and each paid the same start-up: ipykernel,
the inline backend, ``import torch`` and, where a page compiles, torch._dynamo and Inductor (2.8-4.3 s
of set-up cell per notebook on the 2-core CI machine). The book build names the kernelspec ``brrr-warm``
(``nb_kernel_rgx_aliases``), whose provisioner (provisioner.py) forks each kernel from one zygote
(zygote.py) that imported those modules once. A forked kernel starts as fresh as a launched one apart from
the modules already imported: its own session, environment, folder and globals, no tensor, no thread.
Anything that stops the zygote makes the kernel start the normal way.
"""
