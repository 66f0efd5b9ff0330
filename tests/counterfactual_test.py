"""The reader's check (data/counterfactual.py, train/reading.py): over pages
whose last-hop fact changed, a scripted reader follows the page and a
scripted memoriser gives the old answer."""

import ml_collections
import pytest

from mgrpo_jax.agents import demonstrations
from mgrpo_jax.agents import tiny_team
from mgrpo_jax.agents.oracle import Knowledge
from mgrpo_jax.agents.team import agents_config
from mgrpo_jax.core.rewards import reward_weights
from mgrpo_jax.data.counterfactual import counterfactual
from mgrpo_jax.data.facts import hop_facts
from mgrpo_jax.data.novelty import NOBODY
from mgrpo_jax.data.world import WorldConfig, generate_world
from mgrpo_jax.models import tiny as tiny_model
from mgrpo_jax.train import shards as shards_lib
from mgrpo_jax.train.reading import Reading

WORLD = WorldConfig(num_entities=60, train_questions=8,
                    validation_questions=24, test_questions=0, max_hops=2)


@pytest.fixture(scope="module")
def world():
  return generate_world(WORLD)


@pytest.fixture(scope="module")
def tok(world):
  return tiny_model.train_tokenizer(tiny_team.tokenizer_texts(world), 512)


def test_the_changed_pages_state_the_new_answer(world):
  tasks = world.splits["validation"]
  changed, documents = counterfactual(world, tasks, seed=0)
  assert len(changed) >= len(tasks) // 2
  pages = "\n".join(d.text for d in documents)
  old_pages = "\n".join(d.text for d in world.documents)
  by_id = {t.task_id: t for t in tasks}
  for task in changed:
    old = by_id[task.task_id]
    assert task.question == old.question  # Same question, new answer.
    assert task.answer != old.answer == task.metadata["original_answer"]
    # Every hop's fact is on the new pages, one of them only there (the
    # question's own last hop, or an earlier hop another question's change
    # moved); the old chain no longer holds.
    facts = hop_facts(task.sub_questions)
    assert all(f in pages for f in facts)
    assert any(f not in old_pages for f in facts)
    assert not all(f in pages for f in hop_facts(old.sub_questions))
  # Same seed, same change.
  assert counterfactual(world, tasks, seed=0)[0] == changed
  assert counterfactual(world, tasks, seed=1)[0] != changed


def reading(world, tok, reads: bool, count: int = 16):
  """A `Reading` whose team is the oracle: a scripted reader (answers
  what the visited page states) or memoriser (the world it was built on)."""
  agents = agents_config()
  agents.snippet_chars = 60
  for side in ("main", "sub"):
    agents[side].context_tokens = 2048
  taskset = world.task_set("validation")
  controller = demonstrations.oracle_team(
      taskset, tok, agents, knowledge=Knowledge(taskset, reads=reads))
  config = ml_collections.ConfigDict({
      "train": {"counterfactual_questions": count},
      "world": WORLD.__dict__, "seed": 0})
  return Reading(config, NOBODY, world.splits["validation"], controller,
                 tok, agents)


def test_a_reader_follows_the_page_and_a_memoriser_does_not(world, tok):
  weights = reward_weights("mgrpo")
  reader = reading(world, tok, reads=True).evaluate(weights, shards_lib.ONE)
  memoriser = reading(world, tok, reads=False).evaluate(weights,
                                                        shards_lib.ONE)
  assert reader["eval/counterfactual_questions"] >= 8
  assert reader["eval/counterfactual_follows"] == 1.0
  assert reader["eval/counterfactual_recalls"] == 0.0
  assert memoriser["eval/counterfactual_follows"] == 0.0
  assert memoriser["eval/counterfactual_recalls"] == 1.0


def test_no_check_without_questions(world, tok):
  assert reading(world, tok, reads=True, count=0).evaluate(
      {}, shards_lib.ONE) == {}
