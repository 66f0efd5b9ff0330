"""Which questions' facts a warm start showed (data/novelty.py)."""

from mgrpo_jax.data.novelty import NOBODY, Novelty
from mgrpo_jax.data.task import SubQuestion, Task

Q = "Which company does Nuko Besho work for?"
TASK = Task("t", Q, ("Tavi Labs",), "synthetic",
            sub_questions=(SubQuestion(Q, "Tavi Labs"),))


def test_a_fact_is_shown_by_its_sentence_or_its_question_and_answer():
  assert Novelty(["Nuko Besho works for Tavi Labs. More."]).shown(TASK) == (
      "Nuko Besho works for Tavi Labs.",)
  assert Novelty([f"<user>{Q}</user> <answer>Tavi Labs</answer>"]).novel(
      TASK) is False
  # The question in one conversation and the name in another teach nothing.
  assert Novelty([Q, "Tavi Labs is a company."]).novel(TASK) is True
  assert Novelty(["Nuko Besho works for Ruma Works."]).novel(TASK) is True
  assert NOBODY.novel(TASK) is True


def test_hops_that_are_not_the_world_s_relations_are_neither():
  task = Task("f", "Who wrote it?", ("Ann",), "musique",
              sub_questions=(SubQuestion("Who wrote it?", "Ann"),))
  assert Novelty(["Who wrote it? Ann"]).novel(task) is None
  assert list(Novelty([]).mask([task, TASK])) == [False, True]
