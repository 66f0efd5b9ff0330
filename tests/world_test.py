"""The synthetic world: deterministic, answerable by following its pages,
one answer per question, disjoint splits, and a config that checks itself."""

import collections
import dataclasses
import hashlib
import itertools

import pytest

from mgrpo_jax.core.scoring import normalized_match
from mgrpo_jax.data import world as world_lib
from mgrpo_jax.data.corpus import LocalCorpus
from mgrpo_jax.data.world import (SPLITS, WorldConfig, generate_world,
                                  name_key)

SMALL = WorldConfig(num_entities=60, train_questions=40,
                    validation_questions=12, test_questions=20, seed=3)


@pytest.fixture(scope="module")
def world():
  return generate_world(SMALL)


def test_same_seed_same_world(world):
  assert generate_world(SMALL) == world


def test_generator_output_is_pinned(world):
  # A change here means cached worlds are stale: bump WORLD_VERSION (which
  # versions the tfds files) and then update this fingerprint.
  fingerprint = hashlib.sha256(
      repr((world.documents, world.splits)).encode()).hexdigest()[:16]
  assert world_lib.WORLD_VERSION == "1.0.0"
  # (207997eaf2ddd56a before SubQuestion gained `doc_id`: the same world,
  # whose repr now shows each sub-question's doc_id='' too.)
  assert fingerprint == "aa2c1c918f65fcd4"
  assert world.documents[0].text == (
      "Kralos Gifok is a person. Kralos Gifok was born in Kradre. Kralos "
      "Gifok works for Mekoth Industries. Kralos Gifok was born in the year "
      "1966.")


def test_different_seed_different_world(world):
  other = generate_world(dataclasses.replace(SMALL, seed=4))
  assert [e.name for e in other.entities] != [e.name for e in world.entities]
  assert ([t.question for t in other.splits["test"]]
          != [t.question for t in world.splits["test"]])


def test_split_sizes_ids_and_hop_shares(world):
  for split in SPLITS:
    tasks = world.splits[split]
    assert len(tasks) == SMALL.questions(split)
    assert len({t.task_id for t in tasks}) == len(tasks)
    hops = collections.Counter(t.hops for t in tasks)
    assert set(hops) == set(range(1, SMALL.max_hops + 1))
    assert max(hops.values()) - min(hops.values()) <= 1
    for task in tasks:
      assert task.source == "synthetic"
      assert task.level == f"{task.hops}-hop"


def test_splits_are_disjoint(world):
  questions = {s: {t.question for t in world.splits[s]} for s in SPLITS}
  for a, b in itertools.combinations(SPLITS, 2):
    assert not questions[a] & questions[b], (a, b)


def test_a_split_does_not_change_when_a_later_one_grows(world):
  bigger = generate_world(dataclasses.replace(SMALL, train_questions=80))
  assert bigger.splits["test"] == world.splits["test"]
  assert bigger.splits["validation"] == world.splits["validation"]


def test_sub_questions_chain_to_the_answer(world):
  for task in world.splits["train"]:
    subs = task.sub_questions
    assert len(subs) == task.hops
    assert subs[-1].answer == task.answer
    for before, after in zip(subs, subs[1:]):
      assert before.answer in after.question
    assert task.answer not in task.question


def test_every_hop_is_stated_on_the_previous_page(world):
  pages = {d.doc_id: d for d in world.documents}
  for task in world.splits["train"]:
    doc_ids = task.metadata["doc_ids"]
    assert len(set(doc_ids)) == len(doc_ids) == task.hops + 1
    assert pages[doc_ids[0]].title in task.question
    for hop, sub in enumerate(task.sub_questions):
      assert pages[doc_ids[hop]].title in sub.question
      assert pages[doc_ids[hop + 1]].title == sub.answer
      assert sub.answer in pages[doc_ids[hop]].text


def test_answers_follow_the_relations(world):
  by_doc = {e.doc_id: e for e in world.entities}
  for task in world.splits["test"]:
    entity = by_doc[task.metadata["doc_ids"][0]]
    for relation in task.metadata["relations"]:
      entity = world.entities[entity.links[relation]]
    assert entity.name == task.answer


def test_names_are_unique_under_normalized_match(world):
  names = [e.name for e in world.entities]
  for a, b in itertools.combinations(names, 2):
    assert not normalized_match(a, b), (a, b)
  suffixes = {"River", *world_lib._COMPANY_SUFFIXES}
  words = [w for n in names for w in n.split() if w not in suffixes]
  assert len(words) == len(set(words))
  assert len({name_key(n) for n in names}) == len(names)


def test_pages_are_short_and_link_every_relation(world):
  assert [d.doc_id for d in world.documents] == [
      f"w{i:04d}" for i in range(SMALL.num_entities)]
  for entity, doc in zip(world.entities, world.documents):
    assert doc.title == entity.name
    assert 60 < len(doc.text) < 400
    for target in entity.links.values():
      assert world.entities[target].name in doc.text


def test_capital_and_river_mouth_lie_in_their_country(world):
  for e in world.entities:
    if e.kind == "country":
      assert world.entities[e.links["capital"]].links["located_in"] == e.index
    if e.kind == "river":
      mouth = world.entities[e.links["mouth"]]
      assert mouth.links["located_in"] == e.links["flows_through"]


def test_search_finds_the_start_page(world):
  corpus = LocalCorpus(world.documents)
  for task in world.splits["validation"]:
    start = task.metadata["doc_ids"][0]
    hits = corpus.search(task.sub_questions[0].question, k=3)
    assert start in [h.doc_id for h in hits]


def test_task_set_holds_the_split_and_the_pages(world):
  task_set = world.task_set("validation")
  assert task_set.name == "synthetic:validation"
  assert task_set.tasks == world.splits["validation"]
  assert task_set.documents == world.documents
  with pytest.raises(ValueError, match="split='dev'.*train, validation, test"):
    world.task_set("dev")


@pytest.mark.parametrize("field, value, expected", [
    ("num_entities", 5, "an integer >= 20"),
    ("num_entities", 100.0, "an integer"),
    ("train_questions", -1, "an integer >= 0"),
    ("validation_questions", "10", "an integer"),
    ("test_questions", True, "an integer"),
    ("max_hops", 0, r"an integer in \[1, 4\]"),
    ("max_hops", 5, r"an integer in \[1, 4\]"),
    ("seed", -3, "an integer in"),
])
def test_config_rejects_bad_values(field, value, expected):
  with pytest.raises(ValueError, match=rf"WorldConfig\.{field}={value!r}: "
                     rf"expected {expected}"):
    WorldConfig(**{field: value})


def test_too_many_questions_for_the_world_is_an_error():
  config = WorldConfig(num_entities=20, train_questions=2000,
                       validation_questions=0, test_questions=0)
  with pytest.raises(ValueError, match="WorldConfig.num_entities=20: .*"
                     "1-hop questions left for the train split"):
    generate_world(config)


def test_one_hop_worlds_and_empty_splits():
  world = generate_world(WorldConfig(num_entities=20, train_questions=5,
                                     validation_questions=0,
                                     test_questions=3, max_hops=1))
  assert world.splits["validation"] == ()
  assert all(t.hops == 1 for t in world.splits["train"])


def test_generate_world_wants_a_config():
  with pytest.raises(TypeError, match="config must be a WorldConfig"):
    generate_world({"seed": 0})
