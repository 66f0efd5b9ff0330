"""Tokenizer: ids, special tokens, chat template, save/load, transformers."""

import json

import pytest

from mgrpo_jax.models import Tokenizer
from mgrpo_jax.models.tokenizer import TokenizerError
from model_test_utils import tiny_tokenizer

MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]
TEXTS = ["What is the capital of France?", "naïve café – 日本語 🤗",
         "def f(x):\n    return x ** 2\t#  x =  2",
         "<|im_start|>user\nHi<|im_end|>\n"]


@pytest.fixture(scope="module")
def tok():
  return tiny_tokenizer()


def test_round_trip_and_special_tokens_are_single_ids(tok):
  for text in TEXTS:
    assert tok.decode(tok.encode(text)) == text
  assert tok.encode("<|im_start|>") == [tok.bos_id]
  assert tok.encode("a<|im_end|>")[-1] == tok.eos_id
  assert "<|im_end|>" not in tok.decode(tok.encode("a<|im_end|>"),
                                        skip_special_tokens=True)


def test_special_ids(tok):
  assert (tok.bos_id, tok.eos_id, tok.pad_id) == (1, 2, 2)
  assert tok.stop_token_ids == (2,)
  assert tok.token_to_id("<|endoftext|>") == 0


def test_chat_template(tok):
  text = tok.apply_chat_template(MESSAGES)
  assert text == ("<|im_start|>system\nYou are a helpful AI assistant named "
                  "SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user"
                  "\nWhat is the capital of France?<|im_end|>\n"
                  "<|im_start|>assistant\n")
  no_prompt = tok.apply_chat_template(MESSAGES, add_generation_prompt=False)
  assert text == no_prompt + "<|im_start|>assistant\n"


def test_save_load_round_trip(tok, tmp_path):
  tok.save(tmp_path)
  config = json.loads((tmp_path / "tokenizer_config.json").read_text())
  assert config["eos_token"] == "<|im_end|>"
  loaded = Tokenizer.load(tmp_path)
  for text in TEXTS:
    assert loaded.encode(text) == tok.encode(text)
  assert loaded.apply_chat_template(MESSAGES) == tok.apply_chat_template(
      MESSAGES)
  assert (loaded.bos_id, loaded.eos_id, loaded.pad_id) == (1, 2, 2)


def test_transformers_reads_saved_tokenizer(tok, tmp_path):
  transformers = pytest.importorskip("transformers")
  tok.save(tmp_path)
  hf = transformers.AutoTokenizer.from_pretrained(tmp_path)
  for text in TEXTS:
    assert hf(text, add_special_tokens=False).input_ids == tok.encode(text)
  assert hf.apply_chat_template(MESSAGES, tokenize=False,
                                add_generation_prompt=True
                                ) == tok.apply_chat_template(MESSAGES)
  assert (hf.bos_token_id, hf.eos_token_id, hf.pad_token_id) == (1, 2, 2)


def test_unknown_special_token_is_named(tok):
  with pytest.raises(TokenizerError, match=r"eos_token='<\|eot\|>' is not in "
                     r"the vocabulary \(\d+ tokens\)"):
    Tokenizer(tok.backend, eos_token="<|eot|>")


def test_missing_files_and_template(tok, tmp_path):
  with pytest.raises(TokenizerError, match=r"tokenizer\.json: not found"):
    Tokenizer.load(tmp_path)
  bare = Tokenizer(tok.backend, source="bare")
  with pytest.raises(TokenizerError, match="bare: no chat_template"):
    bare.apply_chat_template(MESSAGES)
