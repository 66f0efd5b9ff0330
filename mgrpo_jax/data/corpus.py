"""A local corpus: documents held in memory and a BM25 index over them.

`LocalCorpus` is what the agents' `search` / `visit` tools read offline (the
synthetic world's pages, or the paragraphs HotpotQA / MuSiQue carry). Bad
corpora (empty, duplicate ids) raise when the corpus is built.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from typing import Sequence

_WORD = re.compile(r"\w+")
_STOPWORDS = frozenset(
    "a an and are as at be by for from has in is it its of on or that the to "
    "was were will with what which who whom whose when where why how".split())


@dataclasses.dataclass(frozen=True)
class Document:
  """One page of a corpus."""
  doc_id: str
  title: str
  text: str


@dataclasses.dataclass(frozen=True)
class SearchHit:
  """One search result: the page, its title, a snippet and the BM25 score."""
  doc_id: str
  title: str
  snippet: str
  score: float


def _bm25s():
  """The bm25s module, imported on first use, not with this module: its
  import runs a JAX computation (bm25s/selection.py), which would start
  JAX's backend before `jax.distributed.initialize` (runtime/distributed.py)
  could run. Its import also sets its logger to DEBUG; the logger keeps the
  level it had (runtime/logs.py sets it)."""
  logger = logging.getLogger("bm25s")
  level = logger.level
  import bm25s  # pylint: disable=g-import-not-at-top
  logger.setLevel(level)
  return bm25s


def words(text: str) -> list[str]:
  """Lower-cased word tokens without stopwords: what BM25 and visit match."""
  return [w for w in _WORD.findall(text.lower()) if w not in _STOPWORDS]


class LocalCorpus:
  """A BM25 index over documents held in memory."""

  def __init__(self, documents: Sequence[Document], *, source: str = "corpus",
               snippet_chars: int = 200):
    if not documents:
      raise ValueError(f"{source}: the corpus is empty; search needs at least "
                       "one document.")
    ids = [d.doc_id for d in documents]
    seen: set[str] = set()
    for i, doc_id in enumerate(ids):
      if doc_id in seen:
        raise ValueError(f"{source}: document {i} repeats the id {doc_id!r}; "
                         "ids must be unique.")
      seen.add(doc_id)
    self.documents = list(documents)
    self._by_id = {d.doc_id: d for d in self.documents}
    self.snippet_chars = snippet_chars
    self._index = _bm25s().BM25()
    self._index.index(
        [words(f"{d.title} {d.text}") or ["<empty>"] for d in self.documents],
        show_progress=False)

  def search(self, query: str, k: int) -> list[SearchHit]:
    query_words = words(query)
    if not query_words:
      return []
    k = max(1, min(int(k), len(self.documents)))
    ids, scores = self._index.retrieve([query_words], k=k, show_progress=False)
    hits = []
    for i, score in zip(ids[0], scores[0]):
      if score <= 0:
        continue
      doc = self.documents[int(i)]
      hits.append(SearchHit(doc.doc_id, doc.title,
                            doc.text[:self.snippet_chars], float(score)))
    return hits

  def fetch(self, doc_id: str) -> Document | None:
    return self._by_id.get(doc_id)
