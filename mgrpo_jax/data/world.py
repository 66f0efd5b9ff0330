"""A seeded synthetic multi-hop world: invented entities, a page for each, and
questions that follow chains of relations between them.

Names are built from random syllables, so a pretrained model cannot know the
answers: it must search the world's pages and follow the links they carry.
Every relation is a function (an entity has exactly one target per relation
of its kind), so a chain of relations from a named start entity has exactly
one answer; chains that revisit an entity are never asked. A question of h
hops comes with h sub-questions, one per relation, each naming the entity the
previous one answered.

The same `WorldConfig` (seed included) always yields the same world: entities
are drawn from `seed`, the questions of each split from their own stream, in
the order test, validation, train, so a split's questions do not change when
a later split grows. The splits never share a question.
"""

from __future__ import annotations

import dataclasses
import string
from typing import Mapping

import numpy as np

from mgrpo_jax.data.corpus import Document
from mgrpo_jax.data.task import SubQuestion, Task, TaskSet

# Bump when the same config would generate a different world; the tfds cache
# (data/world_builder.py) is versioned by it.
WORLD_VERSION = "1.0.0"
SPLITS = ("train", "validation", "test")
SOURCE = "synthetic"
MAX_HOPS = 4
MIN_ENTITIES = 20

KINDS = ("country", "city", "person", "company", "river")
# Share of the entities of each kind (people take the remainder).
_KIND_SHARE = {"country": 0.08, "city": 0.24, "company": 0.20, "river": 0.12}
_MIN_PER_KIND = 2


@dataclasses.dataclass(frozen=True)
class Relation:
  """A function from entities of one kind to entities of another."""
  name: str
  source: str  # Kind of the entity whose page states the fact.
  target: str  # Kind of the entity it points to.
  fact: str  # Sentence on the source's page: "{s} was born in {t}."
  phrase: str  # Noun phrase for the target: "the birthplace of {x}".
  question: str  # Question asking for the target: "In which city was {x} born?"


RELATIONS: tuple[Relation, ...] = (
    Relation("born_in", "person", "city", "{s} was born in {t}.",
             "the birthplace of {x}", "In which city was {x} born?"),
    Relation("works_for", "person", "company", "{s} works for {t}.",
             "the employer of {x}", "Which company does {x} work for?"),
    Relation("located_in", "city", "country", "{s} is located in {t}.",
             "the country where {x} is located",
             "In which country is {x} located?"),
    Relation("capital", "country", "city", "The capital of {s} is {t}.",
             "the capital of {x}", "What is the capital of {x}?"),
    Relation("president", "country", "person", "The president of {s} is {t}.",
             "the president of {x}", "Who is the president of {x}?"),
    Relation("founded_by", "company", "person", "{s} was founded by {t}.",
             "the founder of {x}", "Who founded {x}?"),
    Relation("headquartered_in", "company", "city",
             "{s} has its headquarters in {t}.",
             "the city where {x} has its headquarters",
             "In which city does {x} have its headquarters?"),
    Relation("flows_through", "river", "country", "{s} flows through {t}.",
             "the country that {x} flows through",
             "Which country does {x} flow through?"),
    Relation("mouth", "river", "city", "{s} reaches the sea at {t}.",
             "the city at the mouth of {x}",
             "At which city does {x} reach the sea?"),
)
_BY_NAME = {r.name: r for r in RELATIONS}
_FROM_KIND = {k: tuple(r for r in RELATIONS if r.source == k) for k in KINDS}

# A number on every page that no question asks about (a distractor).
_ATTRIBUTE = {
    "person": ("{s} was born in the year {n}.", 1900, 2000),
    "city": ("{s} has a population of {n},000 people.", 5, 900),
    "country": ("{s} has an area of {n},000 square kilometres.", 10, 900),
    "company": ("{s} was founded in the year {n}.", 1800, 2020),
    "river": ("{s} is {n} kilometres long.", 40, 3000),
}
_COMPANY_SUFFIXES = ("Industries", "Holdings", "Works", "Labs", "Trading")

