"""Student Triton kernels across the process boundary: record launches there, check and replay them
here.

The grader never trusts what a kernel *seemed* to do in the student's process.
Instead:

1. **Record** (student's process, :func:`record_launches`). The student's
   wrapper is called on tensors of the shapes the grader asks for. Every
   ``kernel[grid](...)`` it makes is recorded, not run: the kernel's name, the
   grid, and each argument, a tensor described by which of the wrapper's
   arguments it views (or as a scratch buffer the wrapper allocated), a number
   by its value. The source of each ``@triton.jit`` function the kernels reach
   travels with it.
2. **Check** (grader, :func:`validate`). Each kernel body may use only what the
   Triton compiler accepts on a GPU: ``tl.*``, arithmetic, control flow,
   constexprs and other jit functions. Torch, numpy or any other Python called
   from a kernel body is rejected, with the line, before anything runs. So are
   dunder attributes, and the ``tl`` features whose memory traffic the counter
   cannot see (block pointers, tensor descriptors, inline assembly).
3. **Replay** (grader, :func:`build` and :func:`replay`). The grader compiles
   the checked sources itself, in the interpreter or for the GPU, and launches
   them with the recorded configuration on tensors *it* allocated and filled.
   Scratch buffers start out poisoned. Whatever the wrapper computed with torch
   does not exist here: only what the kernels store counts.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import inspect
import itertools
import linecache
import re
import textwrap
from typing import Any, Callable, Iterator, Mapping, Sequence

import torch

from brrr.checks.dtypes import DTYPES, dtype_name

MAX_LAUNCHES = 64
MAX_PROGRAMS = 1 << 31

# ---------------------------------------------------------------- what a kernel body may use

ALLOWED_BUILTINS = ("range", "min", "max", "int", "float", "bool", "len", "abs")
# tl features whose traffic brrr.traffic cannot count, or that leave Triton's language.
DENIED_TL = {
    "inline_asm_elementwise": "inline assembly is not Triton code the grader can check",
    "make_block_ptr": "block pointers are not counted by the traffic counter; use pointer "
    "arithmetic",
    "advance": "block pointers are not counted by the traffic counter; use pointer arithmetic",
    "make_tensor_descriptor": "tensor descriptors are not counted by the traffic counter; use "
    "pointer arithmetic",
    "load_tensor_descriptor": "tensor descriptors are not counted by the traffic counter; use "
    "pointer arithmetic",
    "store_tensor_descriptor": "tensor descriptors are not counted by the traffic counter; use "
    "pointer arithmetic",
    "tensor_descriptor": "tensor descriptors are not counted by the traffic counter; use pointer "
    "arithmetic",
    "atomic_load": "this atomic is not counted by the traffic counter",
    "atomic_store": "this atomic is not counted by the traffic counter",
    "atomic_poll": "this atomic is not counted by the traffic counter",
    "extra": "tl.extra (libdevice and friends) does not run in the interpreter the grader uses",
    "core": "use the public tl.* functions",
    "standard": "use the public tl.* functions",
    "target_info": "use the public tl.* functions",
    "random": "use tl.rand and tl.randn",
}


# Attributes that Triton values set per instance (so not found on their classes).
VALUE_ATTRIBUTES = (
    "dtype",
    "shape",
    "type",
    "value",
    "numel",
    "element_ty",
    "primitive_bitwidth",
    "scalar",
    "int_bitwidth",
    "fp_mantissa_width",
    "name",
    "address_space",
)


class KernelRejected(Exception):
    """A kernel source that uses something a Triton kernel may not, with the reason."""


def _tl():
    import triton.language as tl

    return tl


def _public(obj) -> set[str]:
    return {n for n in dir(obj) if not n.startswith("_")}


def _allowed_attributes() -> tuple[set[str], set[str], set[str]]:
    """(tl.X names, tl.math.X names, attribute names allowed on values: tensors, dtypes, pointer
    types)."""
    tl = _tl()
    top = {
        n for n in _public(tl) if n not in DENIED_TL and not inspect.ismodule(getattr(tl, n))
    } | {"math"}
    math = {n for n in _public(tl.math) if not inspect.ismodule(getattr(tl.math, n))}
    values = set(VALUE_ATTRIBUTES)
    for cls in (tl.tensor, tl.dtype, tl.pointer_type, tl.block_type, tl.constexpr):
        values |= _public(cls)
    return top, math, values - set(DENIED_TL)


_ALLOWED_NODES = (
    ast.Module,
    ast.FunctionDef,
    ast.arguments,
    ast.arg,
    ast.Expr,
    ast.Assign,
    ast.AugAssign,
    ast.AnnAssign,
    ast.Return,
    ast.If,
    ast.For,
    ast.While,
    ast.Break,
    ast.Continue,
    ast.Pass,
    ast.BinOp,
    ast.UnaryOp,
    ast.BoolOp,
    ast.Compare,
    ast.IfExp,
    ast.Call,
    ast.keyword,
    ast.Attribute,
    ast.Name,
    ast.Constant,
    ast.Tuple,
    ast.List,
    ast.Subscript,
    ast.Slice,
    ast.Load,
    ast.Store,
    ast.Assert,
    ast.operator,
    ast.unaryop,
    ast.boolop,
    ast.cmpop,
    ast.expr_context,
)


def _line(node: ast.AST, source: str) -> str:
    number = getattr(node, "lineno", None)
    if number is None:
        return ""
    text = source.splitlines()[number - 1].strip() if number <= len(source.splitlines()) else ""
    return f" (line {number}: `{text}`)"


def validate(sources: Mapping[str, str], constants: Mapping[str, Any] = ()) -> None:
    """Raise :class:`KernelRejected` unless every source is a kernel body the Triton compiler would
    accept.

    ``sources`` maps each jit function's name to its source (``def`` line first);
    ``constants`` are the ``tl.constexpr`` globals the kernels read.
    """
    top, math, values = _allowed_attributes()
    jit_names = set(sources)
    known_constants = set(dict(constants))
    for name, source in sources.items():
        if (
            not isinstance(source, str)
            or not re.match(r"[A-Za-z_]\w*$", name or "")
            or name in ("tl",) + ALLOWED_BUILTINS
            or name.startswith("__")
        ):
            raise KernelRejected(f"malformed kernel {name!r}")
        try:
            tree = ast.parse(source)
        except (SyntaxError, ValueError, RecursionError) as error:  # null bytes, deep nesting too
            raise KernelRejected(
                f"{name}: the kernel source does not parse ({type(error).__name__}: {error})"
            ) from None
        if (
            len(tree.body) != 1
            or not isinstance(tree.body[0], ast.FunctionDef)
            or tree.body[0].name != name
        ):
            raise KernelRejected(f"{name}: expected the source of one function named {name}")
        function = tree.body[0]
        if function.decorator_list:
            raise KernelRejected(f"{name}: the source must start at its def line")
        args = function.args
        if args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs:
            raise KernelRejected(
                f"{name}: a Triton kernel takes plain arguments (no *args, **kwargs)"
            )
        local = {a.arg for a in args.args}
        for node in ast.walk(function):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                local.add(node.id)
        for node in ast.walk(tree):
            if not isinstance(node, _ALLOWED_NODES):
                raise KernelRejected(
                    f"{name}: `{type(node).__name__}` is not allowed in a kernel body"
                    f"{_line(node, source)}; a kernel uses tl.*, arithmetic and control flow only"
                )
        # Names first, so that `torch.sigmoid(x)` is reported as torch, not as an unknown attribute.
        names = local | jit_names | known_constants | {"tl"} | set(ALLOWED_BUILTINS)
        for node in sorted(
            ast.walk(tree),
            key=lambda n: (not isinstance(n, ast.Name), not isinstance(n, ast.Attribute)),
        ):
            _check_node(name, node, function, source, names, (top, math, values))
        for default in args.defaults:
            if not isinstance(default, ast.Constant):
                raise KernelRejected(f"{name}: default values must be constants")


def _check_node(
    name: str,
    node: ast.AST,
    function: ast.FunctionDef,
    source: str,
    names: set,
    allowed: tuple,
) -> None:
    """Raise :class:`KernelRejected` if ``node`` of kernel ``name`` is something Triton would not
    compile: a nested function, a non-literal constant, a name that is not a local, a kernel, a
    constant or tl, an attribute outside triton.language, a call it cannot make, an annotation other
    than tl.constexpr."""
    where = _line(node, source)
    if isinstance(node, ast.FunctionDef) and node is not function:
        raise KernelRejected(f"{name}: nested functions are not allowed in a kernel{where}")
    if isinstance(node, ast.Constant) and not isinstance(
        node.value, (int, float, str, bool, type(None))
    ):
        raise KernelRejected(f"{name}: constant {node.value!r} is not allowed{where}")
    if isinstance(node, ast.Name):
        if node.id.startswith("__"):
            raise KernelRejected(f"{name}: the name {node.id} is not allowed{where}")
        if isinstance(node.ctx, ast.Load) and node.id not in names:
            raise KernelRejected(
                f"{name}: `{node.id}` is not Triton: a kernel body may call only tl.*, other "
                f"@triton.jit functions and {', '.join(ALLOWED_BUILTINS)}{where}. Torch, numpy and "
                "other Python do not run inside a compiled kernel."
            )
        if isinstance(node.ctx, ast.Store) and node.id in ("tl",) + ALLOWED_BUILTINS:
            raise KernelRejected(f"{name}: do not assign to {node.id}{where}")
    if isinstance(node, ast.Attribute):
        _check_attribute(name, node, where, *allowed)
    if isinstance(node, ast.Call):
        _check_call(name, node, where)
    if isinstance(node, ast.arg) and node.annotation is not None:
        annotation = node.annotation
        constexpr = (
            isinstance(annotation, ast.Attribute)
            and annotation.attr == "constexpr"
            and isinstance(annotation.value, ast.Name)
            and annotation.value.id == "tl"
        )
        if not constexpr:
            raise KernelRejected(
                f"{name}: the only annotation a kernel argument may have is tl.constexpr{where}"
            )
    if isinstance(node, ast.AnnAssign):
        raise KernelRejected(f"{name}: annotated assignments are not allowed in a kernel{where}")


def _check_attribute(
    name: str, node: ast.Attribute, where: str, top: set, math: set, values: set
) -> None:
    if node.attr.startswith("_"):
        raise KernelRejected(
            f"{name}: the attribute `{node.attr}` is not allowed in a kernel{where}"
        )
    base = node.value
    if isinstance(base, ast.Name) and base.id == "tl":
        if node.attr in DENIED_TL:
            raise KernelRejected(
                f"{name}: tl.{node.attr} is not allowed here: {DENIED_TL[node.attr]}{where}"
            )
        if node.attr not in top:
            raise KernelRejected(f"{name}: tl.{node.attr} is not part of triton.language{where}")
        return
    if (
        isinstance(base, ast.Attribute)
        and base.attr == "math"
        and isinstance(base.value, ast.Name)
        and base.value.id == "tl"
    ):
        if node.attr not in math:
            raise KernelRejected(
                f"{name}: tl.math.{node.attr} is not part of triton.language.math{where}"
            )
        return
    if node.attr in DENIED_TL:
        raise KernelRejected(
            f"{name}: .{node.attr} is not allowed here: {DENIED_TL[node.attr]}{where}"
        )
    if node.attr not in values:
        raise KernelRejected(
            f"{name}: `.{node.attr}` is not an attribute of a Triton tensor or dtype{where}"
        )


def _check_call(name: str, node: ast.Call, where: str) -> None:
    func = node.func
    if isinstance(func, ast.Name):
        return  # the name itself was checked: a builtin from the list, a jit function or a constant
    if isinstance(func, ast.Attribute):
        return  # checked as an attribute
    raise KernelRejected(
        f"{name}: only tl.* functions, tensor methods and jit functions may be called{where}"
    )


# ---------------------------------------------------------------- the student's side: record


def jit_source(kernel) -> str:
    """The source of a jit function, from its ``def`` line (what Triton itself compiles)."""
    source = getattr(kernel, "src", None) or getattr(kernel, "_src", None)
    if not source:
        source = textwrap.dedent(inspect.getsource(kernel.fn))
    match = re.search(r"^def\s+\w+\s*\(", source, re.MULTILINE)
    return source[match.start() :] if match else source


def _is_jit(value) -> bool:
    try:
        from triton.runtime.interpreter import InterpretedFunction
        from triton.runtime.jit import JITFunction
    except ImportError:
        return False
    return isinstance(value, (JITFunction, InterpretedFunction))


def reachable_sources(kernel) -> tuple[dict[str, str], dict[str, Any]]:
    """Sources of ``kernel`` and every jit function it reaches by a global name; its constexpr
    globals."""
    tl = _tl()
    sources: dict[str, str] = {}
    constants: dict[str, Any] = {}
    queue = [kernel]
    while queue:
        current = queue.pop()
        name = current.fn.__name__
        if name in sources:
            continue
        sources[name] = jit_source(current)
        namespace = current.fn.__globals__
        for node in ast.walk(ast.parse(sources[name])):
            if isinstance(node, ast.Name) and node.id in namespace:
                value = namespace[node.id]
                if _is_jit(value):
                    queue.append(value)
                elif isinstance(value, tl.constexpr):
                    constants[node.id] = value.value
    return sources, constants


def _describe_argument(
    value, name: str, given: Mapping[str, torch.Tensor], scratch: dict[int, dict]
) -> dict:
    tl = _tl()
    if isinstance(value, tl.constexpr):
        value = value.value
    if isinstance(value, torch.Tensor):
        key = value.untyped_storage().data_ptr()
        for given_name, tensor in given.items():
            if tensor.untyped_storage().data_ptr() == key:
                storage = given_name
                break
        else:
            if key not in scratch:
                scratch[key] = {
                    "name": f"{name}",
                    "dtype": dtype_name(value.dtype),
                    "elements": value.untyped_storage().nbytes() // value.element_size(),
                }
            storage = f"scratch{list(scratch).index(key)}"
        return {
            "tensor": storage,
            "offset": value.storage_offset(),
            "shape": list(value.shape),
            "stride": list(value.stride()),
            "dtype": dtype_name(value.dtype),
        }
    if value is None or isinstance(value, (bool, int, float, str)):
        return {"value": value}
    raise TypeError(
        f"argument {name} of a kernel launch is a {type(value).__name__}; the grader can replay "
        "tensors, numbers, booleans, strings and None"
    )


def _grid(grid, named: dict) -> list[int]:
    if callable(grid):
        grid = grid(named)
    if isinstance(grid, int):
        grid = (grid,)
    grid = [int(g) for g in grid]
    return grid + [1] * (3 - len(grid))


@contextlib.contextmanager
def _recording(launches: list) -> Iterator[None]:
    """Inside the block, ``kernel[grid](...)`` records the launch instead of running it."""
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    originals = {cls: cls.__dict__["run"] for cls in (JITFunction, InterpretedFunction)}

    def run(self, *args, grid, warmup, **kwargs):
        if warmup:
            return None
        launches.append((self, grid, args, kwargs))
        return None

    try:
        for cls in originals:
            cls.run = run
        yield
    finally:
        for cls, original in originals.items():
            cls.run = original


def record_launches(
    fn: Callable[..., Any], args: Sequence[torch.Tensor], names: Sequence[str]
) -> dict:
    """Call the wrapper ``fn(*args)`` with launches recorded, not run; return the recipe the grader
    replays."""
    raw: list = []
    with _recording(raw):
        fn(*args)
    given = dict(zip(names, args))
    scratch: dict[int, dict] = {}
    launches, sources, constants = [], {}, {}
    for kernel, grid, kernel_args, kwargs in raw[: MAX_LAUNCHES + 1]:
        arg_names = list(kernel.arg_names)
        named = dict(zip(arg_names, kernel_args)) | {
            k: v for k, v in kwargs.items() if k in arg_names
        }
        options = {k: v for k, v in kwargs.items() if k not in arg_names}
        more_sources, more_constants = reachable_sources(kernel)
        sources |= more_sources
        constants |= more_constants
        launches.append(
            {
                "kernel": kernel.fn.__name__,
                "grid": _grid(
                    grid, {k: (v.value if hasattr(v, "value") else v) for k, v in named.items()}
                ),
                "args": {k: _describe_argument(v, k, given, scratch) for k, v in named.items()},
                "options": {
                    k: v
                    for k, v in options.items()
                    if isinstance(v, (int, float, bool)) and k.isidentifier()
                },
            }
        )
    return {
        "launches": launches,
        "sources": sources,
        "constants": constants,
        "scratch": list(scratch.values()),
    }


# ---------------------------------------------------------------- the grader's side: read a record


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _whole(value, low: int = 0) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


def _argument_problem(name, spec) -> str | None:
    if not isinstance(name, str) or not isinstance(spec, dict):
        return "an argument that is not a name and its description"
    if "value" in spec:
        value = spec["value"]
        if value is None or isinstance(value, (bool, int, float, str)):
            return None
        return f"argument {name[:40]} has a value that is no number, string or None"
    shape, stride = spec.get("shape"), spec.get("stride")
    if not (
        isinstance(spec.get("tensor"), str)
        and spec.get("dtype") in DTYPES
        and _whole(spec.get("offset"))
        and isinstance(shape, list)
        and isinstance(stride, list)
        and len(shape) == len(stride) <= 8
        and all(_whole(v) for v in shape + stride)
    ):
        return f"argument {name[:40]} is no tensor view (tensor, dtype, offset, shape, stride)"
    return None


def _launch_problem(launch) -> str | None:
    if not isinstance(launch, dict) or not isinstance(launch.get("kernel"), str):
        return "a launch without a kernel's name"
    grid = launch.get("grid")
    if not (isinstance(grid, list) and len(grid) == 3 and all(_whole(g) for g in grid)):
        return f"the launch of {launch['kernel'][:40]} has a grid that is not three counts"
    args, options = launch.get("args", {}), launch.get("options", {})
    if not isinstance(args, dict) or not isinstance(options, dict):
        return f"the launch of {launch['kernel'][:40]} has no arguments or options as a dict"
    if not all(_number(v) or isinstance(v, bool) for v in options.values()):
        return f"the launch of {launch['kernel'][:40]} has an option that is not a number"
    return next(filter(None, (_argument_problem(k, v) for k, v in args.items())), None)


def recipe_problem(recipe) -> str | None:
    """What makes a launch record from the student's process (:func:`record_launches`) one the
    grader cannot read, or None: checked where it arrives, so a malformed record is the student's
    failure, said so, and never an error of the grader's further on."""
    if not isinstance(recipe, dict):
        return f"it is a {type(recipe).__name__}, not a record of launches"
    launches, sources = recipe.get("launches", []), recipe.get("sources", {})
    constants, scratch = recipe.get("constants", {}), recipe.get("scratch", [])
    if not isinstance(launches, list) or len(launches) > MAX_LAUNCHES + 1:
        return f"its launches are not a list of at most {MAX_LAUNCHES}"
    if not (
        isinstance(sources, dict)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in sources.items())
    ):
        return "its kernel sources are not names and texts"
    if not (isinstance(constants, dict) and all(_number(v) for v in constants.values())):
        return "its constexpr globals are not names and numbers"
    if not (
        isinstance(scratch, list)
        and all(
            isinstance(b, dict)
            and b.get("dtype") in DTYPES
            and _whole(b.get("elements"))
            and isinstance(b.get("name", ""), str)
            for b in scratch
        )
    ):
        return "its scratch buffers are not described by a dtype and a number of elements"
    return next(filter(None, (_launch_problem(launch) for launch in launches)), None)


