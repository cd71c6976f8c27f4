"""Datasets as Hugging Face users have them (grpo_kit/data/sources.py): parquet, csv, save_to_disk folders,
``Dataset`` / ``DatasetDict`` objects and Hub names, besides jsonl; ``dataset_columns``; and each bad input
refused with one line that names the problem and the fix, before anything is written.

Every file here is the shipped GSM8K sample (datasets/gsm8k_sample.jsonl, 32 rows) written with ``datasets``
in tmp_path, or a few rows written by hand; nothing is downloaded.
"""
from __future__ import annotations

import json
import pickle
import time

import pytest

from grpo_kit.config import GRPOConfig
from grpo_kit.data.sources import check_source, hub_cached, load_source, source_of
from grpo_kit.data.tasks import DATASETS_DIR, load_gsm8k, table_items
from grpo_kit.errors import ConfigError, DataError
from grpo_kit.loop.checks import check_config

datasets = pytest.importorskip("datasets")
datasets.disable_progress_bars()

SAMPLE = DATASETS_DIR / "gsm8k_sample.jsonl"
FIRST = "Mia has 4 boxes with 6 pencils in each box. She gives away 5 pencils. How many pencils does she have left?"


def sample_rows() -> list[dict]:
    return [json.loads(line) for line in SAMPLE.read_text().splitlines() if line.strip()]


@pytest.fixture
def sample(tmp_path):
    """The sample as a Dataset, and written as parquet, csv, a save_to_disk folder and a DatasetDict's folder."""
    ds = datasets.Dataset.from_list(sample_rows())
    ds.to_parquet(str(tmp_path / "gsm8k.parquet"))
    ds.to_csv(str(tmp_path / "gsm8k.csv"))
    ds.save_to_disk(str(tmp_path / "disk"))
    datasets.DatasetDict(train=ds, test=ds.select(range(3))).save_to_disk(str(tmp_path / "dict"))
    return ds


def test_every_form_reads_the_same_items_as_the_jsonl(tmp_path, sample):
    want = load_gsm8k(SAMPLE)
    assert len(want) == 32 and want[0]["prompt"] == FIRST and want[0]["answer"] == "19"  # 4*6 - 5
    for spec in ("gsm8k.parquet", "gsm8k.csv", "disk", "dict"):
        assert load_source(str(tmp_path / spec)) == want, spec
    assert load_source(sample) == want
    assert load_source(datasets.DatasetDict(train=sample)) == want


def test_the_split_of_a_dataset_dict(tmp_path, sample):
    assert [it["answer"] for it in load_source(str(tmp_path / "dict"), split="test")] == ["19", "16", "90"]
    d = datasets.DatasetDict(test=sample.select(range(2)))
    assert [it["answer"] for it in load_source(d, split="test")] == ["19", "16"]
    with pytest.raises(DataError, match=r"no split 'train' \(splits: test\); choose one with dataset_split"):
        load_source(d)  # no dataset_split: train, which this one lacks


def test_columns_are_mapped_and_the_others_reach_reward_functions_per_item(tmp_path):
    rows = [{"q": "2+3=", "a": "two and three\n#### 1,005", "level": 1},
            {"q": "1+1=", "a": "2", "level": 2}]
    datasets.Dataset.from_list(rows).to_parquet(str(tmp_path / "m.parquet"))
    items = load_source(str(tmp_path / "m.parquet"), columns={"prompt": "q", "answer": "a"})
    # '#### 1,005' -> 1005 and its worked solution; a plain number has no solution (None, so every row has the column)
    assert items == [{"level": 1, "prompt": "2+3=", "answer": "1005", "solution": "two and three"},
                     {"level": 2, "prompt": "1+1=", "answer": "2", "solution": None}]


def test_a_csv_of_numbers_and_a_conversational_parquet(tmp_path):
    (tmp_path / "n.csv").write_text("prompt,answer,reverse_digits\n12+34=,46,true\n")
    assert load_source(str(tmp_path / "n.csv")) == [{"reverse_digits": True, "prompt": "12+34=", "answer": "46"}]
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "1+1="}]
    datasets.Dataset.from_list([{"prompt": chat, "answer": "2"}]).to_parquet(str(tmp_path / "c.parquet"))
    assert load_source(str(tmp_path / "c.parquet")) == [{"prompt": chat, "answer": "2"}]


