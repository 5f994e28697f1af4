"""table_scores against an independent port of WideSearch's evaluator, on 400 generated tables.

The peer: ByteDance-Seed/WideSearch, commit f726273b268e79422ec3121e5cc84e17aaf28b48 (the last
commit touching these files), `src/evaluation/evaluation.py` (`evaluate_single_query`),
`src/evaluation/metric_utils.py` (`norm_str`, `extract_number`, `exact_match`, `number_near`),
`src/evaluation/data_loader.py` (`WideSearchResponse.extract_dataframe`) and `src/utils/utils.py`
(`norm_column`). `peer_scores` below is written here from those definitions, without pandas:

- the reader: the run of `|` lines that starts at the first `|`; lines made only of `|`, `-`, ` `
  and `:` are dropped; the header line loses its spaces and case; cells are stripped; a column
  with an empty name is dropped (pandas' "Unnamed"); a blank cell reads as pandas' NaN, "nan";
- the prediction's column set must equal the required (gold) columns, else every score is 0;
- `drop_duplicates(subset=unique_columns)` on the raw cells, first row kept, on both sides;
- every column preprocessed by its pipeline, then an inner merge on the unique columns
  (every pair of equal keys is a matched row);
- a key cell of a matched row scores 1, another cell its metric; a row scores its minimum;
- precision/recall over rows and over rows x required columns; F1 with the peer's epsilon;
- success: the sorted preprocessed tables are equal, or all six of P/R/F1 are 1.

Not ported (docs/wide.md, "Table metrics", where we differ): the LLM mapping of column names and
key cells (`primary_key_preprocess`), LLM-judged columns (`llm_judge_column`), pandas' retyping of
cells, and the double count of a key that only repeats after preprocessing. The generator draws no
such case (it redraws a prediction whose keys repeat after preprocessing, counted in the test), and
`test_documented_difference_a_key_repeated_after_normalisation` pins the last one.
"""

import math
import random
import re

import pytest

from executor_sft.metrics import render_markdown_table, table_scores
from executor_sft.metrics.table import judged_cells

# ---- the port --------------------------------------------------------------------------------

_NAN = "nan"


def _peer_norm_column(name):
    return name.strip().lower().replace(" ", "")


def _peer_norm_str(content):
    return str(content).lower().strip().replace(" ", "").replace("*", "")


def _peer_extract_number(content):
    # First match of: optional sign, then digits '.' digits (leading digits optional) or digits
    # with an optional '.' and digits; an optional '%'. Commas are removed first.
    found = re.findall(r"[-+]?\d*\.\d+%?|[-+]?\d+\.?\d*%?", str(content).replace(",", ""))
    return found[0] if found else "NULL"


def _peer_float(text):
    if "%" in text:
        try:
            return float(text.replace("%", "")) / 100.0
        except ValueError:
            return None
    try:
        return float(text)
    except ValueError:
        return None


def _peer_number_near(response, target, criterion):
    r, t = _peer_float(response), _peer_float(target)
    if r is None or t is None:
        return 1.0 if (r is None and t is None and response == target) else 0.0
    return 1.0 if abs(r - t) <= abs(t) * criterion else 0.0


def _peer_exact_match(response, target):
    return 1.0 if response.lower() == target.lower() else 0.0


def _peer_read(text):
    """(columns, rows of dicts) as the peer's extractor reads a response, or None."""
    if text is None or text.count("|") < 4:
        return None
    start = text.index("|")
    run = re.match(r"(?:\|.*\n?)+", text[start:])
    lines = [line.strip() for line in run.group(0).strip().split("\n")]
    lines[0] = lines[0].replace(" ", "").lower()
    lines = [ln for ln in lines if "|" in ln and not set(ln) <= set("|- :")]
    split = [[c.strip() for c in ln.split("|")] for ln in lines]
    header, body = split[0], split[1:]
    names = [_peer_norm_column(h) for h in header]
    if len(set(n for n in names if n)) != len([n for n in names if n]):
        return "mangled"  # pandas renames a repeated column ("a.1"): the column sets then differ
    rows = []
    for cells in body:
        if len(cells) > len(header):
            raise AssertionError("the generator draws no row wider than its header")
        cells = cells + [""] * (len(header) - len(cells))
        rows.append({n: (c if c else _NAN) for n, c in zip(names, cells, strict=True) if n})
    return [n for n in names if n], rows


def _preprocess(value, pipeline):
    for step in pipeline.get("preprocess", []):
        value = _peer_norm_str(value) if step == "norm_str" else _peer_extract_number(value)
    return value


