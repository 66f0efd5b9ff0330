"""Registry: names, duplicates and the error that lists the choices."""

import pytest

from mgrpo_jax import Registry


def test_register_get_and_list():
  reg = Registry("widget")
  reg.register("b")(2)
  reg.register("a")(1)
  assert reg.get("a") == 1 and reg.names() == ["a", "b"] and "b" in reg
  assert list(reg) == ["a", "b"]


def test_errors():
  reg = Registry("widget")
  reg.register("a")(1)
  with pytest.raises(ValueError, match=r"unknown widget kind='z': expected one of \['a'\]"):
    reg.get("z", arg="kind")
  with pytest.raises(ValueError, match="'a' is already registered"):
    reg.register("a")(2)
  with pytest.raises(ValueError, match="non-empty string"):
    reg.register("")
