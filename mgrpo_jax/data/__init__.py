"""Tasks and corpora: the synthetic world and benchmark files.

  task.py corpus.py  Task / TaskSet; documents and the BM25 index
  world.py           the seeded synthetic multi-hop world
  facts.py           the world's relations read back from text (questions,
                     pages)
  demo_worlds.py     other worlds for the warm start: no fact of the run's
                     own world is demonstrated
  novelty.py         which questions' facts the demonstrations never showed
  counterfactual.py  the world with last-hop facts changed (the reader's
                     check)
  world_builder.py   the world as tfds array_record, read with
                     tfds.data_source
  readers.py         GAIA, WebWalkerQA, XBench-DeepSearch, HotpotQA, MuSiQue
  records.py         record checks and file layouts the readers share
  loading.py         load_tasks(name or file), load_corpus
  export.py          the world written as MuSiQue / HotpotQA files and pages
"""