# ---------------------------------------------------------------- the grader's side: build and
# replay


class Built:
    """Checked kernel sources compiled by the grader: ``kernels[name]`` is launchable."""

    def __init__(
        self, sources: Mapping[str, str], constants: Mapping[str, Any], *, interpreted: bool
    ):
        import triton.language as tl
        from triton.runtime.interpreter import InterpretedFunction
        from triton.runtime.jit import JITFunction

        validate(sources, constants)
        safe_builtins = {n: getattr(builtins, n) for n in ALLOWED_BUILTINS}
        namespace: dict[str, Any] = {
            "__builtins__": safe_builtins,
            "tl": tl,
            "__name__": "student_kernels",
        }
        for name, value in dict(constants).items():
            if not isinstance(value, (int, float, bool)):
                raise KernelRejected(f"the constexpr global {name} must be a number")
            namespace[name] = tl.constexpr(value)
        functions = {}
        for name, source in sources.items():
            filename = _pin_source(name, source)
            try:
                code = compile(source, filename, "exec")
            except (SyntaxError, ValueError, RecursionError) as error:  # parsed, yet too deep
                raise KernelRejected(
                    f"{name}: the kernel source does not compile ({error})"
                ) from None
            exec(code, namespace)  # noqa: S102 - checked by validate() above
            functions[name] = namespace[name]
        wrap = InterpretedFunction if interpreted else JITFunction
        self.kernels = {name: wrap(function) for name, function in functions.items()}
        namespace.update(self.kernels)
        self.interpreted = interpreted


