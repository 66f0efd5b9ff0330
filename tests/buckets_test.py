"""Tests of the padded-size ladder shared by the engine and the learners."""

from mgrpo_jax.runtime.buckets import bucket, power_of_two


def test_ladder_is_one_and_a_half_steps_between_doublings():
  assert [bucket(n, 16) for n in (1, 16, 17, 24, 25, 32, 33, 48, 49)] == [
      16, 16, 24, 24, 32, 32, 48, 48, 64]
  assert [bucket(n, 1) for n in (1, 2, 3, 4, 5, 6, 7, 9, 13)] == [
      1, 2, 3, 4, 6, 6, 8, 12, 16]


def test_nothing_is_padded_past_one_and_a_half_times_its_size():
  for minimum in (1, 16, 64):
    for n in range(minimum, 5000):
      size = bucket(n, minimum)
      assert n <= size <= max(1.5 * n, minimum), (n, minimum, size)


def test_cap_and_minimum():
  assert bucket(3000, 64, 1024) == 1024
  assert bucket(5, 64, 1024) == 64
  assert bucket(5, 0) == 6  # A minimum below 1 counts as 1.
  assert bucket(100, 100) == 100 and bucket(101, 100) == 150


def test_power_of_two_ladder():
  assert [power_of_two(n, 16) for n in (1, 16, 17, 33, 100)] == [
      16, 16, 32, 64, 128]
  assert power_of_two(3000, 64, 1024) == 1024
  assert power_of_two(3, 0) == 4
