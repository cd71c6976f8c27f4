import json

from grpo_kit.data.tasks import heldout_split
from grpo_kit.eval.inference import greedy_accuracy
from grpo_kit.model.tiny import SHIPPED, build_tokenizer, load_model


def test_tokenizer_is_a_real_fast_tokenizer(tmp_path):
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    tok = build_tokenizer()
    assert isinstance(tok, PreTrainedTokenizerFast)
    tok.save_pretrained(tmp_path)
    again = AutoTokenizer.from_pretrained(tmp_path)
    text = "Natalia sold 48 clips, #### 72"
    ids = again(text)["input_ids"]
    assert ids[0] == again.bos_token_id and len(ids) == len(text) + 1
    assert again.decode(ids, skip_special_tokens=True) == text


def test_shipped_base_is_a_useful_starting_point(tiny):
    model, tok = tiny
    n = sum(p.numel() for p in model.parameters())
    # tied embeddings (99 x 128) + 4 layers of (q, k, v, o 128 x 128; gate, up, down 128 x 384; 2 norms) + final norm
    assert n == 99 * 128 + 4 * (4 * 128 * 128 + 3 * 128 * 384 + 2 * 128) + 128  # 865,792
    acc = greedy_accuracy(model, tok, heldout_split("add2"))
    assert 0.20 <= acc <= 0.65, f"base accuracy {acc:.2f} leaves no room for RL or is too weak"
    report = json.loads((SHIPPED / "base_report.json").read_text())
    assert abs(report["test_accuracy"] - acc) < 1e-9


def test_from_pretrained_on_a_model_the_kit_saved(tiny, tmp_path):
    model, tok = tiny
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    again, tok2 = load_model(tmp_path)
    items = heldout_split("add2")[:50]
    assert greedy_accuracy(again, tok2, items) == greedy_accuracy(model, tok, items)
