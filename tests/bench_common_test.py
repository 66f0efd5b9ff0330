"""What every benchmark reports about where it ran."""

from mgrpo_jax.bench.common import cpu_model, machine


def test_machine_names_the_cpu_and_the_allocator_settings(monkeypatch):
  monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
  plain = machine()
  assert plain.startswith(cpu_model()) and "CPUs" in plain
  assert "GLIBC_TUNABLES" not in plain
  monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.hugetlb=1")
  assert machine() == plain + ", GLIBC_TUNABLES=glibc.malloc.hugetlb=1"


def test_cpu_model_names_family_model_and_vector_unit():
  info = ("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 26\n"
          "model\t\t: 2\nmodel name\t: AMD EPYC\nflags\t\t: fpu avx2 "
          "avx512f avx512_bf16\n\nprocessor\t: 1\nmodel name\t: other\n")
  assert cpu_model(info) == "AMD EPYC (family 26 model 2, AVX-512)"
  assert cpu_model(info.replace(" avx512f", "")) == (
      "AMD EPYC (family 26 model 2, AVX2)")
  xeon = info.replace("AMD EPYC", "Intel(R) Xeon(R)").replace(
      "avx512_bf16", "avx512_bf16 amx_tile")
  assert cpu_model(xeon).endswith("AMX)")
  assert cpu_model("model name\t: Some CPU\n") == "Some CPU"
  assert cpu_model("") != ""  # platform's answer
