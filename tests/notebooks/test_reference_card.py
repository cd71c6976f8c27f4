"""notebooks/REFERENCE.md, the series' reference card, fails here when it goes stale against the code.

- every default the card quotes (`` `field` = `value` ``) is the value in the code: a ``GRPOConfig`` field,
  a module constant (``advantages.EPS``) or a ``diagnose`` threshold (``diagnose.kl_max``);
- every ``GRPOConfig`` field the notation table names exists;
- every config snippet the card writes (`` `{advantage_estimator: rloo}` ``, `` `loss_type: grpo` ``) and every
  variant's config diff builds a valid config (``check_config``), and a diff lists only fields that differ
  from the defaults; the variants taken from a notebook equal the notebook's own config dict;
- the estimator, aggregation and KL tables cover every option the code has, and name no other;
- every ``diagnose`` finding kind appears in the findings table and the table names no other; every
  dashboard panel appears in the panel table and the table names no other;
- every code line the card quotes is in the file it names; every notebook the card links to exists.
"""
from __future__ import annotations

import ast
import contextlib
import re
import typing
from pathlib import Path

import pytest
import yaml

from grpo_kit.config import GRPOConfig
from grpo_kit.core import advantages, losses
from grpo_kit.eval import diagnostics
from grpo_kit.loop.checks import check_config
from grpo_kit.view import dashboard

ROOT = Path(__file__).resolve().parents[2]
NB = ROOT / "notebooks"
CARD_PATH = NB / "REFERENCE.md"
CARD = CARD_PATH.read_text()
PROSE = re.sub(r"```.*?```", "", CARD, flags=re.DOTALL)  # the card without its code blocks (their fences pair backticks)
FIELDS = {f for f in GRPOConfig.__dataclass_fields__}
DEFAULT = GRPOConfig()


# card variant -> (notebook source, the dict it is defined in, its key there; None: the value is `lora`)
VARIANT_SOURCES = {
    "grpo_kl": ("02b_published_variants.py", "VARIANTS", "grpo_kl"),
    "dr_grpo": ("02b_published_variants.py", "VARIANTS", "dr_grpo"),
    "dapo": ("02b_published_variants.py", "VARIANTS", "dapo"),
    "gspo": ("02b_published_variants.py", "VARIANTS", "gspo"),
    "dynamic": ("04b_informative_groups.py", "ARMS", "dynamic"),
    "replay": ("04b_informative_groups.py", "ARMS", "replay"),
    "pairwise_closeness": ("08_beyond_scalar_rewards.py", "VARIANTS", "pairwise_closeness"),
    "hybrid_w0.7": ("08b_process_rewards_and_critics.py", "VARIANTS", "hybrid_w0.7"),
    "process": ("08b_process_rewards_and_critics.py", "VARIANTS", "process"),
    "lora": ("09_from_toy_to_real.py", "LORA", None),
}

DEFAULT_QUOTE = re.compile(r"`([A-Za-z_][\w.]*)` = `([^`]+)`")
SNIPPET = re.compile(r"^(\{.*\}|[a-z_]+: \S.*)$")


# ----------------------------------------------------------------------------- reading the card
def section(number: int) -> str:
    """The text of the card's section ``## number. ...`` up to the next ``## `` heading."""
    m = re.search(rf"^## {number}\. .*?(?=^## |\Z)", PROSE, re.MULTILINE | re.DOTALL)
    assert m, f"REFERENCE.md has no section '## {number}. ...'"
    return m.group(0)


def table_rows(text: str) -> list[list[str]]:
    """The cells of every table body row in ``text`` (header and separator rows left out)."""
    rows, lines = [], text.splitlines()
    for i, line in enumerate(lines):
        if not line.startswith("|") or set(line) <= set("|-: "):
            continue
        if i + 1 < len(lines) and set(lines[i + 1]) <= set("|-: ") and lines[i + 1].startswith("|"):
            continue  # a header row: the separator follows it
        rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows


def spans(text: str) -> list[str]:
    return re.findall(r"`([^`]+)`", text)


