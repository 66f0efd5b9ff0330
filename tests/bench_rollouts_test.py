"""The rollout benchmark compares like with like: greedy, both modes write
the very same tokens on the same questions."""

from model_test_utils import tiny_config, tiny_tokenizer
from mgrpo_jax.bench import rollouts
from mgrpo_jax.models import build, save_hf_checkpoint


def test_batched_and_sequential_write_the_same_rollouts(tmp_path,
                                                        monkeypatch):
  monkeypatch.setenv("MGRPO_JAX_CACHE", str(tmp_path / "cache"))
  model = build.init_model(tiny_config(max_position_embeddings=2048), seed=0)
  save_hf_checkpoint(model, tiny_tokenizer(), tmp_path / "model")
  result = rollouts.compare(
      model=str(tmp_path / "model"), questions=2, rollouts=2,
      max_new_tokens=8, turns=2, warmup=False,
      world={"num_entities": 40, "train_questions": 2,
             "validation_questions": 2, "test_questions": 2})
  batched, sequential = result["outputs"]
  assert result["batched"]["rows"] == 4 and result["sequential"]["rows"] == 1
  for row_b, row_s in zip(batched, sequential):
    for a, b in zip(row_b, row_s):
      assert a.main.tokens.tolist() == b.main.tokens.tolist()
      assert [s.tokens.tolist() for s in a.subs] == [
          s.tokens.tolist() for s in b.subs]
  assert result["batched"]["generated_tokens"] == result["sequential"][
      "generated_tokens"] > 0
  assert result["speedup"] > 0
  for mode in ("batched", "sequential"):
    e, r = result[mode]["engine"], result[mode]
    # The engines' steps ran inside the timed run, and padding only adds.
    assert 0 < e["prefill_seconds"] + e["copy_seconds"] + e[
        "decode_seconds"] <= r["seconds"]
    assert 0 < e["prefilled_tokens"] <= e["prefill_slots"]
    assert e["decoded_rows"] > 0
  # One row at a time never pads rows nor shares a prompt between rows;
  # batched decode reads the system prompt once for all rows (cascade),
  # and still writes the same tokens (above).
  assert result["sequential"]["engine"]["copy_seconds"] == 0
  assert result["sequential"]["engine"]["cascade_chunks"] == 0
  assert result["batched"]["engine"]["cascade_chunks"] > 0
  assert (result["batched"]["engine"]["prefilled_tokens"]
          < result["sequential"]["engine"]["prefilled_tokens"])
