"""Just enough PromQL to say which metrics a query reads and which labels it uses: metric
names (identifiers that are not functions, keywords or label names), the label names of
their matchers, and the labels of ``by``/``without``/``on``/``ignoring`` clauses."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

FUNCTIONS = frozenset(
    "abs absent absent_over_time avg avg_over_time bottomk ceil changes clamp clamp_max "
    "clamp_min count count_over_time count_values day_of_month day_of_week delta deriv exp "
    "floor group histogram_quantile holt_winters idelta increase irate label_join "
    "label_replace last_over_time ln log10 log2 max max_over_time min min_over_time "
    "predict_linear quantile quantile_over_time rate resets round scalar sgn sort sort_desc "
    "sqrt stddev stdvar sum sum_over_time time timestamp topk vector".split()
)
KEYWORDS = frozenset(
    "by without on ignoring group_left group_right bool and or unless offset".split()
)
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|\[[^\]]*\]|[A-Za-z_:][A-Za-z0-9_:]*|\{|\}|\(|\)|,|[^\s]')


@dataclass
class Reads:
    metrics: dict[str, set[str]] = field(default_factory=dict)
    """Metric name -> the label names its matchers name."""
    grouping: set[str] = field(default_factory=set)
    """Labels of by/without/on/ignoring clauses (each read from some metric of the query)."""


def reads(query: str) -> Reads:
    tokens = _TOKEN.findall(query)
    found = Reads()
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token in ("by", "without", "on", "ignoring", "group_left", "group_right"):
            if i + 1 < len(tokens) and tokens[i + 1] == "(":
                j = i + 2
                while j < len(tokens) and tokens[j] != ")":
                    if tokens[j] != ",":
                        found.grouping.add(tokens[j])
                    j += 1
                i = j + 1
                continue
        if re.fullmatch(r"[A-Za-z_:][A-Za-z0-9_:]*", token) and token not in KEYWORDS:
            is_call = i + 1 < len(tokens) and tokens[i + 1] in ("(", "by", "without")
            if not (is_call and token in FUNCTIONS):
                labels = found.metrics.setdefault(token, set())
                if i + 1 < len(tokens) and tokens[i + 1] == "{":
                    j = i + 2
                    while j < len(tokens) and tokens[j] != "}":
                        if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", tokens[j]) and tokens[j + 1] in (
                            "=",
                            "!",
                        ):
                            labels.add(tokens[j])
                        j += 1
                    i = j + 1
                    continue
        i += 1
    return found


def exposition_labels(text: str) -> dict[str, set[str]]:
    """Metric name -> every label name its samples carry, from Prometheus text format (a
    family without samples is there with no labels)."""
    found: dict[str, set[str]] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            name, kind = line.split()[2:4]
            found.setdefault(name, set())
            if kind == "counter":
                found.setdefault(name + "_total", set())
            if kind == "histogram":
                for suffix in ("_bucket", "_sum", "_count"):
                    found.setdefault(name + suffix, set())
            continue
        if not line or line.startswith("#"):
            continue
        name, _, rest = line.partition("{")
        name = name.split()[0]
        labels = set(re.findall(r'([A-Za-z_][A-Za-z0-9_]*)="', rest)) if rest else set()
        found.setdefault(name, set()).update(labels)
    return found
