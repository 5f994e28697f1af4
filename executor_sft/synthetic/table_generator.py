"""The synthetic world's tables and a scripted generator, so `recipes/build_wide_data.py` runs offline.

`world_tables` gives one table per country (its cities: City | Population | Founded), one of
every listed city with its country, and one per century of the cities founded in it (from 1 row
up, so the row rule has tables to drop). `ScriptedTableGenerator` answers the pipeline's
two prompts (`grpo.wide_data`): the request names the table's topic, columns and row count; an
answer is the table's first rows up to that count. With `noise`, the second answer of a drawn
share of tables has a third of its non-key cells changed, so the agreement rule has something to
drop, as a generator's disagreements would give it.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from executor_sft.grpo.wide_data import SourceTable
from executor_sft.llm.base import SamplingParams
from executor_sft.metrics.table import render_markdown_table
from executor_sft.synthetic._chat import first_user, result
from executor_sft.synthetic.world import WIDE_COLUMNS, World, load_world


def world_tables(world: World) -> list[SourceTable]:
    """Per country, its cities; then all core cities with their country (sorted by name)."""
    header = [column for column, _ in WIDE_COLUMNS]
    tables, everything = [], []
    for country in sorted((e for e in world.entities if e.type == "country"), key=lambda e: e.id):
        cities = [
            c
            for name in country.extra.get("cities", [])
            for c in world.named(name, "city")
            if c.facts.get("located_in") == country.id
        ]
        rows = [[c.name, *(world.value(c, rkey) for _, rkey in WIDE_COLUMNS[1:])] for c in cities]
        if rows:
            tables.append(
                SourceTable(f"cities-of-{country.id}", f"the cities of {country.name}", header, rows)
            )
        everything += [[r[0], country.name, r[1]] for r in rows]
    everything.sort(key=lambda r: r[0].lower())
    tables.append(
        SourceTable("all-cities", "cities of the world", ["City", "Country", "Population"], everything)
    )
    by_century: dict[int, list[list[str]]] = {}
    for country in (e for e in world.entities if e.type == "country"):
        for name in country.extra.get("cities", []):
            for c in world.named(name, "city"):
                if c.facts.get("located_in") == country.id:
                    year = world.value(c, "city_founded")
                    by_century.setdefault(int(year) // 100, []).append([c.name, country.name, year])
    for century, rows in sorted(by_century.items()):
        topic = f"cities founded in the {century}00s"
        tables.append(
            SourceTable(f"founded-{century}00s", topic, ["City", "Country", "Founded"], sorted(rows))
        )
    return tables


_FIELD = re.compile(r"^(Source table|Topic|Columns|Request): (.*)$", re.M)
_ROWS = re.compile(r"about (\d+) rows|up to (\d+)")


class ScriptedTableGenerator:
    """A scripted `ChatModel` for the two prompts of the wide-data pipeline."""

    def __init__(
        self, tables: list[SourceTable], noise: float = 0.0, seed: int = 0, name: str = "scripted-tables"
    ):
        self.tables = {t.id: t for t in tables}
        self.noise = noise
        self.seed = seed
        self.name = name

    async def chat(
        self, messages: list[Any], tools: list[dict] | None = None, sampling: SamplingParams | None = None
    ):
        text = first_user(messages)
        fields = dict(_FIELD.findall(text))
        table = self.tables[fields["Source table"].strip()]
        if "Request" not in fields:
            n = int(next(g for g in _ROWS.search(text).groups() if g))
            reply = (
                f"List up to {n} of {fields['Topic']}, giving {fields['Columns']} for each, "
                f"as a Markdown table with exactly the columns {fields['Columns']}."
            )
        else:
            n = int(next(g for g in _ROWS.search(fields["Request"]).groups() if g))
            second = sampling is not None and (sampling.seed or 0) % 2 == 1
            reply = self._answer(table, n, noisy=second and self._drawn(table.id))
        return result({"role": "assistant", "content": reply}, messages, self.name)

    def _drawn(self, table_id: str) -> bool:
        digest = hashlib.sha256(f"{self.seed}:{table_id}".encode()).digest()
        return int.from_bytes(digest[:4], "big") / 2**32 < self.noise

    def _answer(self, table: SourceTable, n: int, noisy: bool) -> str:
        rows = [list(r) for r in table.rows[:n]]
        if noisy:
            cells = [(i, j) for i in range(len(rows)) for j in range(1, len(table.header))]
            for k, (i, j) in enumerate(cells):
                if k % 3 == 0:
                    rows[i][j] = f"{rows[i][j]} (unverified)"
        return render_markdown_table(table.header, rows)


def scripted_generator(world: str, noise: float = 0.2, seed: int = 0) -> ScriptedTableGenerator:
    """The generator over a world directory's tables (a `{factory: ..., world: DIR}` mapping names it)."""
    return ScriptedTableGenerator(world_tables(load_world(world)), noise=noise, seed=seed)