def _pin_source(name: str, source: str) -> str:
    """A file name, on no disk, under which ``linecache`` holds ``source``; return it.

    Triton reads a kernel's source again with :func:`inspect.getsourcelines`
    (the interpreter rewrites and executes it; the GPU compiler compiles it).
    A file on disk could be rewritten by the student's process between the
    check and that read. This name exists only in this process's ``linecache``,
    pinned (no modification time, so ``linecache.checkcache`` never reloads it),
    so what Triton reads is exactly the source :func:`validate` accepted.
    """
    filename = f"<student kernel {name} {next(_PINNED)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    return filename


_PINNED = itertools.count()


def _materialize(spec: Mapping[str, Any], storages: Mapping[str, torch.Tensor]) -> Any:
    if "value" in spec:
        return spec["value"]
    base = storages.get(spec.get("tensor"))
    if base is None:
        raise KernelRejected(f"a launch names an unknown tensor {spec.get('tensor')!r}")
    if spec.get("dtype") != dtype_name(base.dtype):
        raise KernelRejected(
            f"a launch views {spec.get('tensor')} as {spec.get('dtype')}, but it holds "
            f"{dtype_name(base.dtype)}"
        )
    shape, stride, offset = spec.get("shape"), spec.get("stride"), spec.get("offset")
    if not (
        isinstance(shape, list)
        and isinstance(stride, list)
        and isinstance(offset, int)
        and len(shape) == len(stride)
        and all(isinstance(v, int) and v >= 0 for v in shape + stride)
        and offset >= 0
    ):
        raise KernelRejected("a launch describes a tensor view that is not valid")
    reach = offset + sum((s - 1) * st for s, st in zip(shape, stride)) + 1 if all(shape) else offset
    if reach > base.numel():
        raise KernelRejected(f"a launch views past the end of {spec.get('tensor')}")
    return torch.as_strided(base, shape, stride, offset)


