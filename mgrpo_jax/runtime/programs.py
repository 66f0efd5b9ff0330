"""A closed set of compiled programs of one jitted function.

On a TPU one compilation of a large model's program takes tens of seconds;
a run should compile its programs at start-up, from the shapes its config
allows, and nothing after. `Programs` wraps a `jax.jit` function:

  programs = Programs("decode", jax.jit(f, static_argnums=(0,)),
                      static_argnums=(0,), strict=True)
  seconds = programs.precompile([(64, jax.ShapeDtypeStruct((8, 64), f32)),
                                 ...])   # in threads, through the
                                         # persistent compilation cache
  out = programs(64, x)                  # runs the program of x's shape

Each call is keyed by its static arguments and each array argument's shape,
dtype, weak type and placement (where a committed array's shards lie,
`placement`: a program runs only on the devices and shardings it was
compiled for), but for `fixed_argnums`: arguments whose layout never
changes between one caller's calls (a model's weights, a preallocated
cache), left out of the key so that a call does not walk their trees; the
caller passes a `layout` instead, any hashable value that stands for them
(`layout_of` their shapes, dtypes and placements), computed once. A
call whose program was not compiled at start-up is compiled then and
counted (`late`), or, with `strict=True`, refused with a `ShapeError`
naming the program and the shape (or, when only the placement differs,
the argument and both shardings), before anything runs. A fixed argument
that moved although its layout promised not to is caught the same way:
JAX's own mismatch error never reaches the caller.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from typing import Any, Callable, Iterable, Sequence

import jax
import numpy as np


class ShapeError(RuntimeError):
  """A call needs a program outside the set compiled at start-up."""


_PLACEMENTS: dict[tuple, tuple] = {}


def placement(x: Any) -> tuple | None:
  """Where a committed array's (or a ShapeDtypeStruct's given sharding's)
  shards lie: per device id, the index of its shard, so shardings that
  place the same data on the same devices (a one-device mesh and the device
  itself) are one placement. None for an uncommitted array, a NumPy array
  or a Python scalar: JAX puts those where the program wants them."""
  sharding = getattr(x, "sharding", None)
  if sharding is None or not getattr(x, "committed", True):
    return None
  shape = tuple(x.shape)
  found = _PLACEMENTS.get((sharding, shape))
  if found is None:
    found = tuple(sorted(
        (d.id, tuple((i.start, i.stop, i.step) for i in index))
        for d, index in sharding.devices_indices_map(shape).items()))
    _PLACEMENTS[(sharding, shape)] = found
  return found


def _leaf_key(x: Any) -> tuple:
  if isinstance(x, (jax.ShapeDtypeStruct, jax.Array)):
    # str(): a PRNG key's dtype (key<fry>) is no numpy dtype.
    return (tuple(x.shape), str(x.dtype),
            bool(getattr(x, "weak_type", False)), placement(x))
  if isinstance(x, (bool, int, float)) and not isinstance(x, np.generic):
    return ((), type(x).__name__, True, None)  # Python scalar: weakly typed.
  x = np.asarray(x)
  return (x.shape, x.dtype.name, False, None)


def layout_of(tree: Any) -> tuple:
  """A hashable signature of a tree of arrays: structure, and each leaf's
  shape, dtype and placement (a program compiled for one layout runs any
  arrays of it)."""
  leaves, structure = jax.tree.flatten(tree)
  return structure, tuple(_leaf_key(x) for x in leaves)


def _is_sharding_mismatch(error: ValueError) -> bool:
  """JAX's refusal of committed arguments placed otherwise than the
  compiled program expects (raised before anything runs or is donated)."""
  return "compiled for input sharding" in str(error)


class Programs:
  """The compiled programs of `jitted`, one per call shape (see module
  docstring). `arg_names`: a name for each positional argument (static
  ones included), for errors."""

  def __init__(self, name: str, jitted: Callable[..., Any], *,
               static_argnums: Sequence[int] = (),
               fixed_argnums: Sequence[int] = (), strict: bool = False,
               arg_names: Sequence[str] = ()):
    self.name = name
    self._jitted = jitted
    self._static = tuple(static_argnums)
    self._fixed = tuple(fixed_argnums)
    self._arg_names = tuple(arg_names)
    self.strict = strict
    self._compiled: dict[tuple, Any] = {}
    self._lock = threading.Lock()
    self.late = 0  # Programs compiled by a call, after `precompile`.

  def key(self, args: Sequence[Any], layout: Any = None) -> tuple:
    """The program a call with `args` runs: static values, array shapes,
    dtypes and placements (`layout` standing for the fixed arguments)."""
    static = tuple(args[i] for i in self._static)
    dynamic = [a for i, a in enumerate(args)
               if i not in self._static and i not in self._fixed]
    leaves, tree = jax.tree.flatten(dynamic)
    return static, tree, tuple(_leaf_key(x) for x in leaves), layout

  def _dynamic(self, args: Sequence[Any]) -> list[Any]:
    return [a for i, a in enumerate(args) if i not in self._static]

  def _compile(self, args: Sequence[Any], layout: Any) -> Any:
    compiled = self._jitted.lower(*args).compile()
    with self._lock:
      return self._compiled.setdefault(self.key(args, layout), compiled)

  def precompile(self, calls: Iterable[Sequence[Any]], *, layout: Any = None,
                 threads: int = 4) -> float:
    """Compiles the program of every call (arrays as ShapeDtypeStructs,
    with the shardings the calls' arrays will have, or arrays; static
    arguments as values), `threads` at a time; the seconds taken."""
    start = time.perf_counter()
    todo = {}
    for call in map(tuple, calls):
      key = self.key(call, layout)
      if key not in self._compiled:
        todo.setdefault(key, call)
    with concurrent.futures.ThreadPoolExecutor(max(1, threads)) as pool:
      list(pool.map(lambda c: self._compile(c, layout), todo.values()))
    return time.perf_counter() - start

  @property
  def jitted(self) -> Callable[..., Any]:
    """The jitted function (e.g. to lower it for a memory analysis)."""
    return self._jitted

  def out_info(self, args: Sequence[Any], layout: Any = None) -> Any:
    """The outputs (shape, dtype, sharding: `jax.ShapeDtypeStruct`s) of the
    compiled program of `args`."""
    return self._compiled[self.key(tuple(args), layout)].out_info

  @property
  def count(self) -> int:
    """Programs compiled so far."""
    return len(self._compiled)

  def shapes(self) -> list[tuple]:
    """The keys of the compiled programs (for logs and errors)."""
    return list(self._compiled)

  def has(self, args: Sequence[Any], layout: Any = None) -> bool:
    """Whether the program of a call with `args` is compiled."""
    return self.key(tuple(args), layout) in self._compiled

  def __call__(self, *args: Any) -> Any:
    return self.run(args, strict=self.strict)

  def run(self, args: Sequence[Any], *, strict: bool,
          layout: Any = None) -> Any:
    """Runs the program of `args`; `strict` refuses one not compiled."""
    key = self.key(args, layout)
    compiled = self._compiled.get(key)
    if compiled is None:
      if strict:
        raise ShapeError(self._outside(key, args))
      compiled = self._compile(args, layout)
      self.late += 1
    try:
      return compiled(*self._dynamic(args))
    except ValueError as error:
      if not _is_sharding_mismatch(error):
        raise
    # A fixed argument is placed otherwise than its `layout` promised: the
    # program of the call's own layout (refused, or compiled late).
    moved = self._misplaced(args, compiled)
    if strict:
      name, passed, wanted = moved[0]
      raise ShapeError(
          f"program {self.name!r}: argument {name} is placed as {passed}, "
          f"but the program was compiled for {wanted} "
          "(config.runtime.strict_shapes=True stops here; False compiles "
          "it now).")
    own = ("placed", layout_of([args[i] for i in self._fixed]))
    compiled = self._compiled.get(self.key(args, own))
    if compiled is None:
      compiled = self._compile(args, own)  # For these arrays as they lie.
      self.late += 1
    return compiled(*self._dynamic(args))

  # ------------------------------------------------------------- errors

  def _named_leaves(self, args: Sequence[Any]) -> list[tuple[str, Any, bool]]:
    """(name, leaf, fixed) of every array leaf of the non-static
    arguments, in the order the compiled program takes them."""
    out = []
    for i, arg in enumerate(args):
      if i in self._static:
        continue
      name = (self._arg_names[i] if i < len(self._arg_names)
              else f"#{i}")
      for path, leaf in jax.tree_util.tree_flatten_with_path(arg)[0]:
        out.append((name + jax.tree_util.keystr(path), leaf,
                    i in self._fixed))
    return out

  def _misplaced(self, args: Sequence[Any], compiled: Any
                 ) -> list[tuple[str, str, str]]:
    """(argument, its sharding, the program's) of every committed array
    argument placed otherwise than `compiled` expects."""
    wanted = jax.tree.leaves(compiled.input_shardings[0])
    out = []
    for (name, leaf, _), want in zip(self._named_leaves(args), wanted):
      if (placement(leaf) is not None and placement(
          jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=want))
          != placement(leaf)):
        out.append((name, str(leaf.sharding), str(want)))
    return out or [("(unknown)", "(see JAX)", "(see JAX)")]

  def _outside(self, key: tuple, args: Sequence[Any]) -> str:
    """Why a strict call is refused: the argument whose sharding differs
    from a compiled program of the same shapes, or the shapes."""
    static, tree, arrays, layout = key
    shapes = [a[:3] for a in arrays]
    for other, compiled in list(self._compiled.items()):
      if (other[0], other[1], other[3]) != (static, tree, layout) or (
          [a[:3] for a in other[2]] != shapes):
        continue
      leaves = [(n, x) for n, x, fixed in self._named_leaves(args)
                if not fixed]
      wanted = [w for (_, _, fixed), w in zip(
          self._named_leaves(args), jax.tree.leaves(
              compiled.input_shardings[0])) if not fixed]
      for (name, leaf), mine, theirs, want in zip(leaves, arrays, other[2],
                                                  wanted):
        if mine[3] != theirs[3]:
          passed = (str(leaf.sharding) if mine[3] is not None
                    else "uncommitted (placed by JAX)")
          return (f"program {self.name!r}: argument {name} is placed as "
                  f"{passed}, but the program of its shape was compiled "
                  f"for {want} (config.runtime.strict_shapes=True stops "
                  "here; False compiles it now).")
    return (f"program {self.name!r}: a call with static arguments {static} "
            f"and arrays {[(s, d) for s, d, _ in shapes]} (shape, dtype) is "
            f"outside the {self.count} program(s) compiled at start-up "
            "(config.runtime.strict_shapes=True stops here; False compiles "
            "it now).")