_ONSETS = ("b d f g h k l m n p r s t v z br dr gr kr tr st th sh").split()
_VOWELS = ("a", "e", "i", "o", "u")
_CODAS = ("", "", "n", "r", "l", "s", "k", "th")


@dataclasses.dataclass(frozen=True)
class WorldConfig:
  """What world to generate; the same config always gives the same world."""
  num_entities: int = 1000  # Entities, one page each (>= 20).
  train_questions: int = 2000  # Questions in the train split.
  validation_questions: int = 200  # Questions in the validation split.
  test_questions: int = 500  # Questions in the test split.
  max_hops: int = 4  # Questions have 1..max_hops hops, in equal shares (<= 4).
  seed: int = 0  # Seeds the entities, their links and every split (>= 0).

  def __post_init__(self):
    _check_int("num_entities", self.num_entities, MIN_ENTITIES, None)
    for name in ("train_questions", "validation_questions", "test_questions"):
      _check_int(name, getattr(self, name), 0, None)
    _check_int("max_hops", self.max_hops, 1, MAX_HOPS)
    _check_int("seed", self.seed, 0, 2**63 - 1)

  def questions(self, split: str) -> int:
    """How many questions `split` holds."""
    return getattr(self, f"{check_split(split)}_questions")


def _check_int(field: str, value, minimum: int, maximum: int | None) -> None:
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
    raise ValueError(f"WorldConfig.{field}={value!r}: expected an integer.")
  if value < minimum or (maximum is not None and value > maximum):
    bound = (f"in [{minimum}, {maximum}]" if maximum is not None
             else f">= {minimum}")
    raise ValueError(f"WorldConfig.{field}={value!r}: expected an integer "
                     f"{bound}.")


def check_split(split: str) -> str:
  """`split` if it is one of SPLITS, else a ValueError naming them."""
  if split not in SPLITS:
    raise ValueError(f"split={split!r}: expected one of {', '.join(SPLITS)}.")
  return split


@dataclasses.dataclass(frozen=True)
class Entity:
  """One thing in the world, the page about it and where its relations lead."""
  index: int
  doc_id: str  # "w0042": the id of its page.
  name: str  # Invented; unique, and no word of it appears in another name.
  kind: str  # One of KINDS.
  links: Mapping[str, int]  # Relation name -> index of the target entity.
  attribute: int  # The distractor number on its page.


@dataclasses.dataclass(frozen=True)
class World:
  """Entities, their pages and the questions of every split."""
  config: WorldConfig
  entities: tuple[Entity, ...]
  documents: tuple[Document, ...]  # documents[i] is entities[i]'s page.
  splits: Mapping[str, tuple[Task, ...]]

  def task_set(self, split: str) -> TaskSet:
    """The questions of `split` with the whole world as their corpus."""
    return TaskSet(f"{SOURCE}:{check_split(split)}", self.splits[split],
                   self.documents)


def name_key(name: str) -> str:
  """A name as `normalized_match` compares it: lowercase, letters only."""
  return "".join(c for c in name.lower() if c not in string.whitespace
                 and c not in string.punctuation)


class _Namer:
  """Draws invented names whose words are unique across the world."""

  def __init__(self, rng: np.random.Generator):
    self._rng = rng
    self._words: set[str] = set()
    self._keys: set[str] = set()

  def _word(self, syllables: int) -> str:
    parts = [_ONSETS[self._rng.integers(len(_ONSETS))]
             + _VOWELS[self._rng.integers(len(_VOWELS))]
             for _ in range(syllables)]
    parts.append(_CODAS[self._rng.integers(len(_CODAS))])
    return "".join(parts).capitalize()

  def _fresh_word(self, syllables: int) -> str:
    while True:
      word = self._word(syllables)
      if word.lower() not in self._words:
        self._words.add(word.lower())
        return word

  def name(self, kind: str) -> str:
    while True:
      if kind == "person":
        first = self._fresh_word(2)
        name = f"{first} {self._fresh_word(int(self._rng.integers(2, 4)))}"
      elif kind == "company":
        suffix = _COMPANY_SUFFIXES[self._rng.integers(len(_COMPANY_SUFFIXES))]
        name = f"{self._fresh_word(2)} {suffix}"
      elif kind == "river":
        name = f"{self._fresh_word(int(self._rng.integers(2, 4)))} River"
      else:
        name = self._fresh_word(int(self._rng.integers(2, 4)))
      if name_key(name) not in self._keys:
        self._keys.add(name_key(name))
        return name


