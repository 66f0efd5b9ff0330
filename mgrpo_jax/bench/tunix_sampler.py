"""Google's Tunix sampler as a third column of the sampler benchmark.

Tunix (PyPI `google-tunix`, pinned to 0.1.7) is a JAX-native LLM
post-training framework; its `tunix.generate.sampler.Sampler` is the rollout
engine of its GRPO learner. `mgrpo_jax.bench.speed` runs it on the same
SmolLM2-135M-Instruct weights (float32, Tunix's own llama3 model loading our
converted Hugging Face directory) and the same random prompts as the other
columns. Three workarounds, all local to this module:

- Install with `pip install --no-deps` plus jaxtyping, wadler-lindig and
  sentencepiece (launch/bench_speed.sh): the wheel's declared dependencies
  would downgrade transformers and safetensors, and the two modules used here
  need only those.
- `tunix/__init__.py` imports Tunix's whole RL stack (orbax, grain, qwix,
  metrax, ...). A bare package object named `tunix`, whose `__path__` is the
  installed package directory, goes into `sys.modules` first, so importing
  `tunix.generate.sampler` and `tunix.models.llama3` skips that file. A later
  `import tunix` in the same process gets that bare object.
- In 0.1.7, llama3 `Attention.block` calls `apply_rope` without the
  configured `rope_theta`, so RoPE always uses the default 1e6; SmolLM2 needs
  1e5. Every sampler call runs with the model module's `apply_rope` bound to
  the checkpoint's theta (put back afterwards); jit traces inside the call,
  so the compiled programs carry the right theta. The test checks that
  greedy tokens then equal transformers'.

Importing Tunix's model module also sets flax's `flax_always_shard_variable`
to False process-wide; it is put back after the import. `load` builds
Tunix's model with the flag off (as Tunix expects: with it on, flax asks for
a mesh) and then puts it back.

Shapes: B batch (prompts), P prompt tokens, N new tokens.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib.machinery
import importlib.metadata
import importlib.util
import json
import pathlib
import statistics
import sys
import time
import types
from typing import Any

import flax
import numpy as np

VERSION = "0.1.7"  # the google-tunix release these workarounds are written for
_INSTALL_HINT = "bash launch/bench_speed.sh installs it"
_NO_TOKEN = -1  # pad and EOS id: never a vocabulary id, see _IdTokenizer
_SHARD_FLAG = "flax_always_shard_variable"


def _import_tunix() -> tuple[types.ModuleType, types.ModuleType,
                             types.ModuleType]:
  """Tunix's sampler, llama3 model and llama3 params modules, imported
  without running `tunix/__init__.py`. Raises ImportError if absent."""
  if "tunix" not in sys.modules:
    spec = importlib.util.find_spec("tunix")  # does not execute the package
    if spec is None or not spec.submodule_search_locations:
      raise ImportError(f"google-tunix is not installed: {_INSTALL_HINT}")
    package = types.ModuleType("tunix")
    package.__path__ = list(spec.submodule_search_locations)
    package.__spec__ = importlib.machinery.ModuleSpec(
        "tunix", None, is_package=True)  # no loader: nothing to execute
    package.__spec__.submodule_search_locations = package.__path__
    sys.modules["tunix"] = package
  shard_flag = getattr(flax.config, _SHARD_FLAG, None)
  try:
    # pylint: disable=import-outside-toplevel
    from tunix.generate import sampler as sampler_lib
    from tunix.models.llama3 import model as model_lib
    from tunix.models.llama3 import params as params_lib
  finally:
    if shard_flag is not None:
      flax.config.update(_SHARD_FLAG, shard_flag)
  return sampler_lib, model_lib, params_lib


def available() -> str | None:
  """None if Tunix's sampler can be used here, else a one-line reason."""
  try:
    found = importlib.metadata.version("google-tunix")
  except importlib.metadata.PackageNotFoundError:
    found = None
  if importlib.util.find_spec("tunix") is None or found is None:
    return f"google-tunix is not installed: {_INSTALL_HINT}"
  if found != VERSION:
    return (f"google-tunix version is {found}, expected {VERSION} (the "
            f"rope-theta workaround is written for it): {_INSTALL_HINT}")
  try:
    _import_tunix()
  except ImportError as e:
    first_line = str(e).splitlines()[0] if str(e) else type(e).__name__
    return f"google-tunix {VERSION} does not import ({first_line}): " \
           f"{_INSTALL_HINT}"
  return None


