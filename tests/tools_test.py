"""search (real BM25), visit, the registry, and bad corpora."""

import numpy as np
import pytest

from mgrpo_jax.agents.protocol import parse_turn, render_tool_call
from mgrpo_jax.agents.tools import (Document, LocalCorpus, ToolError,
                                    ToolRegistry, search_and_visit,
                                    visit_text)

DOCS = [
    Document("d1", "Paris", "Paris is the capital of France. It lies on the "
             "Seine. The Eiffel Tower was built in 1889."),
    Document("d2", "Rome", "Rome is the capital of Italy. The Colosseum is "
             "in Rome."),
    Document("d3", "Seine", "The Seine is a river in France. It flows "
             "through Paris into the English Channel."),
]


def bm25_reference(query, docs, k1=1.5, b=0.75):
  """BM25 as Lucene scores it (idf log(1 + (N - df + .5) / (df + .5)), no
  (k1 + 1) factor), by hand."""
  from mgrpo_jax.data.corpus import words as _words
  texts = [_words(f"{d.title} {d.text}") for d in docs]
  avg = np.mean([len(t) for t in texts])
  n = len(texts)
  scores = []
  for t in texts:
    s = 0.0
    for w in set(_words(query)):
      df = sum(w in u for u in texts)
      if df == 0:
        continue
      idf = np.log(1 + (n - df + 0.5) / (df + 0.5))
      tf = t.count(w)
      s += idf * tf / (tf + k1 * (1 - b + b * len(t) / avg))
    scores.append(s)
  return scores


@pytest.mark.parametrize("query", ["capital of Italy", "river France",
                                   "Eiffel Tower 1889", "Seine river Paris"])
def test_search_ranks_like_bm25(query):
  corpus = LocalCorpus(DOCS)
  hits = corpus.search(query, 3)
  ref = bm25_reference(query, DOCS)
  want = [DOCS[i].doc_id for i in np.argsort(ref)[::-1] if ref[i] > 0]
  assert [h.doc_id for h in hits] == want
  np.testing.assert_allclose([h.score for h in hits], sorted(
      [r for r in ref if r > 0], reverse=True), rtol=1e-4)


def test_search_edge_cases():
  corpus = LocalCorpus(DOCS)
  assert corpus.search("the of", 3) == []      # only stopwords
  assert corpus.search("zebra", 3) == []       # no match
  assert len(corpus.search("capital", 100)) == 2  # k larger than corpus


def test_visit_puts_goal_passages_first_and_keeps_budget():
  text = visit_text(DOCS[0], "when was the Eiffel Tower built", 60)
  assert text.startswith("# Paris\nThe Eiffel Tower was built in 1889.")
  assert len(text) <= len("# Paris\n") + 60


def test_tools_through_the_protocol():
  registry = ToolRegistry(search_and_visit(LocalCorpus(DOCS)))
  turn = parse_turn(render_tool_call("search", {"query": "capital Italy"}),
                    registry.specs())
  out = registry.run(turn.name, turn.arguments)
  assert out.splitlines()[0].startswith("[d2] Rome: Rome is the capital")
  turn = parse_turn(render_tool_call("visit", {"page": "d9", "goal": "x"}),
                    registry.specs())
  assert "no page 'd9'" in registry.run(turn.name, turn.arguments)
  assert "unknown tool 'fly'" in registry.run("fly", {})
  assert registry.run("search", {"query": "zebra"}).startswith("No results")


def test_bad_corpora_are_named():
  with pytest.raises(ValueError, match="wiki.jsonl: the corpus is empty"):
    LocalCorpus([], source="wiki.jsonl")
  with pytest.raises(ValueError, match="document 1 repeats the id 'a'"):
    LocalCorpus([Document("a", "", "x"), Document("a", "", "y")])
  with pytest.raises(ValueError, match="'search' is already registered"):
    ToolRegistry(search_and_visit(LocalCorpus(DOCS)) * 2)


def test_a_backend_tool_error_is_the_tool_result():
  class Failing:  # A backend whose service is down.
    def search(self, query, k):
      raise ToolError("Error: the search service timed out; try again.")

    def fetch(self, doc_id):
      raise ToolError(f"Error: the page {doc_id} is not text.")

  registry = ToolRegistry(search_and_visit(Failing()))
  assert registry.run("search", {"query": "x"}) == (
      "Error: the search service timed out; try again.")
  assert registry.run("visit", {"page": "u", "goal": "g"}) == (
      "Error: the page u is not text.")

  class Broken(Failing):  # Any other exception is a bug: it is not hidden.
    def search(self, query, k):
      raise KeyError(query)

  with pytest.raises(KeyError):
    ToolRegistry(search_and_visit(Broken())).run("search", {"query": "x"})