def _dedupe(rows, unique):
    seen, kept = set(), []
    for row in rows:
        key = tuple(row[u] for u in unique)
        if key not in seen:
            seen.add(key)
            kept.append(row)
    return kept


def peer_scores(prediction, gold_header, gold_rows, unique_columns, eval_pipeline):
    """(scores, multi): the seven numbers of `evaluate_single_query`, and whether a gold row
    matched more than one predicted row."""
    zero = (0.0,) * 7
    required = [_peer_norm_column(h) for h in gold_header]
    unique = [_peer_norm_column(u) for u in unique_columns]
    read = _peer_read(prediction)
    if read is None or read == "mangled" or set(read[0]) != set(required):
        return zero, False
    answer = [{c: (v if v else _NAN) for c, v in zip(required, row, strict=True)} for row in gold_rows]
    response = _dedupe(read[1], unique)
    answer = _dedupe(answer, unique)
    for rows in (response, answer):
        for row in rows:
            for col in required:
                row[col] = _preprocess(row[col], eval_pipeline[col])
    score = 0.0
    if len(answer) == len(response):
        as_tuples = lambda rows: sorted(tuple(r[c] for c in required) for r in rows)  # noqa: E731
        if as_tuples(answer) == as_tuples(response):
            score = 1.0
    tp_row = tp_item = 0.0
    multi = False
    for g in answer:
        matches = [r for r in response if all(r[u] == g[u] for u in unique)]
        multi = multi or len(matches) > 1
        for r in matches:
            cells = []
            for col in required:
                if col in unique:
                    cells.append(1.0)
                    continue
                item = eval_pipeline[col]
                if item["metric"] == ["number_near"]:
                    cells.append(_peer_number_near(r[col], g[col], item["criterion"]))
                else:
                    cells.append(_peer_exact_match(r[col], g[col]))
            tp_row += min(cells)
            tp_item += sum(cells)
    n_pred, n_gold = len(response), len(answer)
    p_row = tp_row / n_pred if n_pred > 0 else 0.0
    r_row = tp_row / n_gold if n_gold > 0 else 0.0
    p_item = tp_item / (n_pred * len(required)) if n_pred > 0 else 0.0
    r_item = tp_item / (n_gold * len(required)) if n_gold > 0 else 0.0

    def f1(p, r):
        return 2 * p * r / (p + r) if p + r > 1e-9 else 0.0

    f_row, f_item = f1(p_row, r_row), f1(p_item, r_item)
    if p_item == r_item == f_item == 1.0 and p_row == r_row == f_row == 1.0:
        score = 1.0
    return (p_item, r_item, f_item, p_row, r_row, f_row, score), multi


# ---- the generator ---------------------------------------------------------------------------

TEXT = ["Red Sky", "Blue Hour", "A", "An", "The", "B", "C", "Grey Dawn", "**Orla**", "St. Ives", "Ana Vel"]
NUMBERS = ["1989", "198.9", "973517", "522,727", "12%", "0.12", "3.5", "-4", "1,200", "2001", "7"]
KINDS = {
    "text": ({"preprocess": ["norm_str"], "metric": ["exact_match"]}, TEXT),
    "raw": ({"preprocess": [], "metric": ["exact_match"]}, TEXT),
    "number": ({"preprocess": ["extract_number"], "metric": ["number_near"], "criterion": 0.0}, NUMBERS),
    "near": ({"preprocess": ["extract_number"], "metric": ["number_near"], "criterion": 0.1}, NUMBERS),
}
RULE = {
    "text": {"metric": "exact_match", "preprocess": "norm_str"},
    "raw": {"metric": "exact_match", "preprocess": "none"},
    "number": {"metric": "number_near", "preprocess": "extract_number", "criterion": 0.0},
    "near": {"metric": "number_near", "preprocess": "extract_number", "criterion": 0.1},
}
REWRITES = {
    "973517": ["973517.0", "973,517"],
    "522,727": ["522727", "522,727.00"],
    "1,200": ["about 1,200", "1200", "1,100"],
    "198.9": ["1989"],
    "1989": ["198.9", "1989.0", "c. 1989"],
    "12%": ["0.12", "12"],
    "3.5": ["3.6", "3.9"],
    "Red Sky": ["red  sky", "RED SKY", "Red-Sky"],
    "A": ["a", "**A**"],
    "The": ["the", "THE"],
}