class _IdTokenizer:
  """Tunix's sampler takes strings; ours are token ids written as decimal
  numbers separated by spaces. No BOS is added. Pad and EOS are -1, which
  no generated token equals: Tunix stops a row at EOS and masks pad tokens
  out of attention, so with a real id (SmolLM2's 2) rows could stop early or
  lose context. Outputs are not detokenized (decode returns "")."""

  def encode(self, text: str) -> list[int]:
    return [int(t) for t in text.split()]

  def decode(self, ids: list[int]) -> str:
    del ids
    return ""

  def bos_id(self) -> None:
    return None

  def eos_id(self) -> int:
    return _NO_TOKEN

  def pad_id(self) -> int:
    return _NO_TOKEN


@dataclasses.dataclass
class Handle:
  """A Tunix llama3 model and its samplers, one per KV-cache length."""
  model: Any  # tunix.models.llama3.model.Llama3
  config: Any  # tunix.models.llama3.model.ModelConfig
  rope_theta: float  # what RoPE uses in every call (the checkpoint's)
  samplers: dict[int, Any] = dataclasses.field(default_factory=dict)

  def sampler(self, cache_size: int):
    """The Tunix Sampler with a KV cache of `cache_size` positions."""
    if cache_size not in self.samplers:
      sampler_lib, _, _ = _import_tunix()
      self.samplers[cache_size] = sampler_lib.Sampler(
          self.model, _IdTokenizer(), sampler_lib.CacheConfig(
              cache_size=cache_size, num_layers=self.config.num_layers,
              num_kv_heads=self.config.num_kv_heads,
              head_dim=self.config.head_dim))
    return self.samplers[cache_size]


