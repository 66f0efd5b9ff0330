"""ChatRenderer: prompts and injected messages, token by token."""

import pytest

from model_test_utils import tiny_tokenizer
from mgrpo_jax.agents.chat import ChatError, ChatRenderer
from mgrpo_jax.models import Tokenizer


@pytest.fixture(scope="module")
def tok():
  return tiny_tokenizer()


def test_pieces_of_the_chatml_template(tok):
  renderer = ChatRenderer(tok)
  assert renderer.describe() == {
      "turn_close": "<|im_end|>\n", "message_open": "<|im_start|>user\n",
      "message_close": "<|im_end|>\n<|im_start|>assistant\n"}


def test_appended_message_equals_the_template_rendering(tok):
  renderer = ChatRenderer(tok)
  history = [{"role": "system", "content": "sys"},
             {"role": "user", "content": "question"}]
  prompt = renderer.prompt("sys", "question")
  assert tok.decode(prompt) == tok.apply_chat_template(history)
  for generated_text, eos in (("<answer>a</answer>", True),
                              ('<tool_call>{"name": "x"}</tool_call>', False)):
    generated = tok.encode(generated_text) + ([tok.eos_id] if eos else [])
    ids = prompt + generated + renderer.message(generated, "result")
    full = tok.apply_chat_template(
        history + [{"role": "assistant", "content": generated_text},
                   {"role": "user", "content": "result"}])
    assert tok.decode(ids) == full
  assert renderer.overhead([tok.eos_id]) < renderer.overhead([5])


def test_templates_rollouts_cannot_use_are_refused(tok):
  backend = tok.backend
  rewriting = Tokenizer(backend, eos_token="<|im_end|>", chat_template=(
      "{% for m in messages %}{% if loop.last %}LAST:{% endif %}"
      "{{ m.content }}\n{% endfor %}"))
  with pytest.raises(ChatError, match="only appends"):
    ChatRenderer(rewriting)
  dropping = Tokenizer(backend, eos_token="<|im_end|>", chat_template=(
      "{% for m in messages %}{% if m.role != 'assistant' %}{{ m.content }}"
      "{% endif %}{% endfor %}"))
  with pytest.raises(ChatError, match="verbatim"):
    ChatRenderer(dropping)
