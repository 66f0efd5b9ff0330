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
dtype and weak type (shardings are the compiled program's to check), but
for `fixed_argnums`: arguments whose shapes never change between one
caller's calls (a model's weights, a preallocated cache), left out of the
key so that a call does not walk their trees; the caller passes a
`layout` instead, any hashable value that stands for them (their shapes,
dtypes and shardings, `layout_of`), computed once. A
call whose program was not compiled at start-up is compiled then and
counted (`late`), or, with `strict=True`, refused with a `ShapeError`
naming the program and the shape, before anything runs.
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


def _leaf_key(x: Any) -> tuple:
  if isinstance(x, (jax.ShapeDtypeStruct, jax.Array)):
    # str(): a PRNG key's dtype (key<fry>) is no numpy dtype.
    return (tuple(x.shape), str(x.dtype),
            bool(getattr(x, "weak_type", False)))
  if isinstance(x, (bool, int, float)) and not isinstance(x, np.generic):
    return ((), type(x).__name__, True)  # A Python scalar: weakly typed.
  x = np.asarray(x)
  return (x.shape, x.dtype.name, False)


def layout_of(tree: Any) -> tuple:
  """A hashable signature of a tree of arrays: structure, and each leaf's
  shape, dtype and sharding (a program compiled for one layout runs any
  arrays of it)."""
  leaves, structure = jax.tree.flatten(tree)
  return structure, tuple(
      (_leaf_key(x), getattr(x, "sharding", None)) for x in leaves)


class Programs:
  """The compiled programs of `jitted`, one per call shape (see module
  docstring)."""

  def __init__(self, name: str, jitted: Callable[..., Any], *,
               static_argnums: Sequence[int] = (),
               fixed_argnums: Sequence[int] = (), strict: bool = False):
    self.name = name
    self._jitted = jitted
    self._static = tuple(static_argnums)
    self._fixed = tuple(fixed_argnums)
    self.strict = strict
    self._compiled: dict[tuple, Any] = {}
    self._lock = threading.Lock()
    self.late = 0  # Programs compiled by a call, after `precompile`.

  def key(self, args: Sequence[Any], layout: Any = None) -> tuple:
    """The program a call with `args` runs: static values, array shapes
    (`layout` standing for the fixed arguments)."""
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
    """Compiles the program of every call (arrays as ShapeDtypeStructs or
    arrays, static arguments as values), `threads` at a time; the seconds
    taken."""
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
        static, _, arrays, _ = key
        raise ShapeError(
            f"program {self.name!r}: a call with static arguments {static} "
            f"and arrays {[(s, d) for s, d, _ in arrays]} (shape, dtype) is "
            f"outside the {self.count} program(s) compiled at start-up "
            "(config.runtime.strict_shapes=True stops here; False compiles "
            "it now).")
      compiled = self._compile(args, layout)
      self.late += 1
    return compiled(*self._dynamic(args))
