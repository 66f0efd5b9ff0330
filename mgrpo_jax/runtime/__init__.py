"""The runtime: meshes, the shared store, checkpoints, metrics, logs, the
keyed on-disk cache and config checks: what touches devices, disks and
buckets. A leaf package: it imports nothing else of mgrpo_jax."""