def _kind_counts(num_entities: int) -> dict[str, int]:
  counts = {k: max(_MIN_PER_KIND, round(share * num_entities))
            for k, share in _KIND_SHARE.items()}
  counts["person"] = num_entities - sum(counts.values())
  return counts


def _entities(config: WorldConfig) -> tuple[Entity, ...]:
  rng = np.random.default_rng([config.seed, 0])
  namer = _Namer(rng)
  counts = _kind_counts(config.num_entities)
  kinds = [k for k in KINDS for _ in range(counts[k])]
  kinds = [kinds[i] for i in rng.permutation(len(kinds))]
  of_kind = {k: [i for i, kind in enumerate(kinds) if kind == k] for k in KINDS}
  links: list[dict[str, int]] = [{} for _ in kinds]

  def pick(kind: str) -> int:
    return of_kind[kind][rng.integers(len(of_kind[kind]))]

  # Every country gets a city first, so each has a capital inside it.
  countries, cities = of_kind["country"], of_kind["city"]
  for n, city in enumerate(cities):
    links[city]["located_in"] = (countries[n] if n < len(countries)
                                 else pick("country"))
  cities_in = {c: [x for x in cities if links[x]["located_in"] == c]
               for c in countries}
  people = of_kind["person"]
  presidents = rng.choice(len(people), size=len(countries), replace=False)
  for country, president in zip(countries, presidents):
    inside = cities_in[country]
    links[country]["capital"] = inside[rng.integers(len(inside))]
    links[country]["president"] = people[president]
  for person in people:
    links[person]["born_in"] = pick("city")
    links[person]["works_for"] = pick("company")
  for company in of_kind["company"]:
    links[company]["founded_by"] = pick("person")
    links[company]["headquartered_in"] = pick("city")
  for river in of_kind["river"]:
    country = pick("country")
    inside = cities_in[country]
    links[river]["flows_through"] = country
    links[river]["mouth"] = inside[rng.integers(len(inside))]

  entities = []
  for i, kind in enumerate(kinds):
    _, low, high = _ATTRIBUTE[kind]
    entities.append(Entity(i, f"w{i:04d}", namer.name(kind), kind, links[i],
                           int(rng.integers(low, high))))
  return tuple(entities)


def _join(names: list[str]) -> str:
  return names[0] if len(names) == 1 else (
      f"{', '.join(names[:-1])} and {names[-1]}")


def _page(entity: Entity, entities: tuple[Entity, ...],
          incoming: list[tuple[str, int]]) -> Document:
  """The entity's page: its kind, a sentence per relation, a few links back
  to it (capped, to keep pages short) and the distractor number."""
  s = entity.name
  sentences = [f"{s} is a {entity.kind}."]
  for relation in _FROM_KIND[entity.kind]:
    target = entities[entity.links[relation.name]].name
    sentences.append(relation.fact.format(s=s, t=target))
  back: dict[str, list[str]] = {}
  for relation, source in incoming:
    back.setdefault(relation, []).append(entities[source].name)
  if "located_in" in back:
    sentences.append(f"Cities in {s} include {_join(back['located_in'][:3])}.")
  if "capital" in back:
    sentences.append(f"{s} is the capital of {back['capital'][0]}.")
  if "president" in back:
    sentences.append(f"{s} is the president of {back['president'][0]}.")
  if "founded_by" in back:
    sentences.append(f"{s} founded {_join(back['founded_by'][:2])}.")
  template, _, _ = _ATTRIBUTE[entity.kind]
  sentences.append(template.format(s=s, n=entity.attribute))
  return Document(entity.doc_id, entity.name, " ".join(sentences))


