"""The runtime: meshes, the shared store, checkpoints, metrics, logs, the
keyed on-disk cache and config checks: what touches devices, disks and
buckets. A leaf package: it imports nothing else of mgrpo_jax.

  meshes.py          one disjoint device mesh per agent
  distributed.py     jax.distributed: one role's mesh over several processes
  processes.py       a role's processes: process 0 writes; barriers,
                     broadcasts, agreements (named timeouts)
  checksum.py        weights' checksum, exact on any layout
  store.py           shared store (directory or gs://): step records (whole
                     or in per-process parts), shared warm starts
  store_weights.py   the store's published weights (Orbax, one version per
                     step)
  store_files.py     the store's local and gs:// file backends (atomic
                     writes)
  store_codec.py     step records as bytes (.npz, JSON), the run fingerprint
  checkpoints.py     per-agent Orbax checkpoints (step 0 kept), resume
  run_files.py       a run directory's small files, local or gs://
  metrics.py         JSONL + TensorBoard metrics, progress bar
  metrics_doc.py     what each logged metric means (METRICS_DOC)
  logs.py            what a run prints; library logs only with --verbosity=1
  cache.py           the keyed on-disk cache (one folder per key, renamed
                     into place)
  config_checks.py   config field checks, command-line errors (exit 2)
  programs.py        a jitted function's programs compiled ahead of time,
                     looked up by shape (strict: nothing compiles late)
  xla_options.py     per-jit XLA options: YNNPACK matmuls for gradients on
                     CPU
  buckets.py         padded sizes of jitted shapes: x1.5 steps (learners,
                     engine decode rows), powers of two (the engine's other
                     sizes)
"""
