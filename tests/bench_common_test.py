"""What every benchmark reports about where it ran."""

from mgrpo_jax.bench.common import cpu_model, machine


def test_machine_names_the_cpu_and_the_allocator_settings(monkeypatch):
  monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
  plain = machine()
  assert plain.startswith(cpu_model()) and "CPUs" in plain
  assert "GLIBC_TUNABLES" not in plain
  monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.hugetlb=1")
  assert machine() == plain + ", GLIBC_TUNABLES=glibc.malloc.hugetlb=1"