def _variant(rng, value, pool):
    roll = rng.random()
    if roll < 0.45:
        return value
    if roll < 0.7 and value in REWRITES:
        return rng.choice(REWRITES[value])
    if roll < 0.8:
        return ""
    if roll < 0.9:
        return value.upper() if rng.random() < 0.5 else f"**{value}**"
    return rng.choice(pool)


def _gold(rng):
    n_cols = rng.randint(2, 4)
    kinds = [rng.choice(["text", "text", "raw", "number"])] + [
        rng.choice(list(KINDS)) for _ in range(n_cols - 1)
    ]
    header = [f"Col {i} {k.title()}" for i, k in enumerate(kinds)]
    unique = [header[0]] + ([header[1]] if n_cols > 2 and rng.random() < 0.2 else [])
    pipeline = {_peer_norm_column(h): KINDS[k][0] for h, k in zip(header, kinds, strict=True)}
    rules = {h: RULE[k] for h, k in zip(header, kinds, strict=True)}
    rows, keys = [], set()
    for _ in range(rng.randint(1, 6) * 3):
        row = [
            rng.choice(KINDS[k][1]) if (i < len(unique) or rng.random() > 0.1) else ""
            for i, k in enumerate(kinds)
        ]
        key = tuple(_preprocess(row[i], KINDS[kinds[i]][0]) for i in range(len(unique)))
        if key not in keys:
            keys.add(key)
            rows.append(row)
        if len(rows) >= 6:
            break
    return header, kinds, unique, pipeline, rules, rows


def _prediction(rng, header, kinds, rows):
    if rng.random() < 0.04:
        return rng.choice([None, "", "I could not find them.", "Red Sky, 1990"])
    order = list(range(len(header)))
    if rng.random() < 0.5:
        rng.shuffle(order)
    names = [header[i] for i in order]
    names = [
        n.upper() if rng.random() < 0.2 else n.replace(" ", "  ") if rng.random() < 0.2 else n for n in names
    ]
    roll = rng.random()
    if roll < 0.04:
        names = names[:-1]
        order = order[:-1]
    elif roll < 0.08:
        names = [*names, "Extra"]
        order = [*order, None]
    if rng.random() < 0.12:  # the gold rows in another order, under these headers
        out = [[row[i] if i is not None else "x" for i in order] for row in rows]
        rng.shuffle(out)
        return render_markdown_table(names, out)
    out = []
    for row in rows:
        if rng.random() < 0.15:
            continue
        out.append([_variant(rng, row[i], KINDS[kinds[i]][1]) if i is not None else "x" for i in order])
        if rng.random() < 0.12:  # the same key again, with other cells
            out.append(
                [
                    c if (i is not None and i == 0) else _variant(rng, "?", TEXT)
                    for c, i in zip(out[-1], order, strict=True)
                ]
            )
    for _ in range(rng.choice([0, 0, 0, 1, 2])):
        out.append([rng.choice(KINDS[kinds[i]][1]) if i is not None else "y" for i in order])
    rng.shuffle(out)
    return render_markdown_table(names, out)


def _ours(prediction, header, unique, rules):
    s = table_scores(prediction, render_markdown_table(header, GOLD_ROWS[0]), unique, rules=rules)
    return (s.item_precision, s.item_recall, s.item_f1, s.row_precision, s.row_recall, s.row_f1, s.success)


GOLD_ROWS = [None]


def _same(a, b):
    return all(math.isclose(x, y, rel_tol=0, abs_tol=1e-12) for x, y in zip(a, b, strict=True))


def test_400_generated_tables_agree_with_the_port():
    rng = random.Random(42)
    compared = redrawn = disagreements = 0
    perfect = partial = zero = 0
    while compared < 400:
        header, kinds, unique, pipeline, rules, rows = _gold(rng)
        GOLD_ROWS[0] = rows
        prediction = _prediction(rng, header, kinds, rows)
        peer, multi = peer_scores(prediction, header, rows, unique, pipeline)
        if multi:
            redrawn += 1
            continue
        compared += 1
        ours = _ours(prediction, header, unique, rules)
        if not _same(ours, peer):
            disagreements += 1
            print("DISAGREE", prediction, header, rows, unique, ours, peer)
        perfect += peer[6] == 1.0
        zero += peer[2] == 0.0
        partial += 0 < peer[2] < 1
        # Against itself a gold table scores 1/1/1, by both.
        self_peer, _ = peer_scores(render_markdown_table(header, rows), header, rows, unique, pipeline)
        assert self_peer[2] == self_peer[5] == self_peer[6] == 1.0
        self_ours = _ours(render_markdown_table(header, rows), header, unique, rules)
        assert (self_ours[2], self_ours[5], self_ours[6]) == (1.0, 1.0, 1.0)
    print(
        f"compared {compared}, disagreements {disagreements}, redrawn {redrawn}, perfect {perfect}, partial {partial}, zero {zero}"
    )
    assert disagreements == 0
    # The draw covers perfect, partial and zero scores, not one kind only.
    assert perfect > 20 and partial > 100 and zero > 20
    assert redrawn < compared // 4