def documents_of(entities: tuple[Entity, ...]) -> tuple[Document, ...]:
  """Every entity's page, in entity order (back-links included)."""
  incoming: list[list[tuple[str, int]]] = [[] for _ in entities]
  for entity in entities:
    for relation, target in entity.links.items():
      incoming[target].append((relation, entity.index))
  return tuple(_page(e, entities, incoming[e.index]) for e in entities)


def _chains(entities: tuple[Entity, ...], max_hops: int
            ) -> list[list[tuple[tuple[int, ...], tuple[int, ...]]]]:
  """Every chain of 1..max_hops relations through distinct entities, as
  (entity path, relation indices); chains[h - 1] holds those of h hops."""
  index = {r.name: i for i, r in enumerate(RELATIONS)}
  shorter = [((e.index,), ()) for e in entities]
  by_hops = []
  for _ in range(max_hops):
    longer = []
    for path, relations in shorter:
      for relation in _FROM_KIND[entities[path[-1]].kind]:
        target = entities[path[-1]].links[relation.name]
        if target not in path:
          longer.append((path + (target,), relations + (index[relation.name],)))
    by_hops.append(longer)
    shorter = longer
  return by_hops


def task_of(task_id: str, path: tuple[int, ...], relation_ids: tuple[int, ...],
          entities: tuple[Entity, ...]) -> Task:
  """The question that follows `relation_ids` along `path` (entity
  indices), with its decomposition and gold answer."""
  relations = [RELATIONS[i] for i in relation_ids]
  hops = len(relations)
  subject = entities[path[0]].name
  for relation in relations[:-1]:
    subject = relation.phrase.format(x=subject)
  question = relations[-1].question.format(x=subject)
  sub_questions = tuple(
      SubQuestion(r.question.format(x=entities[path[i]].name),
                  entities[path[i + 1]].name)
      for i, r in enumerate(relations))
  metadata = {"relations": tuple(r.name for r in relations),
              "doc_ids": tuple(entities[i].doc_id for i in path)}
  return Task(task_id, question, (entities[path[-1]].name,), SOURCE,
              level=f"{hops}-hop", hops=hops, sub_questions=sub_questions,
              metadata=metadata)


def _questions(config: WorldConfig, entities: tuple[Entity, ...], split: str,
               chains: list[list], asked: list[set[int]]) -> tuple[Task, ...]:
  """The split's questions, hop counts in equal shares (the first hop counts
  get one more when they do not divide), none of them in `asked`."""
  count = config.questions(split)
  rng = np.random.default_rng([config.seed, 1 + SPLITS.index(split)])
  picked = []
  for hops in range(1, config.max_hops + 1):
    need = count // config.max_hops + int(hops <= count % config.max_hops)
    free = [i for i in range(len(chains[hops - 1]))
            if i not in asked[hops - 1]]
    if need > len(free):
      raise ValueError(
          f"WorldConfig.num_entities={config.num_entities}: the world has "
          f"{len(free)} unasked {hops}-hop questions left for the {split} "
          f"split, which needs {need}; expected more entities or fewer "
          "questions.")
    for j in rng.choice(len(free), size=need, replace=False):
      asked[hops - 1].add(free[j])
      picked.append(chains[hops - 1][free[j]])
  order = rng.permutation(count)
  return tuple(task_of(f"{SOURCE}-{split}-{i:05d}", *picked[j], entities)
               for i, j in enumerate(order))


def generate_world(config: WorldConfig = WorldConfig()) -> World:
  """The world `config` describes; the same config gives the same world."""
  if not isinstance(config, WorldConfig):
    raise TypeError(f"generate_world: config must be a WorldConfig; got "
                    f"{type(config).__name__}.")
  entities = _entities(config)
  documents = documents_of(entities)
  chains = _chains(entities, config.max_hops)
  asked: list[set[int]] = [set() for _ in chains]
  splits = {}
  for split in ("test", "validation", "train"):
    splits[split] = _questions(config, entities, split, chains, asked)
  return World(config, entities, documents,
               {s: splits[s] for s in SPLITS})

