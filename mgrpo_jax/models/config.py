"""Decoder configuration for the Llama / Qwen2 / Qwen3 / Qwen3-MoE family.

Shape letters used across models/: B batch, T time, S cache slots, D model
width, F MLP width, V vocab, L layers, H query heads, G key/value heads,
Dh head width; E experts, K experts per token, Fe an expert's MLP width.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

FAMILIES = ("llama", "qwen2", "qwen3", "qwen3_moe")
MOE_FAMILIES = ("qwen3_moe",)
# config.json fields of MoE variants this decoder does not implement, and
# the value that means "not used".
_UNSUPPORTED_MOE = {"mlp_only_layers": [], "decoder_sparse_step": 1,
                    "shared_expert_intermediate_size": 0,
                    "num_shared_experts": 0, "n_shared_experts": 0}


class ModelConfigError(ValueError):
  """A checkpoint's config.json (or a given config) is unusable."""


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """Hyper-parameters of one decoder (fields mirror Hugging Face names)."""

  family: str  # "llama" (incl. SmolLM2), "qwen2" (q/k/v bias), "qwen3" (q/k norm).
  vocab_size: int  # V.
  hidden_size: int  # D.
  intermediate_size: int  # F, SwiGLU width.
  num_layers: int  # L.
  num_heads: int  # H query heads.
  num_kv_heads: int  # G key/value heads (GQA when G < H).
  head_dim: int  # Dh; Qwen3 sets it independently of D / H.
  rope_theta: float  # RoPE base, read from the checkpoint (SmolLM2: 100000).
  rms_norm_eps: float  # RMSNorm epsilon.
  tie_word_embeddings: bool  # lm_head shares the embedding matrix.
  attention_bias: bool = False  # Bias on q/k/v projections (Qwen2).
  qk_norm: bool = False  # RMSNorm on each head of q and k (Qwen3).
  # Llama-3 RoPE scaling: (factor, low_freq_factor, high_freq_factor,
  # original_max_position_embeddings), or None for plain RoPE.
  rope_llama3: tuple[float, float, float, int] | None = None
  max_position_embeddings: int = 8192  # Longest position the model was trained on.
  # Mixture of experts (family "qwen3_moe"; 0 for dense models): every
  # layer's MLP is E SwiGLU experts of width Fe, K of them per token.
  num_experts: int = 0  # E.
  experts_per_token: int = 0  # K.
  moe_intermediate_size: int = 0  # Fe.
  norm_topk_prob: bool = False  # Renormalise the K router weights to sum 1.

  def __post_init__(self):
    if self.family not in FAMILIES:
      raise ModelConfigError(f"ModelConfig.family={self.family!r}: expected "
                             f"one of {list(FAMILIES)}.")
    for name in ("vocab_size", "hidden_size", "intermediate_size",
                 "num_layers", "num_heads", "num_kv_heads", "head_dim"):
      value = getattr(self, name)
      if not isinstance(value, int) or value < 1:
        raise ModelConfigError(f"ModelConfig.{name}={value!r}: expected a "
                               "positive integer.")
    if self.num_heads % self.num_kv_heads:
      raise ModelConfigError(
          f"ModelConfig.num_heads={self.num_heads} is not a multiple of "
          f"num_kv_heads={self.num_kv_heads} (grouped-query attention needs "
          "each key/value head to serve the same number of query heads).")
    moe = (self.num_experts, self.experts_per_token,
           self.moe_intermediate_size)
    if self.family in MOE_FAMILIES:
      if not all(isinstance(v, int) and v >= 1 for v in moe) or (
          self.experts_per_token > self.num_experts):
        raise ModelConfigError(
            f"ModelConfig family={self.family!r}: num_experts="
            f"{self.num_experts}, experts_per_token={self.experts_per_token}"
            f", moe_intermediate_size={self.moe_intermediate_size}: expected "
            "positive integers with experts_per_token <= num_experts.")
    elif any(moe):
      raise ModelConfigError(
          f"ModelConfig family={self.family!r} is dense: num_experts, "
          "experts_per_token and moe_intermediate_size must be 0 (family "
          f"'qwen3_moe' has experts), got {moe}.")
    if self.head_dim % 2:
      raise ModelConfigError(f"ModelConfig.head_dim={self.head_dim}: RoPE "
                             "needs an even head width.")

  @property
  def num_params(self) -> int:
    """Number of parameters (the tied embedding counted once)."""
    d, f, h, g, dh = (self.hidden_size, self.intermediate_size,
                      self.num_heads, self.num_kv_heads, self.head_dim)
    attn = d * h * dh * 2 + d * g * dh * 2
    if self.attention_bias:
      attn += h * dh + 2 * g * dh
    if self.qk_norm:
      attn += 2 * dh
    mlp = (d * self.num_experts + 3 * self.num_experts * d
           * self.moe_intermediate_size) if self.num_experts else 3 * d * f
    layer = attn + mlp + 2 * d
    embed = self.vocab_size * d * (1 if self.tie_word_embeddings else 2)
    return self.num_layers * layer + embed + d

  @classmethod
  def from_hf(cls, hf: Mapping[str, Any], *, source: str = "config.json"
              ) -> "ModelConfig":
    """Reads a Hugging Face config dict (Llama, Qwen2, Qwen3, Qwen3-MoE
    model types)."""
    model_type = hf.get("model_type")
    if model_type not in FAMILIES:
      raise ModelConfigError(
          f"{source}: model_type={model_type!r} is not supported; expected "
          f"one of {list(FAMILIES)} (Llama-family such as SmolLM2, Qwen2/2.5, "
          "Qwen3, Qwen3-MoE).")

    def need(key):
      if key not in hf:
        raise ModelConfigError(f"{source}: missing field {key!r} needed for "
                               f"model_type={model_type!r}.")
      return hf[key]

    if hf.get("mlp_bias"):
      raise ModelConfigError(f"{source}: mlp_bias=true is not supported.")
    rope = dict(hf.get("rope_parameters") or {})
    scaling = hf.get("rope_scaling") or rope
    theta = hf.get("rope_theta", rope.get("rope_theta"))
    if theta is None:
      raise ModelConfigError(f"{source}: no rope_theta (nor "
                             "rope_parameters.rope_theta).")
    rope_type = scaling.get("rope_type", scaling.get("type", "default"))
    rope_llama3 = None
    if rope_type == "llama3":
      rope_llama3 = (float(scaling["factor"]),
                     float(scaling["low_freq_factor"]),
                     float(scaling["high_freq_factor"]),
                     int(scaling["original_max_position_embeddings"]))
    elif rope_type not in ("default", None):
      raise ModelConfigError(f"{source}: rope type {rope_type!r} is not "
                             "supported; expected 'default' or 'llama3'.")
    moe = {}
    if model_type in MOE_FAMILIES:
      for field, unused in _UNSUPPORTED_MOE.items():
        if field in hf and hf[field] not in (unused, None):
          raise ModelConfigError(
              f"{source}: {field}={hf[field]!r} is not supported (every "
              f"layer sparse, no shared experts: expected {unused!r}).")
      experts = hf.get("num_experts", hf.get("num_local_experts"))
      if experts is None:
        raise ModelConfigError(f"{source}: missing field 'num_experts' (or "
                               "'num_local_experts') needed for model_type="
                               f"{model_type!r}.")
      moe = dict(num_experts=experts,
                 experts_per_token=need("num_experts_per_tok"),
                 moe_intermediate_size=need("moe_intermediate_size"),
                 norm_topk_prob=bool(hf.get("norm_topk_prob", False)))
    num_heads = need("num_attention_heads")
    hidden = need("hidden_size")
    return cls(
        family=model_type,
        vocab_size=need("vocab_size"),
        hidden_size=hidden,
        intermediate_size=need("intermediate_size"),
        num_layers=need("num_hidden_layers"),
        num_heads=num_heads,
        num_kv_heads=hf.get("num_key_value_heads") or num_heads,
        head_dim=hf.get("head_dim") or hidden // num_heads,
        rope_theta=float(theta),
        rms_norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
        tie_word_embeddings=bool(hf.get("tie_word_embeddings", False)),
        attention_bias=(True if model_type == "qwen2"
                        else bool(hf.get("attention_bias", False))),
        qk_norm=model_type in ("qwen3", "qwen3_moe"),
        rope_llama3=rope_llama3,
        max_position_embeddings=int(hf.get("max_position_embeddings", 8192)),
        **moe,
    )

  def to_hf(self) -> dict[str, Any]:
    """A Hugging Face config dict that `from_hf` and transformers both read."""
    arch = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM",
            "qwen3": "Qwen3ForCausalLM",
            "qwen3_moe": "Qwen3MoeForCausalLM"}[self.family]
    out: dict[str, Any] = {
        "architectures": [arch],
        "model_type": self.family,
        "vocab_size": self.vocab_size,
        "hidden_size": self.hidden_size,
        "intermediate_size": self.intermediate_size,
        "num_hidden_layers": self.num_layers,
        "num_attention_heads": self.num_heads,
        "num_key_value_heads": self.num_kv_heads,
        "head_dim": self.head_dim,
        "rope_theta": self.rope_theta,
        "rms_norm_eps": self.rms_norm_eps,
        "tie_word_embeddings": self.tie_word_embeddings,
        "max_position_embeddings": self.max_position_embeddings,
        "hidden_act": "silu",
    }
    if self.family in ("llama", "qwen3", "qwen3_moe"):
      out["attention_bias"] = self.attention_bias
    if self.num_experts:
      out.update(num_experts=self.num_experts,
                 num_local_experts=self.num_experts,
                 num_experts_per_tok=self.experts_per_token,
                 moe_intermediate_size=self.moe_intermediate_size,
                 norm_topk_prob=self.norm_topk_prob, decoder_sparse_step=1,
                 mlp_only_layers=[])
    if self.rope_llama3 is not None:
      factor, low, high, original = self.rope_llama3
      out["rope_scaling"] = {"rope_type": "llama3", "factor": factor,
                             "low_freq_factor": low,
                             "high_freq_factor": high,
                             "original_max_position_embeddings": original}
    return out