def first_column_names(text: str) -> list[str]:
    return [spans(r[0])[0] for r in table_rows(text) if spans(r[0])]


def resolve(name: str):
    """The value in the code that a name quoted in the card stands for."""
    if name.startswith("diagnose."):
        key = name.split(".", 1)[1]
        assert key in diagnostics.DEFAULTS, f"the card quotes diagnose threshold {key!r}, which DEFAULTS lacks"
        return diagnostics.DEFAULTS[key]
    if "." in name:
        mod, attr = name.split(".", 1)
        module = {"advantages": advantages, "losses": losses}[mod]
        assert hasattr(module, attr), f"the card quotes {name}, which the code lacks"
        return getattr(module, attr)
    assert name in FIELDS, f"the card quotes GRPOConfig.{name}, which is not a field"
    return getattr(DEFAULT, name)


def build(diff: dict) -> GRPOConfig:
    """A config from a diff, checked as setup() checks it (names against the registries too)."""
    return check_config(GRPOConfig.from_dict(dict(diff)))


def variants() -> dict[str, dict]:
    blocks = re.findall(r"```yaml\n(# variants:.*?)```", CARD, re.DOTALL)
    assert len(blocks) == 1, "REFERENCE.md needs one ```yaml block that starts with '# variants:'"
    data = yaml.safe_load(blocks[0])
    assert isinstance(data, dict) and data, "the variants block must map each variant to its config diff"
    return data


def notebook_entry(source: str, var: str, key: str | None):
    """The config dict a notebook defines at top level (``var``, its entry whose key starts with ``key``),
    evaluated without the notebook's imports: earlier literal assignments are its only names."""
    tree = ast.parse((NB / source).read_text())
    ns: dict = {"__builtins__": {}, "dict": dict}

    def value(node):
        return eval(compile(ast.Expression(node), source, "eval"), ns)  # literals and dict() only: no builtins

    for node in tree.body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
            continue
        name = node.targets[0].id
        if name == var:
            if key is None:
                return value(node.value)
            assert isinstance(node.value, ast.Dict), f"{source}: {var} is not a dict literal"
            for k, v in zip(node.value.keys, node.value.values):
                if isinstance(k, ast.Constant) and str(k.value).split()[0] == key:
                    return value(v)
            raise AssertionError(f"{source}: {var} has no entry {key!r}")
        with contextlib.suppress(Exception):  # a name built from imports: the config dicts do not need it
            ns[name] = value(node.value)
    raise AssertionError(f"{source} defines no {var}")


# ----------------------------------------------------------------------------- the tests
def test_every_quoted_default_is_the_codes():
    quotes = DEFAULT_QUOTE.findall(PROSE)
    assert len(quotes) >= 20, "the card quotes its defaults as `field` = `value`"
    wrong = [(n, v, resolve(n)) for n, v in quotes if ast.literal_eval(v) != resolve(n)]
    assert not wrong, f"defaults the card quotes that the code does not have (name, card, code): {wrong}"


def test_notation_table_names_real_fields():
    rows = table_rows(section(1))
    assert len(rows) >= 15
    named = set()
    for r in rows:
        cell = DEFAULT_QUOTE.sub(lambda m: f"`{m.group(1)}`", r[2])  # drop the quoted values
        for s in spans(cell):
            if SNIPPET.match(s):
                continue  # a config snippet: test_every_config_snippet_builds
            if "." in s:
                resolve(s)
                continue
            assert s in FIELDS, f"the notation table names GRPOConfig.{s}, which is not a field"
            named.add(s)
    for must in ("num_generations", "epsilon", "epsilon_high", "beta", "scale_rewards", "advantage_estimator",
                 "importance_sampling_level", "max_completion_length", "kl_estimator", "loss_type"):
        assert must in named, f"the notation table should say which field sets {must}"


def test_every_config_snippet_builds():
    """Every `{field: value}` or `field: value` the card writes outside the variants block is a valid config."""
    snippets = [s for s in spans(PROSE) if SNIPPET.match(s)]
    assert len(snippets) >= 15
    for s in snippets:
        diff = yaml.safe_load(s if s.startswith("{") else "{" + s + "}")
        assert isinstance(diff, dict), s
        build(diff)