def test_a_jsonl_takes_dataset_columns_too(tmp_path):
    (tmp_path / "m.jsonl").write_text('{"q": "2+3=", "a": "so #### 5"}\n{"q": "1+1=", "a": "x"}\n')
    assert load_source(str(tmp_path / "m.jsonl"), columns={"prompt": "q", "answer": "a"},
                       on_bad_row="skip") == [{"prompt": "2+3=", "answer": "5", "solution": "so"}]
    with pytest.raises(DataError, match=r"m.jsonl, line 2: column 'a' \(the answer\) is not a number"):
        load_source(str(tmp_path / "m.jsonl"), columns={"prompt": "q", "answer": "a"})
    assert load_source(str(SAMPLE)) == load_gsm8k(SAMPLE)  # no mapping: today's reader, unchanged


# ---------------------------------------------------------------- bad input: one line naming the problem and the fix

def test_a_missing_mapped_column_names_it_and_the_columns_there(tmp_path, sample):
    with pytest.raises(DataError) as e:
        load_source(str(tmp_path / "gsm8k.parquet"), columns={"prompt": "problem"})
    assert str(e.value) == ("{}: no column 'problem' for the prompt (columns: 'question', 'answer'); name the prompt "
                            "column in dataset_columns: {{prompt: <one of these columns>}}".format(tmp_path / "gsm8k.parquet"))
    with pytest.raises(DataError, match=r"no column 'answer' for the answer \(columns: 'question', 'solution'\)"):
        load_source(datasets.Dataset.from_list([{"question": "1+1=", "solution": "2"}]))


def test_an_empty_split(sample):
    empty = datasets.DatasetDict(train=sample.select([]), test=sample)
    with pytest.raises(DataError, match=r"GRPOConfig.dataset split 'train': no rows; train on a file or split that "
                                        r"has some \(dataset_split picks the split\)"):
        load_source(empty)
    assert len(load_source(empty, split="test")) == 32


@pytest.mark.parametrize("prompt,got", [(5, "int 5"), (None, "NoneType None"), ({"a": "b"}, "dict {'a': 'b'}")])
def test_a_prompt_that_is_not_text_nor_messages(prompt, got):
    rows = [{"prompt": "1+1=", "answer": "2"}, {"prompt": prompt, "answer": "3"}]
    with pytest.raises(DataError) as e:
        table_items(rows, {"prompt": "prompt", "answer": "answer"}, "t.parquet")
    assert str(e.value) == (f"t.parquet, row 2: column 'prompt' (the prompt) must be text or a list of "
                            f"{{'role': str, 'content': str}} messages, got {got}")
    assert table_items(rows, {"prompt": "prompt", "answer": "answer"}, "t", on_bad_row="skip") == [rows[0]]


def test_a_message_list_that_is_not_messages():
    with pytest.raises(DataError, match=r"row 1: field 'prompt' message 0 must be \{'role': str, 'content': str\}"):
        table_items([{"prompt": [{"role": "user"}], "answer": "2"}], {"prompt": "prompt", "answer": "answer"}, "t")


@pytest.mark.parametrize("name,problem", [
    ("data.txt", "unknown dataset file type '.txt'; use a .jsonl, .parquet or .csv file, a folder written by "
                 "Dataset.save_to_disk, or a Hugging Face Hub name (owner/name)"),
    ("data", "unknown dataset file type '(none)'"),
    ("folder", "a folder, but not one written by save_to_disk (it has no state.json or dataset_dict.json)"),
    ("gone.parquet", "no such file or folder"),
    ("not a hub name", "no such file or folder"),
])
def test_what_is_not_a_dataset_is_refused_by_its_form(tmp_path, name, problem):
    (tmp_path / "data.txt").write_text("prompt,answer\n")
    (tmp_path / "data").write_text("prompt,answer\n")
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "train.parquet").write_text("")
    spec = name if name == "not a hub name" else str(tmp_path / name)
    with pytest.raises(DataError) as e:
        source_of(spec)
    assert str(e.value).startswith(f"{spec}: {problem}")