def _model_config(model_lib, hf_config: dict[str, Any]):
  """Tunix's llama3 ModelConfig for a Hugging Face Llama config.json."""
  expected = {"model_type": "llama", "hidden_act": "silu",
              "attention_bias": False, "mlp_bias": False}
  for field, want in expected.items():
    got = hf_config.get(field, want)
    if got != want:
      raise ValueError(f"config.json field {field} is {got!r}, expected "
                       f"{want!r} (Tunix's llama3 model has no other)")
  heads = hf_config["num_attention_heads"]
  return model_lib.ModelConfig(
      num_layers=hf_config["num_hidden_layers"],
      vocab_size=hf_config["vocab_size"],
      embed_dim=hf_config["hidden_size"],
      hidden_dim=hf_config["intermediate_size"],
      num_heads=heads,
      head_dim=hf_config.get("head_dim", hf_config["hidden_size"] // heads),
      num_kv_heads=hf_config.get("num_key_value_heads", heads),
      rope_theta=hf_config["rope_theta"],
      norm_eps=hf_config["rms_norm_eps"],
      shd_config=model_lib.ShardingConfig.get_default_sharding(
          is_sampling=True),
      weight_tying=hf_config.get("tie_word_embeddings", False))


def load(hf_dir: str | pathlib.Path, *, rope_theta: float | None = None
         ) -> Handle:
  """Tunix's llama3 model (float32) from a Hugging Face directory holding
  config.json and *.safetensors, ready for `generate`.

  rope_theta: what RoPE uses; None (the default) means config.json's value.
  Only a test passes another (Tunix 0.1.7's silent default 1e6, to check
  that the workaround changes the tokens).
  """
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel

  reason = available()
  if reason is not None:
    raise ImportError(reason)
  _, model_lib, params_lib = _import_tunix()
  hf_dir = pathlib.Path(hf_dir)
  config_path = hf_dir / "config.json"
  if not config_path.is_file():
    raise FileNotFoundError(f"hf_dir {hf_dir} has no config.json; expected "
                            "a Hugging Face Llama checkpoint directory")
  hf_config = json.loads(config_path.read_text())
  config = _model_config(model_lib, hf_config)
  shard_flag = getattr(flax.config, _SHARD_FLAG, None)
  if shard_flag is not None:
    flax.config.update(_SHARD_FLAG, False)  # as Tunix sets it on import
  try:
    model = params_lib.create_model_from_safe_tensors(
        str(hf_dir), config, dtype=jnp.float32)
  finally:
    if shard_flag is not None:
      flax.config.update(_SHARD_FLAG, shard_flag)
  theta = float(config.rope_theta if rope_theta is None else rope_theta)
  return Handle(model=model, config=config, rope_theta=theta)


@contextlib.contextmanager
def _rope_theta(theta: float):
  """Binds Tunix llama3's module-level apply_rope to `theta` meanwhile."""
  _, model_lib, _ = _import_tunix()
  original = model_lib.apply_rope
  model_lib.apply_rope = functools.partial(original, rope_theta=theta)
  try:
    yield
  finally:
    model_lib.apply_rope = original


def generate(handle: Handle, prompts: list[list[int]], new_tokens: int, *,
             greedy: bool, seed: int) -> np.ndarray:
  """Generated ids [B, N] for B prompts of P ids each, by Tunix's Sampler.

  Exactly `new_tokens` per row: Tunix stops a row at an EOS id and the whole
  batch once every row has stopped; the EOS id here is -1, which it never
  samples, so no row stops early. greedy: argmax (Tunix's "greedy" mode);
  else temperature 1 over the full vocabulary (its "top_p" mode with
  top_p=1 and no top-k, which samples from the untruncated softmax). seed:
  the sampling key (`jax.random.PRNGKey(seed)`), unused when greedy.
  """
  if not prompts:
    raise ValueError("prompts is empty; expected at least one prompt")
  lengths = sorted({len(p) for p in prompts})
  if len(lengths) != 1 or lengths[0] < 1:
    raise ValueError(f"prompt lengths are {lengths}; expected one length "
                     ">= 1 shared by every prompt")
  if new_tokens < 1:
    raise ValueError(f"new_tokens is {new_tokens}; expected >= 1")
  prompt_len = lengths[0]
  sampler = handle.sampler(prompt_len + new_tokens)
  texts = [" ".join(map(str, p)) for p in prompts]
  sampling = ({} if greedy else
              {"temperature": 1.0, "top_p": 1.0, "top_k": None})
  with _rope_theta(handle.rope_theta):
    out = sampler(texts, max_generation_steps=new_tokens,
                  max_prompt_length=prompt_len, echo=False, seed=seed,
                  **sampling)
  tokens_BxN = np.stack([np.asarray(t) for t in out.tokens])
  if tokens_BxN.shape != (len(prompts), new_tokens):
    raise RuntimeError(f"Tunix returned tokens of shape {tokens_BxN.shape}; "
                       f"expected {(len(prompts), new_tokens)}")
  return tokens_BxN


def tokens_per_second(handle: Handle, prompts: list[list[int]],
                      new_tokens: int, repeats: int) -> dict[str, float]:
  """Sampling speed at temperature 1, no top-k / top-p, like speed.py's
  other columns: the first call (compilation included) is `warmup_seconds`;
  `seconds` is the median of `repeats` later calls; tokens_per_second is
  B * N / seconds."""
  if repeats < 1:
    raise ValueError(f"repeats is {repeats}; expected >= 1")
  start = time.perf_counter()
  generate(handle, prompts, new_tokens, greedy=False, seed=0)  # compiles
  warmup = time.perf_counter() - start
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    generate(handle, prompts, new_tokens, greedy=False, seed=1)
    times.append(time.perf_counter() - start)
  seconds = statistics.median(times)
  return {"seconds": seconds, "warmup_seconds": warmup,
          "tokens_per_second": len(prompts) * new_tokens / seconds}