def poison(tensor: torch.Tensor) -> torch.Tensor:
    if tensor.dtype.is_floating_point:
        return tensor.fill_(float("nan"))
    if tensor.dtype == torch.bool:
        return tensor.fill_(True)
    return tensor.fill_(torch.iinfo(tensor.dtype).min)


def scratch_tensors(recipe: Mapping[str, Any], device) -> dict[str, torch.Tensor]:
    """Poisoned buffers standing in for the ones the student's wrapper allocated (named scratch0,
    ...)."""
    made = {}
    for number, spec in enumerate(recipe.get("scratch", [])):
        dtype = DTYPES.get(spec.get("dtype"))
        elements = spec.get("elements")
        if dtype is None or not isinstance(elements, int) or not 0 <= elements <= 1 << 34:
            raise KernelRejected(
                "a scratch buffer of the wrapper is not one the grader can allocate"
            )
        made[f"scratch{number}"] = poison(torch.empty(elements, dtype=dtype, device=device))
    return made


def scratch_names(recipe: Mapping[str, Any]) -> dict[str, str]:
    """scratch0 -> the kernel argument it was first passed as (``tmp_ptr``), for messages and
    traffic tables."""
    return {
        f"scratch{i}": str(spec.get("name", f"scratch{i}"))
        for i, spec in enumerate(recipe.get("scratch", []))
    }