def test_the_issue_cases_against_the_port():
    header, unique = ["Grade", "Count"], ["Grade"]
    rows = [["A", "198.9"], ["B", "973517"], ["C", "522,727"]]
    gold = render_markdown_table(header, rows)
    pipeline = {"grade": KINDS["text"][0], "count": KINDS["number"][0]}
    # A/An/The keys are not emptied: the table against itself is perfect.
    s = table_scores(gold, gold, unique)
    assert (s.item_f1, s.row_f1, s.success) == (1.0, 1.0, 1.0)
    # Numbers are parsed: 1989 is not 198.9, 973517.0 is 973517, 522727 is 522,727.
    pred = render_markdown_table(header, [["A", "1989"], ["B", "973517.0"], ["C", "522727"]])
    peer, _ = peer_scores(pred, header, rows, unique, pipeline)
    assert _same(_ours_md(pred, gold, unique), peer) and peer[3] == 2 / 3
    # A repeated key: the first row wins.
    pred = render_markdown_table(header, [["A", "198.9"], ["A", "5"], ["B", "973517"], ["C", "522,727"]])
    assert _ours_md(pred, gold, unique)[6] == 1.0 == peer_scores(pred, header, rows, unique, pipeline)[0][6]
    # A blank predicted cell is an item: rows x columns, 5 of 6 right.
    pred = render_markdown_table(header, [["A", ""], ["B", "973517"], ["C", "522,727"]])
    assert _ours_md(pred, gold, unique)[0] == 5 / 6 == peer_scores(pred, header, rows, unique, pipeline)[0][0]


def _ours_md(pred, gold, unique, rules=None):
    s = table_scores(pred, gold, unique, rules=rules)
    return (s.item_precision, s.item_recall, s.item_f1, s.row_precision, s.row_recall, s.row_f1, s.success)


def test_documented_difference_a_key_repeated_after_normalisation():
    # "Red Sky" and "red sky" are distinct raw keys, so the peer keeps both and merges both with the
    # gold row: row recall 2/1. Both count as predicted here too, but only the first aligns.
    header, unique, rows = ["Film", "Year"], ["Film"], [["Red Sky", "1990"]]
    pred = render_markdown_table(header, [["Red Sky", "1990"], ["red sky", "1990"]])
    peer, multi = peer_scores(
        pred, header, rows, unique, {"film": KINDS["text"][0], "year": KINDS["number"][0]}
    )
    assert multi and peer[4] == 2.0
    assert _ours_md(pred, render_markdown_table(header, rows), unique) == (
        0.5,
        1.0,
        2 / 3,
        0.5,
        1.0,
        2 / 3,
        0.0,
    )


DRAFT_FIRST = "Draft:\n| City | Founded |\n| Orla | ? |\n\nAnswer:\n"
TABLE = "| City | Founded |\n|---|---|\n| Orla | 1461 |\n| Vemm | 1667 |"


@pytest.mark.parametrize(
    ("prediction", "port_reads"),
    [
        (DRAFT_FIRST + TABLE, [{"city": "Orla", "founded": "?"}]),  # the draft
        ("\n".join("  " + line for line in TABLE.splitlines()), []),  # the header alone
        (TABLE.replace("| 1461 |", "| 1461 | founded by traders |"), None),  # pandas shifts the row
    ],
    ids=["draft-before-the-answer", "indented", "one-extra-cell"],
)
def test_tables_the_peer_reads_otherwise(prediction, port_reads):
    """docs/wide.md, "Tables the peer reads otherwise": we score the answer's table; the peer reads
    another one (the port's reader shows which; pandas' shift of a wide row is not ported)."""
    header, rows = ["City", "Founded"], [["Orla", "1461"], ["Vemm", "1667"]]
    assert _ours_md(prediction, render_markdown_table(header, rows), ["City"]) == (1.0,) * 7
    if port_reads is None:
        with pytest.raises(AssertionError, match="no row wider than its header"):
            _peer_read(prediction)
        return
    assert _peer_read(prediction) == (["city", "founded"], port_reads)
    pipeline = {"city": KINDS["text"][0], "founded": KINDS["number"][0]}
    assert peer_scores(prediction, header, rows, ["City"], pipeline)[0][6] == 0.0