def test_a_pickle_or_a_loading_script_is_never_run(tmp_path):
    marker = tmp_path / "RAN"

    class Boom:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    (tmp_path / "d.pkl").write_bytes(pickle.dumps(Boom()))
    assert pickle.loads((tmp_path / "d.pkl").read_bytes()) and marker.exists()  # the file does run code
    marker.unlink()
    with pytest.raises(DataError, match=r"d.pkl: a .pkl file is a pickle, which runs code when it is read, so it is "
                                        r"never loaded; write the data as .parquet or .jsonl"):
        load_source(str(tmp_path / "d.pkl"))
    script = tmp_path / "repo"
    script.mkdir()
    (script / "repo.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    with pytest.raises(DataError, match="not one written by save_to_disk"):
        load_source(str(script))
    assert not marker.exists()


def test_split_and_config_apply_only_where_they_mean_something(tmp_path, sample):
    with pytest.raises(DataError, match=r"dataset_split='test', but this parquet source is one table without splits"):
        load_source(str(tmp_path / "gsm8k.parquet"), split="test")
    with pytest.raises(DataError, match=r"dataset_config='main' names a configuration of a Hub dataset, and this is "
                                        r"a object source"):
        load_source(sample, config="main")


# ---------------------------------------------------------------- Hub names

@pytest.fixture
def no_cache(tmp_path, monkeypatch):
    """An empty datasets cache, whatever this machine has cached."""
    cache = tmp_path / "hf-datasets"
    cache.mkdir()
    monkeypatch.setenv("HF_DATASETS_CACHE", str(cache))
    return cache


def test_a_hub_name_is_refused_offline_at_once(no_cache, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cfg = GRPOConfig(task="gsm8k", dataset="openai/gsm8k", dataset_config="main")
    t0 = time.perf_counter()
    with pytest.raises(DataError) as e:
        check_config(cfg)
    took = time.perf_counter() - t0
    assert took < 2.0, took
    assert "\n" not in str(e.value)
    assert str(e.value) == (f"openai/gsm8k: not a file or folder here, so read as a Hugging Face Hub dataset, but the "
                            f"hub cannot be reached (HF_HUB_OFFLINE is set) and the dataset is not in the local cache "
                            f"({no_cache}); on a machine with network run datasets.load_dataset('openai/gsm8k', "
                            f"'main').save_to_disk('DIR'), then pass the folder DIR as dataset")


def test_an_unreachable_hub_is_offline_too_and_a_cached_dataset_passes(no_cache, monkeypatch):
    src = source_of("openai/gsm8k")
    with pytest.raises(DataError, match=r"cannot be reached \(no answer from the hub\)"):
        check_source(src, online=lambda: False)
    check_source(src, online=lambda: True)  # online: datasets is asked
    (no_cache / "openai___gsm8k" / "main" / "0.0.0").mkdir(parents=True)  # what load_dataset leaves there
    assert hub_cached("openai/gsm8k", no_cache) and not hub_cached("openai/gsm8k_extra", no_cache)
    assert hub_cached("OpenAI/GSM8K", no_cache)  # datasets writes the name in snake case
    check_source(src, online=lambda: False)


def test_a_hub_name_is_read_with_load_dataset_and_no_remote_code(monkeypatch, sample):
    calls = []

    def load_dataset(path, name=None, **kw):
        calls.append((path, name, kw))
        return sample

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    assert load_source("openai/gsm8k", config="main", online=lambda: True) == load_gsm8k(SAMPLE)
    assert calls == [("openai/gsm8k", "main", {"split": "train", "trust_remote_code": False})]
    load_source("openai/gsm8k", config="main", split="test", online=lambda: True)
    assert calls[-1][2]["split"] == "test"

    def missing(*a, **k):
        raise ValueError('Unknown split "train". Should be one of [\'test\'].\nmore')

    monkeypatch.setattr(datasets, "load_dataset", missing)
    with pytest.raises(DataError) as e:
        load_source("owner/name", online=lambda: True)
    assert str(e.value) == ("owner/name: cannot load the Hub dataset (config None, split 'train'): ValueError: Unknown "
                            "split \"train\". Should be one of ['test'].; check the name, dataset_config and "
                            "dataset_split on https://huggingface.co/datasets/owner/name")


# ---------------------------------------------------------------- the config fields

@pytest.mark.parametrize("changes,field,rule", [
    ({"dataset": "d.jsonl", "dataset_columns": {"question": "q"}}, "dataset_columns", "must map prompt and/or answer"),
    ({"dataset": "d.jsonl", "dataset_columns": {"prompt": "q", "answer": "q"}}, "dataset_columns", "two different"),
    ({"dataset": "d.jsonl", "dataset_columns": {"prompt": 3}}, "dataset_columns", "column names"),
    ({"dataset": "d.jsonl", "dataset_split": ""}, "dataset_split", "must be a name"),
    ({"dataset": ["a.jsonl"]}, "dataset", "a Hugging Face Hub name"),
    ({"dataset_split": "test"}, "dataset_split", "applies to a dataset, and dataset is None"),
    ({"dataset_columns": {"prompt": "q"}}, "dataset_columns", "applies to a dataset"),
])
def test_the_dataset_fields_name_their_rule(changes, field, rule):
    with pytest.raises(ConfigError, match=rf"GRPOConfig\.{field}=.*: .*{rule}"):
        check_config(GRPOConfig(**changes))


def test_a_yaml_config_may_leave_the_dataset_to_the_command_line():
    cfg = GRPOConfig.from_yaml_text("task: gsm8k\ndataset_columns: {prompt: question}\n")  # --dataset comes later
    check_config(cfg.replace(dataset=str(SAMPLE)))


def test_the_fields_round_trip_through_yaml(tmp_path, sample):
    cfg = GRPOConfig(dataset="openai/gsm8k", dataset_config="main", dataset_split="train",
                     dataset_columns={"prompt": "question", "answer": "answer"})
    assert GRPOConfig.from_yaml_text(cfg.to_yaml()) == cfg
    assert GRPOConfig(dataset=sample).validate().dataset is sample  # a Dataset object, in Python


# ---------------------------------------------------------------- training, two steps on the tiny model from each form

@pytest.fixture
def gsm8k_cfg(small_cfg):
    """tests/conftest.py's small config on the gsm8k task (configs/gsm8k.yaml's judges), two short steps."""
    return small_cfg.replace(task="gsm8k", reward_funcs=["math_answer", "gsm8k_format"], steps=2, num_prompts=2,
                             num_generations=2, max_completion_length=8, eval_size=2)


@pytest.mark.parametrize("form", ["gsm8k.parquet", "disk", "gsm8k.csv", "Dataset"])
def test_two_steps_from_each_form(tmp_path, sample, gsm8k_cfg, form):
    from grpo_kit.loop.train import setup, train

    cfg = gsm8k_cfg.replace(dataset=sample if form == "Dataset" else str(tmp_path / form))
    run = setup(cfg)
    assert run.train_items == load_gsm8k(SAMPLE)
    history = list(train(cfg, run))
    questions = {r["question"] for r in sample_rows()}
    assert [m["step"] for m in history] == [1, 2]
    assert all(m["samples"]["prompt"] in questions for m in history)  # each step sampled the sample's prompts
    assert all(0.0 <= m["rewards/math_answer/mean"] <= 1.0 for m in history)


def test_extra_columns_reach_the_reward_function(tmp_path, gsm8k_cfg):
    from grpo_kit.loop.train import grpo_step, setup

    rows = [{**r, "level": i % 3} for i, r in enumerate(sample_rows())]
    datasets.Dataset.from_list(rows).to_parquet(str(tmp_path / "l.parquet"))
    seen = []

    def by_level(prompts, completions, level, answer, solution, **_):
        seen.append((list(prompts), list(level), list(answer), len(solution)))
        return [float(v) for v in level]

    run = setup(gsm8k_cfg.replace(dataset=str(tmp_path / "l.parquet")), reward_funcs=[by_level])
    m = grpo_step(run)
    prompts, levels, answers, n = seen[0]
    row = {r["question"]: (i % 3, r["answer"].rsplit("#### ", 1)[1]) for i, r in enumerate(sample_rows())}
    assert n == 4 and [row[p] for p in prompts] == list(zip(levels, answers))  # each completion: its own row's values
    assert m["reward"] == pytest.approx(sum(levels) / 4)  # B = 2 prompts x 2 completions