@contextlib.contextmanager
def interpreted_language() -> Iterator[None]:
    """Inside the block, a ``@triton.jit`` function called from an interpreted kernel runs in the
    interpreter (:func:`brrr.device.interpret_jit_calls`). On a GPU the grader interprets a
    student's kernel first, to check its bounds, in a process whose triton was imported for the
    GPU."""
    from brrr.device import interpret_jit_calls

    restore = interpret_jit_calls()
    try:
        yield
    finally:
        restore()


def replay(recipe: Mapping[str, Any], built: Built, storages: Mapping[str, torch.Tensor]) -> int:
    """Launch every recorded kernel, in order, on the grader's tensors; return the number of
    launches."""
    launches = recipe.get("launches", [])
    if len(launches) > MAX_LAUNCHES:
        raise KernelRejected(f"the wrapper launched more than {MAX_LAUNCHES} kernels")
    for launch in launches:
        kernel = built.kernels.get(launch.get("kernel"))
        if kernel is None:
            raise KernelRejected(
                f"a launch names a kernel {launch.get('kernel')!r} whose source was not sent"
            )
        grid = launch.get("grid")
        if not (
            isinstance(grid, list)
            and len(grid) == 3
            and all(isinstance(g, int) and g >= 0 for g in grid)
        ):
            raise KernelRejected("a launch has a grid that is not three counts")
        if grid[0] * grid[1] * grid[2] > MAX_PROGRAMS:
            raise KernelRejected(f"a launch asks for {grid[0] * grid[1] * grid[2]:,} programs")
        named = launch.get("args", {})
        arg_names = list(getattr(kernel, "arg_names", []))
        if set(named) != set(arg_names):
            raise KernelRejected(
                f"the launch of {launch['kernel']} does not give every argument "
                f"({', '.join(arg_names)})"
            )
        args = [_materialize(named[name], storages) for name in arg_names]
        options = (
            {}
            if built.interpreted
            else {
                k: v
                for k, v in launch.get("options", {}).items()
                if k in ("num_warps", "num_stages", "num_ctas", "maxnreg")
            }
        )
        with interpreted_language() if built.interpreted else contextlib.nullcontext():
            kernel[tuple(grid)](*args, **options)
    return len(launches)