def test_llm_judged_columns_send_only_aligned_cells():
    header, unique = ["Film", "Budget"], ["Film"]
    gold = render_markdown_table(header, [["Red Sky", "1,200"], ["Blue Hour", "300"]])
    pred = render_markdown_table(header, [["Red Sky", "about 1,200"], ["Grey Dawn", "5"]])
    rules = {"Budget": {"metric": "llm_judge", "criterion": "within 10%"}}
    assert judged_cells(pred, gold, unique, rules=rules) == [("budget", "about 1,200", "1,200")]
    # Scored by a judge that accepts it: 2 of 4 predicted items, 2 of 4 gold items.
    s = table_scores(pred, gold, unique, rules=rules, judge=lambda c, p, g: 1.0)
    assert (s.item_precision, s.item_recall, s.row_precision) == (0.5, 0.5, 0.5)
    # Without a judge the column is compared like an exact-match column.
    assert table_scores(pred, gold, unique, rules=rules).item_precision == 0.25


@pytest.mark.parametrize(
    ("rules", "message"),
    [
        ({"Budget": {"metric": "fuzzy"}}, "metric"),
        ({"Nope": {"metric": "exact_match"}}, "not gold columns"),
        ({"Budget": {"metric": "number_near", "criterion": -1}}, "tolerance"),
    ],
)
def test_bad_rules_are_data_errors(rules, message):
    gold = render_markdown_table(["Film", "Budget"], [["Red Sky", "1"]])
    with pytest.raises(ValueError, match=message):
        table_scores(gold, gold, ["Film"], rules=rules)


async def test_score_answer_sends_judged_columns_to_the_configured_judge():
    from executor_sft.metrics.judge import LLMJudge
    from executor_sft.metrics.scoring import score_answer
    from executor_sft.schema import Question
    from tests.support.doubles import ScriptedChatModel

    gold = render_markdown_table(["Film", "Budget"], [["Red Sky", "1,200"], ["Blue Hour", "300"]])
    question = Question(
        id="w1",
        question="Give each film's budget.",
        golden_answers=[gold],
        unique_columns=["Film"],
        column_rules={"Budget": {"metric": "llm_judge", "criterion": "within 10% counts"}},
    )
    pred = render_markdown_table(["Film", "Budget"], [["Red Sky", "about 1,200"], ["Blue Hour", "300"]])
    model = ScriptedChatModel(default="True")
    metrics = await score_answer(question, pred, LLMJudge(model))
    assert (metrics.item_f1, metrics.row_f1, metrics.success) == (1.0, 1.0, 1.0)
    prompts = [r["messages"][0]["content"] for r in model.requests]
    assert len(prompts) == 2 and any("within 10% counts" in p and "about 1,200" in p for p in prompts)
    # Without a judge the column is compared exactly: "about 1,200" is not "1,200".
    assert (await score_answer(question, pred, None)).item_f1 == 0.75


def test_the_evaluation_table_keeps_judged_scores_and_rescores_the_rest():
    from executor_sft.eval.aggregate import summarize
    from executor_sft.schema import Episode, EpisodeMetrics, Question

    gold = render_markdown_table(["Film", "Budget"], [["Red Sky", "1,200"]])
    pred = render_markdown_table(["Film", "Budget"], [["Red Sky", "about 1,200"]])
    judged = {"Budget": {"metric": "llm_judge", "criterion": "within 10%"}}
    scored = EpisodeMetrics(em=1.0, f1=1.0, item_f1=1.0, row_f1=1.0, success=1.0)

    def episode(rules):
        q = Question(id="w", question="?", golden_answers=[gold], unique_columns=["Film"], column_rules=rules)
        return Episode(episode_id="w#0", question=q, answer=pred, metrics=scored)

    # The judge accepted "about 1,200" when the episode ran: the table keeps that.
    assert summarize([episode(judged)]).average["em"] == 1.0
    # Without judged columns the table rescores by the cells (number rule: "about 1,200" = 1,200).
    assert summarize([episode(None)]).average["em"] == 1.0
    text_rule = {"Budget": {"metric": "exact_match"}}
    assert summarize([episode(text_rule)]).average["em"] == 0.0