def test_estimator_table_covers_every_option():
    table = section(3)
    chosen = {"advantage_estimator": set(), "scale_rewards": set()}
    for r in table_rows(table):
        diff = yaml.safe_load(spans(r[0])[0])
        build(diff)
        for k, seen in chosen.items():
            if k in diff:
                seen.add(diff[k])
    scales = set(typing.get_args(typing.get_type_hints(GRPOConfig)["scale_rewards"]))
    assert chosen["scale_rewards"] == scales == set(advantages.ADVANTAGES)
    assert chosen["advantage_estimator"] | {"grpo"} == set(advantages.ESTIMATORS), (
        f"estimators the table lacks: {set(advantages.ESTIMATORS) - chosen['advantage_estimator'] - {'grpo'}}; "
        f"names the code lacks: {chosen['advantage_estimator'] - set(advantages.ESTIMATORS)}")


def test_aggregation_and_kl_tables_cover_every_option():
    hints = typing.get_type_hints(GRPOConfig)
    agg = set(first_column_names(section(4)))
    assert agg == set(losses.LOSS_TYPES) == set(typing.get_args(hints["loss_type"]))
    kl = set(first_column_names(section(5)))
    assert kl == set(losses.KL_ESTIMATORS) == set(typing.get_args(hints["kl_estimator"]))


def test_every_variant_diff_builds_and_differs_from_the_defaults():
    found = variants()
    for must in ("grpo_kl", "dr_grpo", "dapo", "gspo"):
        assert must in found, f"the variants block lacks {must}"
    for name, diff in found.items():
        assert isinstance(diff, dict), f"variant {name}: its diff must be a mapping"
        build(diff)
        same = [k for k, v in diff.items() if getattr(DEFAULT, k) == v]
        assert not same, f"variant {name} lists fields at their default values: {same}"


@pytest.mark.parametrize("name", sorted(VARIANT_SOURCES))
def test_variant_is_the_notebooks_config(name):
    source, var, key = VARIANT_SOURCES[name]
    entry = notebook_entry(source, var, key)
    entry = {"lora": entry} if key is None else entry
    want = {k: v for k, v in entry.items() if getattr(DEFAULT, k) != v}
    assert variants().get(name) == want, f"the card's {name} is not the config of {source} ({var})"


def test_quoted_code_lines_are_in_the_code():
    blocks = re.findall(r"```python\n# (grpo_kit/\S+\.py)\n(.*?)```", CARD, re.DOTALL)
    assert blocks, "the card quotes the lines of the kit that compute the objective"
    for path, body in blocks:
        have = {line.strip() for line in (ROOT / path).read_text().splitlines()}
        missing = [line.strip() for line in body.splitlines() if line.strip() and line.strip() not in have]
        assert not missing, f"lines the card quotes that {path} no longer has: {missing}"


def test_findings_table_is_diagnose_kinds():
    kinds = [n for n in first_column_names(section(7)) if n not in dict(dashboard.PANELS)]
    assert set(kinds) == set(diagnostics.KINDS) == set(diagnostics.DETECTORS), (
        f"kinds the card lacks: {set(diagnostics.KINDS) - set(kinds)}; "
        f"kinds the code lacks: {set(kinds) - set(diagnostics.KINDS)}")


def test_panel_table_is_the_dashboards():
    names = [n for n in first_column_names(section(7)) if n not in diagnostics.KINDS]
    assert names == [p for p, _ in dashboard.PANELS], "the panel table must list the dashboard's panels in order"


def test_every_linked_notebook_exists():
    links = re.findall(r"\]\(([^)\s]+)\)", CARD)
    notebooks = [link for link in links if link.endswith(".ipynb")]
    assert len(set(notebooks)) >= 10
    for link in notebooks:
        assert (NB / link).exists() and (NB / link).with_suffix(".py").exists(), f"REFERENCE.md links to {link}"
    assert not [link for link in links if not link.endswith(".ipynb") and not link.startswith("http")], \
        "the card links only to notebooks"
