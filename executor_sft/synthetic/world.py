"""A deterministic fictional world: entities, one passage each, and multi-hop questions.

Why fictional: a model cannot answer from memory, so every correct answer has to come from
the corpus. Why namesakes: a first search for an ambiguous name ("Tavo Mirelk", four people)
surfaces the wrong person, and only a reformulated search with the disambiguating attribute
("Tavo Mirelk film director born in") finds the right one. Those sub-queries are what the
`info_gain_multi_search` filter stratum is made of.

`write_world(out_dir, seed, n_entities, n_questions)` writes:
- `corpus.jsonl`: `{"id", "title", "text"}`, one passage per entity (title = entity name);
- `questions.jsonl` (+ `questions_train.jsonl`, `questions_test.jsonl`): question rows
  readable by `executor_sft.data.load_questions`, with `decomposition` =
  `[{question, answer, gold_doc_id, relation, subject, descriptor, depends_on, ambiguous}]`;
  with `wide_share > 0` some are wide tasks (docs/wide.md): "For each city in Dresk, give its
  population and founding year", a gold Markdown table and `unique_columns`, whose first hop
  lists the cities (each country's passage then names its cities) and the rest fan out per city;
- `subqueries_train.jsonl`, `subqueries_test.jsonl`: the single-hop sub-queries as question
  rows (held out: no test sub-query text appears in train);
- `world.json`: manifest (seed, sizes, statistics, files) and the entity table.
The same seed and sizes give byte-identical files.

`decoupled=True` (docs/synthetic.md, "The decoupled world") closes the shortcuts by which the
surface told whether a second search was needed: namesakes are written in the core template with
another core occupation, most plain people are named with a descriptor too, some plain people
have name-order twins that crowd the first search, and the held-out split is by subject entity.
"""

from __future__ import annotations

import json
import math
import random
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from executor_sft.files import read_jsonl, write_jsonl
from executor_sft.metrics.table import render_markdown_table
from executor_sft.synthetic.names import NameForge
from executor_sft.synthetic.relations import (
    LIST_RELATIONS,
    PERSON_RELATIONS,
    RELATIONS,
    RELATIONS_OF,
    Relation,
    render_subject,
)

WORLD_FORMAT = "executor_sft.synthetic.world/v1"

_OCCUPATION_WORK = {
    "painter": "river landscapes",
    "chemist": "crystal research",
    "architect": "public libraries",
    "politician": "regional politics",
    "sculptor": "bronze figures",
    "astronomer": "variable stars",
    "photographer": "harbour portraits",
    "cartographer": "mountain maps",
}
_CITY_FEATURES = [
    "old stone harbour",
    "covered market",
    "university",
    "cathedral",
    "textile mills",
    "botanical garden",
    "lighthouse",
    "spring festival",
    "clock tower",
    "salt works",
]
_FILLER_OCCUPATIONS = sorted(_OCCUPATION_WORK)
_FILM_GENRES = ["drama", "comedy", "mystery", "war", "musical", "western", "science fiction"]
_BAND_GENRES = ["folk", "rock", "jazz", "electronic", "punk", "soul"]
_INDUSTRIES = ["shipping", "textile", "software", "mining", "brewing", "publishing", "rail"]
_STATE_FORMS = ["Republic", "Kingdom", "Federation", "Principality"]
_CORE_OCCUPATIONS = ["film director", "novelist", "singer", "entrepreneur"]
CORE_TEMPLATE = "core_template"
"""Entity.extra flag (decoupled world): a namesake or twin written in the core passage template."""
BARE = "bare"
"""Entity.extra flag (decoupled world): a plain person that sub-queries name without a descriptor."""
ASIDE = "aside"
"""Entity.extra key (decoupled world): a society a person chairs, a sentence that varies passage length."""
TWIN_OF = "twin_of"
"""Entity.extra key (decoupled world): the id of the person whose name-order twin this one is."""


@dataclass
class Entity:
    id: str
    type: str
    name: str
    facts: dict[str, Any] = field(default_factory=dict)
    """Relation key -> object entity id (entity relations) or int (literals)."""
    descriptor: str = ""
    """What tells this entity from a namesake: occupation (people), country name (cities)."""
    kind: str = "core"
    """core (can appear in questions; a fuller passage), namesake (an ambiguity distractor) or filler."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Flavour used only in the passage text (genre, industry, state form, ...)."""


@dataclass
class Hop:
    question: str
    answer: str
    gold_doc_id: str
    relation: str
    subject: str
    subject_id: str
    descriptor: str = ""
    depends_on: int | None = None
    """Index of the hop whose answer is this hop's subject (bridge), None when given."""
    ambiguous: bool = False
    """The subject's name is shared by another entity of the same type."""
    answer_aliases: list[str] = field(default_factory=list)


@dataclass
class WorldQuestion:
    id: str
    question: str
    golden_answers: list[str]
    type: str
    """bridge, comparison or wide."""
    decomposition: list[Hop]
    compare: dict[str, Any] | None = None
    """Comparisons: {"pick": "min"|"max", "candidates": [name per hop]}."""
    split: str = "train"
    unique_columns: list[str] | None = None
    """Wide tasks: the columns that identify a row of the gold table (`golden_answers[0]`)."""

    @property
    def positive_doc_ids(self) -> list[str]:
        return list(dict.fromkeys(h.gold_doc_id for h in self.decomposition))

    def row(self) -> dict[str, Any]:
        """The question row as written to questions.jsonl."""
        return {
            "id": self.id,
            "question": self.question,
            "golden_answers": self.golden_answers,
            "dataset": "synthetic",
            "positive_doc_ids": self.positive_doc_ids,
            "type": self.type,
            "split": self.split,
            "decomposition": [asdict(h) for h in self.decomposition],
            "compare": self.compare,
            **({"unique_columns": self.unique_columns} if self.unique_columns else {}),
        }


def _a(noun: str) -> str:
    return f"an {noun}" if noun[:1].lower() in "aeiou" else f"a {noun}"


DECOUPLED_WORLD: dict[str, Any] = {
    "decoupled": True,
    "ambiguity": 0.5,
    "namesakes": 5,
    "twin_share": 0.8,
    "bare_share": 0.2,
    "test_share": 0.3,
}
"""The decoupled ablation's world options (ours): with top_k 3, 5 same-worded distractors leave the
meant passage out of the first results about half the time; half the people ambiguous and 80% of
the plain ones with twins keep "no descriptor" (never a miss) rare; 0.3 held out gives 50-60
held-out person sub-queries at 600 entities and 400 questions. Measured in
bench/results/demo_ablation_decoupled.md."""

WIDE_COLUMNS: tuple[tuple[str, str | None], ...] = (
    ("City", None),
    ("Population", "population"),
    ("Founded", "city_founded"),
)
"""A wide task's table: (column, the relation that fills it; None for the key column, the city's name)."""
WIDE_QUESTION = "For each city in {country}, give its population and founding year."


def _fmt_literal(kind: str, value: int) -> tuple[str, list[str]]:
    if kind == "number":
        return f"{value:,}", [str(value)]
    if kind == "length":
        return f"{value:,} km", [f"{value:,} kilometres", f"{value:,}"]
    return str(value), []


class World:
    """Entities with lookups by id and name, their passages, and the questions about them."""

    def __init__(self, entities: list[Entity], questions: list[WorldQuestion], meta: dict[str, Any]):
        self.entities = entities
        self.questions = questions
        self.meta = meta
        self.by_id = {e.id: e for e in entities}
        self.by_name: dict[str, list[Entity]] = {}
        for e in entities:
            self.by_name.setdefault(e.name.lower(), []).append(e)
        self._by_text: dict[str, Entity] | None = None
        self.question_by_text = {q.question: q for q in questions}

    # --- reading facts --------------------------------------------------------------------
    def value(self, entity: Entity, relation: str) -> str:
        """The answer string of `relation` for `entity` (a name, a formatted literal, or a list of names)."""
        if relation in LIST_RELATIONS:
            return ", ".join(entity.extra[relation])
        rel = RELATIONS[relation]
        raw = entity.facts[relation]
        return self.by_id[raw].name if rel.is_entity else _fmt_literal(rel.object, raw)[0]

    def aliases(self, entity: Entity, relation: str) -> list[str]:
        """Every accepted form of the answer, the main one first."""
        if relation in LIST_RELATIONS:
            return [self.value(entity, relation)]
        rel = RELATIONS[relation]
        raw = entity.facts[relation]
        if rel.is_entity:
            obj = self.by_id[raw]
            return [obj.name, *obj.extra.get("aliases", [])]
        main, more = _fmt_literal(rel.object, raw)
        return [main, *more]

    def has_fact(self, entity: Entity, relation: str) -> bool:
        return relation in (entity.extra if relation in LIST_RELATIONS else entity.facts)

    def named(self, name: str, entity_type: str | None = None) -> list[Entity]:
        return [e for e in self.by_name.get(name.lower(), []) if entity_type in (None, e.type)]

    def types_of(self, name: str) -> set[str]:
        return {e.type for e in self.by_name.get(name.lower(), [])}

    def is_ambiguous(self, entity: Entity) -> bool:
        return len(self.named(entity.name, entity.type)) > 1

    def resolve(self, entity_type: str, name: str, descriptor: str = "") -> Entity | None:
        """The entity a subject refers to; with namesakes and no descriptor, None (unknowable)."""
        found = self.named(name, entity_type)
        if descriptor:
            found = [e for e in found if e.descriptor.lower() == descriptor.lower()] or []
        return found[0] if len(found) == 1 else None

    # --- passages -------------------------------------------------------------------------
    def sentences(self, e: Entity) -> list[str]:
        """The passage of an entity, one fact-bearing sentence at a time."""
        if e.type == "person":
            return self._person_sentences(e)
        if e.type == "city":
            return self._city_sentences(e)
        f, n = e.facts, e.name
        name_of = lambda key: self.by_id[f[key]].name  # noqa: E731
        two_sentences = {
            "country": lambda: (
                f"{n}, officially the {e.extra['form']} of {n}, is a country whose capital is "
                f"{name_of('capital')}.",
                f"{n} was established as a state in {f['established']}.",
            ),
            "film": lambda: (
                f"{n} is a {e.extra['genre']} film directed by {name_of('directed_by')}.",
                f"{n} was released in {f['release_year']} and runs {e.extra['minutes']} minutes.",
            ),
            "book": lambda: (
                f"{n} is a novel written by {name_of('written_by')}.",
                f"{n} was first published in {f['published_year']}.",
            ),
            "band": lambda: (
                f"{n} is a {e.extra['genre']} band formed in {name_of('formed_in')} in {f['formed_year']}.",
                f"The lead singer of {n} is {name_of('lead_singer')}.",
            ),
            "company": lambda: (
                f"{n} is a {e.extra['industry']} company founded by {name_of('founded_by')} in "
                f"{f['company_founded']}.",
                f"{n} is headquartered in {name_of('headquartered_in')}.",
            ),
            "river": lambda: (
                f"The {n} is a river that flows through {name_of('flows_through')}.",
                f"The {n} has a length of {f['length']:,} km.",
            ),
        }
        if e.type not in two_sentences:
            raise ValueError(f"unknown entity type {e.type!r} ({e.id})")
        out = list(two_sentences[e.type]())
        if e.extra.get("cities"):
            out.append(f"The cities of {n} are: {self.value(e, 'cities')}.")
        return out

    def _person_sentences(self, e: Entity) -> list[str]:
        n = e.name
        born_in = self.by_id[e.facts["born_in"]].name
        out = [f"{n} is {_a(e.descriptor)} born in {born_in} in {e.facts['birth_year']}."]
        if e.kind != "core" and not e.extra.get(CORE_TEMPLATE):
            return [*out, f"{n} is known for {_OCCUPATION_WORK.get(e.descriptor, 'a long career')}."]
        works = e.extra.get("works", [])
        listed = " and ".join(works) if len(works) <= 2 else ", ".join(works[:-1]) + " and " + works[-1]
        if e.extra.get(CORE_TEMPLATE):
            # The decoupled world's one template for every person: no sentence's length says the occupation.
            out += [
                f"{n} is credited with {listed}.",
                f"Over a career of {e.extra['decades']} decades, this person received several regional awards.",
            ]
            if e.extra.get(ASIDE):
                out.append(f"This person also chairs the {e.extra[ASIDE]} society.")
            return out
        verb = {
            "film director": "directed the films",
            "novelist": "wrote the novels",
            "singer": "sings lead vocals for",
            "entrepreneur": "founded",
        }[e.descriptor]
        return [
            *out,
            f"{n} {verb} {listed}.",
            f"Over a career of {e.extra['decades']} decades, this {e.descriptor} received several regional awards.",
        ]

    def _city_sentences(self, e: Entity) -> list[str]:
        f, n = e.facts, e.name
        out = [
            f"{n} is a city in the country of {self.by_id[f['located_in']].name}.",
            f"{n} was founded in {f['city_founded']} and has a population of {f['population']:,}.",
        ]
        if e.extra.get("capital_of"):
            out.append(f"{n} is the capital of {e.extra['capital_of']}.")
        if e.kind == "core" or e.extra.get(CORE_TEMPLATE):
            out.append(f"{n} is known for its {e.extra['feature']}.")
        return out

    def passage_text(self, e: Entity) -> str:
        return " ".join(self.sentences(e))

    def evidence(self, e: Entity, relation: str) -> str:
        """The sentence of e's passage that states `relation` (contains the answer)."""
        answer = self.value(e, relation)
        for s in self.sentences(e):
            if answer in s:
                return s
        raise AssertionError(f"{e.id}: no sentence states {relation} = {answer!r}")

    def entity_of_passage(self, title: str, text: str) -> Entity | None:
        """Which entity a retrieved passage describes (by its exact text)."""
        if self._by_text is None:
            self._by_text = {self.passage_text(e): e for e in self.entities}
        return self._by_text.get(text.strip())

    def corpus_rows(self) -> list[dict[str, str]]:
        return [{"id": e.id, "title": e.name, "text": self.passage_text(e)} for e in self.entities]

    def split(self, name: str) -> list[WorldQuestion]:
        return [q for q in self.questions if q.split == name]


# ------------------------------------------------------------------------------------------
# generation
# ------------------------------------------------------------------------------------------


@dataclass
class WorldConfig:
    seed: int = 0
    n_entities: int = 800
    n_questions: int = 400
    ambiguity: float = 0.8
    """Share of question-bearing people whose name is shared with namesakes; about ambiguity/8 of
    the cities also come in same-name groups (one notable city, `namesakes` small towns)."""
    namesakes: int = 3
    """Distractor namesakes per ambiguous person (>= the retriever's k, so a bare-name search misses)."""
    comparison_share: float = 0.3
    test_share: float = 0.2
    hop_weights: tuple[float, float, float] = (0.55, 0.3, 0.15)
    """Relative frequency of 2-, 3- and 4-hop bridge questions."""
    wide_share: float = 0.0
    """Share of wide tasks (a table over every city of a country, at most one per country with 3 or
    more cities); each country's passage then lists its cities. 0 keeps the world as before."""
    decoupled: bool = False
    """The decoupled world (module docstring); False keeps the world with cues, byte for byte."""
    twin_share: float = 0.5
    """Decoupled: share of plain question-bearing people with `namesakes` name-order twins."""
    bare_share: float = 0.2
    """Decoupled: share of plain question-bearing people named without a descriptor (never twins')."""

    def __post_init__(self) -> None:
        checks = {
            "n_entities": self.n_entities >= 60,
            "n_questions": self.n_questions >= 1,
            "ambiguity": 0.0 <= self.ambiguity <= 1.0,
            "namesakes": 0 <= self.namesakes <= len(_FILLER_OCCUPATIONS),
            "comparison_share": 0.0 <= self.comparison_share <= 1.0,
            "test_share": 0.0 <= self.test_share < 1.0,
            "wide_share": 0.0 <= self.wide_share <= 1.0,
            "twin_share": 0.0 <= self.twin_share <= 1.0,
            "bare_share": self.bare_share >= 0.0 and self.twin_share + self.bare_share <= 1.0 + 1e-9,
            "hop_weights": len(self.hop_weights) == 3 and min(self.hop_weights) >= 0 < sum(self.hop_weights),
        }
        bad = [k for k, ok in checks.items() if not ok]
        if bad:
            raise ValueError(
                f"WorldConfig: invalid {', '.join(f'{k}={getattr(self, k)!r}' for k in bad)} "
                "(n_entities >= 60, shares in [0, 1], namesakes <= 8)"
            )


class _Builder:
    def __init__(self, cfg: WorldConfig):
        self.cfg = cfg
        self.rng = random.Random(cfg.seed)
        self.forge = NameForge(self.rng)
        self.entities: list[Entity] = []
        self.counters: dict[str, int] = {}
        self.given: list[str] = []
        self.surnames: list[str] = []
        self.full_names: set[str] = set()

    def add(self, etype: str, name: str, **kw: Any) -> Entity:
        i = self.counters[etype] = self.counters.get(etype, 0) + 1
        e = Entity(id=f"{etype}-{i:04d}", type=etype, name=name, **kw)
        self.entities.append(e)
        return e

    def person_name(self) -> str:
        """A fresh full name; given names and surnames repeat across people (near-namesakes)."""
        if not self.given:
            n = max(8, self.cfg.n_entities // 12)
            self.given = [self.forge.word(2, 2) for _ in range(n)]
            self.surnames = [self.forge.word(2, 3) for _ in range(n * 2)]
        while True:
            name = f"{self.rng.choice(self.given)} {self.rng.choice(self.surnames)}"
            if name not in self.full_names:
                self.full_names.add(name)
                return name

    def build(self) -> list[Entity]:
        cfg, rng = self.cfg, self.rng
        n = cfg.n_entities
        n_country, n_city = max(5, n // 40), max(12, n // 7)
        n_river, n_film, n_book = max(3, n // 30), max(4, n // 12), max(4, n // 14)
        n_band, n_company = max(3, n // 20), max(3, n // 20)

        countries = self._countries(n_country)
        cities, core_cities = self._cities(countries, n_city)
        self._capitals(countries, cities, core_cities)
        if cfg.wide_share > 0:
            for country in countries:
                country.extra["cities"] = [c.name for c in cities if c.facts["located_in"] == country.id]

        directors = self._people("film director", math.ceil(n_film / 2), core_cities)
        novelists = self._people("novelist", math.ceil(n_book / 2), core_cities)
        singers = self._people("singer", n_band, core_cities)
        founders = self._people("entrepreneur", math.ceil(n_company / 1.5), core_cities)

        self._works(
            "film",
            n_film,
            directors,
            "directed_by",
            "release_year",
            lambda: {"genre": rng.choice(_FILM_GENRES), "minutes": rng.randint(80, 170)},
        )
        self._works("book", n_book, novelists, "written_by", "published_year", dict)
        bands = self._works(
            "band", n_band, singers, "lead_singer", "formed_year", lambda: {"genre": rng.choice(_BAND_GENRES)}
        )
        for b in bands:
            b.facts["formed_in"] = rng.choice(core_cities).id
        companies = self._works(
            "company",
            n_company,
            founders,
            "founded_by",
            "company_founded",
            lambda: {"industry": rng.choice(_INDUSTRIES)},
        )
        for c in companies:
            c.facts["headquartered_in"] = rng.choice(core_cities).id
        for _ in range(n_river):
            r = self.add("river", self.forge.word(2, 3))
            r.facts.update(flows_through=rng.choice(countries).id, length=rng.randint(40, 3200))

        if cfg.decoupled:
            self._decoupled_people(directors + novelists + singers + founders, cities)
        else:
            self._namesakes(directors + novelists + singers + founders, cities)
        # Fillers: unrelated people that make the corpus less regular.
        for _ in range(max(0, n - len(self.entities))):
            f = self.add(
                "person", self.person_name(), descriptor=rng.choice(_FILLER_OCCUPATIONS), kind="filler"
            )
            f.facts.update(born_in=rng.choice(cities).id, birth_year=rng.randint(1900, 1990))
        return self.entities

    def _countries(self, count: int) -> list[Entity]:
        rng = self.rng
        countries = [
            self.add("country", self.forge.word(2, 3), extra={"form": rng.choice(_STATE_FORMS)})
            for _ in range(count)
        ]
        for c in countries:
            c.facts["established"] = rng.randint(1650, 1990)
            c.extra["aliases"] = [f"{c.extra['form']} of {c.name}"]
        return countries

    def _cities(self, countries: list[Entity], count: int) -> tuple[list[Entity], list[Entity]]:
        """Every city, and the core ones (a name of their own).

        Some names are shared by a notable city and `namesakes` small towns elsewhere. Only
        cities with a name of their own are reached by bridge hops; shared ones are compared.
        """
        cfg, rng = self.cfg, self.rng
        n_groups = max(1, round(count * cfg.ambiguity / 8))
        cities: list[Entity] = []
        shared: list[Entity] = []
        while len(cities) < count:
            name = self.forge.word(2, 3)
            group = len(shared) < n_groups
            homes = (
                rng.sample(countries, min(len(countries), 1 + cfg.namesakes))
                if group
                else [rng.choice(countries)]
            )
            taken: dict[str, set[int]] = {"city_founded": set(), "population": set()}
            for j, country in enumerate(homes):
                city = self._city(name, country, "core" if j == 0 else "namesake", taken)
                cities.append(city)
                if group:
                    shared.append(city)
        shared_ids = {c.id for c in shared}
        return cities, [c for c in cities if c.id not in shared_ids]

    def _city(self, name: str, country: Entity, kind: str, taken: dict[str, set[int]]) -> Entity:
        """One city of a same-name group; namesakes never share a fact, so a wrong-city answer is wrong."""
        rng = self.rng
        city = self.add("city", name, descriptor=country.name, kind=kind)
        city.facts["located_in"] = country.id
        for key, draw in (
            ("city_founded", lambda: rng.randint(900, 1900)),
            ("population", lambda: rng.randint(8, 2500) * 1000 + rng.randint(0, 999)),
        ):
            value = draw()
            while value in taken[key]:
                value = draw()
            taken[key].add(value)
            city.facts[key] = value
        city.extra["feature"] = rng.choice(_CITY_FEATURES)
        return city

    def _capitals(self, countries: list[Entity], cities: list[Entity], core_cities: list[Entity]) -> None:
        """A capital for every country, among its core cities (a new city where it has none)."""
        rng = self.rng
        for country in countries:
            home = [c for c in core_cities if c.facts["located_in"] == country.id]
            if not home:
                home = [self.add("city", self.forge.word(2, 3), descriptor=country.name)]
                home[0].extra["feature"] = rng.choice(_CITY_FEATURES)
                home[0].facts.update(
                    located_in=country.id,
                    city_founded=rng.randint(900, 1900),
                    population=rng.randint(200, 3000) * 1000,
                )
                cities.append(home[0])
                core_cities.append(home[0])
            capital = rng.choice(home)
            country.facts["capital"] = capital.id
            capital.extra["capital_of"] = country.name

    def _people(self, occupation: str, count: int, core_cities: list[Entity]) -> list[Entity]:
        rng = self.rng
        people = []
        for _ in range(count):
            p = self.add("person", self.person_name(), descriptor=occupation)
            p.facts.update(born_in=rng.choice(core_cities).id, birth_year=rng.randint(1900, 1985))
            p.extra.update(works=[], decades=rng.randint(2, 5))
            people.append(p)
        return people

    def _works(
        self,
        etype: str,
        count: int,
        creators: list[Entity],
        rel: str,
        year_key: str,
        extra: Callable[[], dict[str, Any]],
    ) -> list[Entity]:
        rng = self.rng
        works = []
        for i in range(count):
            creator = creators[i] if i < len(creators) else rng.choice(creators)
            w = self.add(etype, self.forge.title(rng.choice([1, 2])), extra=extra())
            w.facts[rel] = creator.id
            w.facts[year_key] = min(2023, creator.facts["birth_year"] + rng.randint(22, 60))
            creator.extra["works"].append(w.name)
            works.append(w)
        return works

    def _namesakes(self, core_people: list[Entity], cities: list[Entity]) -> None:
        """Other people with exactly the same name as some core people: other occupation, birthplace, year."""
        cfg, rng = self.cfg, self.rng
        for p in rng.sample(core_people, round(cfg.ambiguity * len(core_people))):
            occupations = rng.sample(_FILLER_OCCUPATIONS, cfg.namesakes)
            for occ in occupations:
                d = self.add("person", p.name, descriptor=occ, kind="namesake")
                d.facts["born_in"] = rng.choice([c for c in cities if c.id != p.facts["born_in"]]).id
                d.facts["birth_year"] = rng.choice(
                    [y for y in range(1900, 1990) if y != p.facts["birth_year"]]
                )

    def _decoupled_people(self, core_people: list[Entity], cities: list[Entity]) -> None:
        """The decoupled world's distractors, all in the core template with another core occupation.

        A share `ambiguity` of the core people get `namesakes` exact namesakes; of the rest,
        `twin_share` get `namesakes` name-order twins ("Mirelk Tavo" for "Tavo Mirelk": the same
        words to a bag-of-words search, another person to a reader) and `bare_share` are named
        without a descriptor. Either way the first search ranks the meant passage among
        same-worded ones by text length alone, so whether it misses shows only in the passages."""
        cfg, rng = self.cfg, self.rng
        for p in core_people:
            p.extra[CORE_TEMPLATE] = True
            # Lesser works (titles only) so that how much a person lists does not say the occupation.
            p.extra["works"] += [self.forge.title(rng.choice([1, 2])) for _ in range(rng.randint(0, 2))]
            if rng.random() < 0.5:
                p.extra[ASIDE] = self.forge.title(rng.randint(1, 3))
        shared = set(p.id for p in rng.sample(core_people, round(cfg.ambiguity * len(core_people))))
        plain = [p for p in core_people if p.id not in shared]
        order = rng.sample(plain, len(plain))
        n_twins, n_bare = round(cfg.twin_share * len(plain)), round(cfg.bare_share * len(plain))
        for p in core_people:
            if p.id in shared:
                self._core_template_person(p.name, p, cities)
        for p in order[:n_twins]:
            given, surname = p.name.split(" ", 1)
            twin_name = f"{surname} {given}"
            if twin_name in self.full_names:
                continue  # that order is someone else's name already
            self.full_names.add(twin_name)
            for twin in self._core_template_person(twin_name, p, cities):
                twin.extra[TWIN_OF] = p.id
        for p in order[n_twins : n_twins + n_bare]:
            p.extra[BARE] = True
        # City namesakes read like the notable city: the same sentences, another country.
        for c in self.entities:
            if c.type == "city" and c.kind == "namesake":
                c.extra[CORE_TEMPLATE] = True

    def _core_template_person(self, name: str, p: Entity, cities: list[Entity]) -> list[Entity]:
        """`namesakes` people called `name`, each with a core occupation other than p's, works
        (titles only) and another birthplace and year: core-template passages with a wrong attribute.

        Each one's passage is a few search tokens longer or shorter than p's (drawn at random), so
        a bare-name search ranks p among them by chance, not by p's occupation or output."""
        cfg, rng = self.cfg, self.rng
        reader = World(self.entities, [], {})
        target_len = _search_tokens(reader.passage_text(p))
        out = []
        others = [o for o in _CORE_OCCUPATIONS if o != p.descriptor]
        for _ in range(cfg.namesakes):
            d = self.add("person", name, descriptor=rng.choice(others), kind="namesake")
            d.facts["born_in"] = rng.choice([c for c in cities if c.id != p.facts["born_in"]]).id
            d.facts["birth_year"] = rng.choice([y for y in range(1900, 1990) if y != p.facts["birth_year"]])
            want = target_len + rng.choice([-4, -3, -2, -1, 1, 2, 3, 4])
            best: tuple[int, dict[str, Any]] | None = None
            for _ in range(60):
                works = [self.forge.title(rng.choice([1, 2])) for _ in range(rng.randint(1, 5))]
                d.extra = {"works": works, "decades": rng.randint(2, 5), CORE_TEMPLATE: True}
                if rng.random() < 0.5:
                    d.extra[ASIDE] = self.forge.title(rng.randint(1, 3))
                gap = abs(_search_tokens(reader.passage_text(d)) - want)
                if best is None or gap < best[0]:
                    best = (gap, d.extra)
                if gap == 0:
                    break
            d.extra = best[1] if best else d.extra
            out.append(d)
        return out


_STOPWORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "but",
        "by",
        "for",
        "if",
        "in",
        "into",
        "is",
        "it",
        "no",
        "not",
        "of",
        "on",
        "or",
        "such",
        "that",
        "the",
        "their",
        "then",
        "there",
        "these",
        "they",
        "this",
        "to",
        "was",
        "will",
        "with",
    ]
)
_TOKEN = re.compile(r"\w+")


def _search_tokens(text: str) -> int:
    """A passage's length as a bag-of-words search counts it (words, English stopwords aside)."""
    return sum(1 for w in _TOKEN.findall(text.lower()) if w not in _STOPWORDS)


def _person_descriptor(subj: Entity, descriptor: str) -> str:
    """The descriptor a sub-query names a person by: none for the decoupled world's bare people."""
    return "" if subj.extra.get(BARE) else descriptor


def _bridge(world: World, rng: random.Random, n_hops: int) -> WorldQuestion | None:
    """A random chain of n_hops relations from a work or river, or None when it dead-ends."""
    start_type = rng.choices(list(_START_WEIGHTS), weights=list(_START_WEIGHTS.values()))[0]
    subject = rng.choice([e for e in world.entities if e.type == start_type])
    rels: list[Relation] = []
    path: list[Entity] = [subject]
    for i in range(n_hops):
        last = i == n_hops - 1
        options = [
            RELATIONS[k]
            for k in RELATIONS_OF[path[-1].type]
            if (last or RELATIONS[k].is_entity) and not (not last and k == "capital")
        ]
        if not options:
            return None
        # Hops through people are favoured: that is where the namesakes (and second searches) are.
        rel = rng.choices(options, weights=[2 if r.object == "person" else 1 for r in options])[0]
        rels.append(rel)
        if rel.is_entity:
            path.append(world.by_id[path[-1].facts[rel.key]])
    hops: list[Hop] = []
    for i, rel in enumerate(rels):
        subj = path[i]
        # People are described by the role that led to them; a city or country is never ambiguous here.
        if subj.type == "city" and world.is_ambiguous(subj):
            return None
        descriptor = rels[i - 1].occupation if i > 0 and subj.type == "person" else ""
        descriptor = _person_descriptor(subj, descriptor)
        hops.append(
            Hop(
                question=rel.question.format(s=render_subject(subj.type, subj.name, descriptor)),
                answer=world.value(subj, rel.key),
                gold_doc_id=subj.id,
                relation=rel.key,
                subject=subj.name,
                subject_id=subj.id,
                descriptor=descriptor,
                depends_on=i - 1 if i > 0 else None,
                ambiguous=world.is_ambiguous(subj),
                answer_aliases=world.aliases(subj, rel.key)[1:],
            )
        )
    phrase = render_subject(path[0].type, path[0].name)
    for rel in rels[:-1]:
        phrase = rel.phrase.format(s=phrase)
    text = rels[-1].question.format(s=phrase)
    final = hops[-1]
    return WorldQuestion("", text, [final.answer, *final.answer_aliases], "bridge", hops)


_START_WEIGHTS = {"film": 3, "book": 2, "band": 2, "company": 2, "river": 1}

_COMPARISONS = [
    # (weight, entity type, relation, pick, question template with {a} {b}); people and cities
    # weigh more because their names can be ambiguous.
    (1, "film", "release_year", "min", "Which film was released first, {a} or {b}?"),
    (1, "book", "published_year", "min", "Which novel was published earlier, {a} or {b}?"),
    (3, "person", "birth_year", "min", "Who was born first, {a} or {b}?"),
    (2, "city", "population", "max", "Which city has the larger population, {a} or {b}?"),
    (2, "city", "city_founded", "min", "Which city was founded earlier, {a} or {b}?"),
    (1, "river", "length", "max", "Which river is longer, {a} or {b}?"),
    (1, "company", "company_founded", "min", "Which company was founded earlier, {a} or {b}?"),
]


def _comparison(world: World, rng: random.Random) -> WorldQuestion | None:
    _, etype, rkey, pick, template = rng.choices(_COMPARISONS, weights=[c[0] for c in _COMPARISONS])[0]
    pool = [e for e in world.entities if e.type == etype and e.kind == "core"]
    if etype == "city":  # prefer cities whose name is shared: the name alone is ambiguous
        shared = [e for e in pool if world.is_ambiguous(e)]
        pool = shared if len(shared) >= 2 and rng.random() < 0.6 else pool
    a, b = rng.sample(pool, 2)
    if a.facts[rkey] == b.facts[rkey] or a.name == b.name:
        return None
    rel = RELATIONS[rkey]

    def mention(e: Entity) -> tuple[str, str]:
        """(text inside the long question, descriptor used in the sub-query)."""
        if e.type == "person":
            return f"{e.name} the {e.descriptor}", _person_descriptor(e, e.descriptor)
        if e.type == "city":
            return f"{e.name} in {e.descriptor}", e.descriptor
        if e.type == "river":
            return f"the {e.name}", ""
        return e.name, ""

    hops = []
    for e in (a, b):
        _, desc = mention(e)
        hops.append(
            Hop(
                question=rel.question.format(s=render_subject(e.type, e.name, desc)),
                answer=world.value(e, rkey),
                gold_doc_id=e.id,
                relation=rkey,
                subject=e.name,
                subject_id=e.id,
                descriptor=desc,
                ambiguous=world.is_ambiguous(e),
                answer_aliases=world.aliases(e, rkey)[1:],
            )
        )
    winner = (
        min((a, b), key=lambda e: e.facts[rkey])
        if pick == "min"
        else max((a, b), key=lambda e: e.facts[rkey])
    )
    text = template.format(a=mention(a)[0], b=mention(b)[0])
    return WorldQuestion(
        "", text, [winner.name], "comparison", hops, compare={"pick": pick, "candidates": [a.name, b.name]}
    )


def _wide(world: World, rng: random.Random) -> WorldQuestion | None:
    """A wide task over one country's cities: list them first (one hop), then two facts per city."""
    country = rng.choice([e for e in world.entities if e.type == "country"])
    names = country.extra.get("cities", [])
    if len(names) < 3 or len({n.lower() for n in names}) < len(names):
        return None  # WideSeek-R1 keeps tables of 3 rows or more; a name must identify its row
    cities = [next(c for c in world.named(n, "city") if c.facts["located_in"] == country.id) for n in names]
    hops = [
        Hop(
            question=RELATIONS["cities"].question.format(s=render_subject("country", country.name)),
            answer=world.value(country, "cities"),
            gold_doc_id=country.id,
            relation="cities",
            subject=country.name,
            subject_id=country.id,
        )
    ]
    for city in cities:
        for _, rkey in WIDE_COLUMNS[1:]:
            hops.append(
                Hop(
                    question=RELATIONS[rkey].question.format(
                        s=render_subject("city", city.name, country.name)
                    ),
                    answer=world.value(city, rkey),
                    gold_doc_id=city.id,
                    relation=rkey,
                    subject=city.name,
                    subject_id=city.id,
                    descriptor=country.name,
                    depends_on=0,
                    ambiguous=world.is_ambiguous(city),
                    answer_aliases=world.aliases(city, rkey)[1:],
                )
            )
    header = [column for column, _ in WIDE_COLUMNS]
    rows = [[c.name, *(world.value(c, rkey) for _, rkey in WIDE_COLUMNS[1:])] for c in cities]
    return WorldQuestion(
        "",
        WIDE_QUESTION.format(country=country.name),
        [render_markdown_table(header, rows)],
        "wide",
        hops,
        unique_columns=[header[0]],
    )


def _assign_splits(
    questions: list[WorldQuestion], rng: random.Random, test_share: float, by_subject: bool = False
) -> None:
    """Hold out whole groups of questions that share a sub-query, so no test sub-query is trained
    on; `by_subject`: that share a person's name, so no test person (nor namesake group) is."""
    order = _shared_subquery_groups(questions, by_subject)
    rng.shuffle(order)
    target = round(test_share * len(questions))
    n_test = 0
    for g in order:
        if n_test >= target:
            break
        if n_test + len(g) > target * 1.5:
            continue
        for i in g:
            questions[i].split = "test"
        n_test += len(g)


def _shared_subquery_groups(questions: list[WorldQuestion], by_subject: bool = False) -> list[list[int]]:
    """Indices of questions linked by a shared sub-query, or `by_subject` a shared person's name
    (union-find), ordered by first index."""
    parent = list(range(len(questions)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner: dict[str, int] = {}
    for i, q in enumerate(questions):
        for h in q.decomposition:
            if by_subject and h.relation not in PERSON_RELATIONS:
                continue  # cities and works recur across many questions; people are what is evaluated
            key = h.subject.lower() if by_subject else h.question
            if key in owner:
                parent[find(i)] = find(owner[key])
            else:
                owner[key] = i
    groups: dict[int, list[int]] = {}
    for i in range(len(questions)):
        groups.setdefault(find(i), []).append(i)
    return sorted(groups.values(), key=lambda g: g[0])


def generate_world(seed: int = 0, n_entities: int = 800, n_questions: int = 400, **options: Any) -> World:
    """Build the world in memory; `options` are further `WorldConfig` fields."""
    cfg = WorldConfig(seed=seed, n_entities=n_entities, n_questions=n_questions, **options)
    entities = _Builder(cfg).build()
    world = World(entities, [], {})
    rng = random.Random(f"questions-{cfg.seed}")
    questions: list[WorldQuestion] = []
    seen: set[str] = set()
    attempts = 0
    while len(questions) < n_questions and attempts < n_questions * 50:
        attempts += 1
        if cfg.wide_share and rng.random() < cfg.wide_share:
            q = _wide(world, rng)
        elif rng.random() < cfg.comparison_share:
            q = _comparison(world, rng)
        else:
            n_hops = rng.choices([2, 3, 4], weights=cfg.hop_weights)[0]
            q = _bridge(world, rng, n_hops)
        if q is None or q.question in seen:
            continue
        seen.add(q.question)
        q.id = f"synthetic-{len(questions):05d}"
        questions.append(q)
    if len(questions) < n_questions:
        raise ValueError(
            f"could only build {len(questions)} distinct questions from {len(entities)} entities; "
            f"raise n_entities or lower n_questions"
        )
    _assign_splits(questions, rng, cfg.test_share, by_subject=cfg.decoupled)
    recorded = asdict(cfg)
    if not cfg.wide_share:  # worlds without wide tasks record the config they always did
        del recorded["wide_share"]
    if not cfg.decoupled:  # so do worlds with cues
        for key in ("decoupled", "twin_share", "bare_share"):
            del recorded[key]
    world = World(entities, questions, {"config": recorded})
    world.meta["stats"] = world_stats(world)
    return world


def world_stats(world: World) -> dict[str, Any]:
    """Sizes and shares worth knowing before collecting (written into world.json)."""
    hops = [h for q in world.questions for h in q.decomposition]
    by_type: dict[str, int] = {}
    for e in world.entities:
        by_type[e.type] = by_type.get(e.type, 0) + 1
    n_hops: dict[str, int] = {}
    for q in world.questions:
        key = f"{q.type}_{len(q.decomposition)}"
        n_hops[key] = n_hops.get(key, 0) + 1
    return {
        "entities": len(world.entities),
        "entities_by_type": dict(sorted(by_type.items())),
        "questions": len(world.questions),
        "questions_by_shape": dict(sorted(n_hops.items())),
        "questions_by_split": {s: len(world.split(s)) for s in ("train", "test")},
        "sub_queries": len(hops),
        "ambiguous_sub_query_share": round(sum(h.ambiguous for h in hops) / max(1, len(hops)), 4),
    }


# ------------------------------------------------------------------------------------------
# files
# ------------------------------------------------------------------------------------------


def _subquery_rows(
    questions: list[WorldQuestion], exclude: set[str], with_subject: bool = False
) -> list[dict[str, Any]]:
    """One row per distinct sub-query; `with_subject` adds its subject's id and descriptor (the
    decoupled world's evaluation resamples subjects)."""
    rows, seen = [], set(exclude)
    for q in questions:
        for i, h in enumerate(q.decomposition):
            if h.question in seen:
                continue
            seen.add(h.question)
            rows.append(
                {
                    "id": f"{q.id}-h{i}",
                    "question": h.question,
                    "golden_answers": [h.answer, *h.answer_aliases],
                    "dataset": "synthetic",
                    "positive_doc_ids": [h.gold_doc_id],
                    "type": "single_hop_ambiguous" if h.ambiguous else "single_hop",
                    "relation": h.relation,
                    **({"subject_id": h.subject_id, "descriptor": h.descriptor} if with_subject else {}),
                }
            )
    return rows


def _sibling_rows(world: World, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """For each held-out person sub-query, the same person asked the other person relations (same
    descriptor): more held-out people's sub-queries to evaluate on, none of them in training."""
    seen = {r["question"] for r in rows}
    out = []
    for r in rows:
        if r["relation"] not in PERSON_RELATIONS:
            continue
        person = world.by_id[r["subject_id"]]
        for key in sorted(PERSON_RELATIONS - {r["relation"]}):
            text = RELATIONS[key].question.format(s=render_subject("person", person.name, r["descriptor"]))
            if text in seen:
                continue
            seen.add(text)
            out.append(
                {
                    **r,
                    "id": f"{r['id']}-{key}",
                    "question": text,
                    "golden_answers": world.aliases(person, key),
                    "relation": key,
                }
            )
    return out


def write_world(
    out_dir: str | Path, seed: int = 0, n_entities: int = 800, n_questions: int = 400, **options: Any
) -> World:
    """Generate the world and write its files (see the module docstring); returns the world."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    world = generate_world(seed, n_entities, n_questions, **options)
    write_jsonl(out / "corpus.jsonl", world.corpus_rows())
    write_jsonl(out / "questions.jsonl", [q.row() for q in world.questions])
    for split in ("train", "test"):
        write_jsonl(out / f"questions_{split}.jsonl", [q.row() for q in world.split(split)])
    decoupled = bool(world.meta["config"].get("decoupled"))
    train_rows = _subquery_rows(world.split("train"), set(), decoupled)
    write_jsonl(out / "subqueries_train.jsonl", train_rows)
    test_rows = _subquery_rows(world.split("test"), {r["question"] for r in train_rows}, decoupled)
    if decoupled:
        test_rows += _sibling_rows(world, test_rows)
    write_jsonl(out / "subqueries_test.jsonl", test_rows)
    manifest = {
        "format": WORLD_FORMAT,
        **world.meta,
        "files": [
            "corpus.jsonl",
            "questions.jsonl",
            "questions_train.jsonl",
            "questions_test.jsonl",
            "subqueries_train.jsonl",
            "subqueries_test.jsonl",
        ],
        "entities": [asdict(e) for e in world.entities],
    }
    (out / "world.json").write_text(
        json.dumps(manifest, ensure_ascii=False, indent=1) + "\n", encoding="utf-8"
    )
    return world


def load_world(out_dir: str | Path) -> World:
    """Read a world written by `write_world` (entities from world.json, questions from questions.jsonl)."""
    out = Path(out_dir)
    manifest = json.loads((out / "world.json").read_text(encoding="utf-8"))
    if manifest.get("format") != WORLD_FORMAT:
        raise ValueError(
            f"{out / 'world.json'}: field 'format': expected {WORLD_FORMAT!r}, got {manifest.get('format')!r}"
        )
    entities = [Entity(**e) for e in manifest.pop("entities")]
    questions = [
        WorldQuestion(
            id=row["id"],
            question=row["question"],
            golden_answers=row["golden_answers"],
            type=row["type"],
            decomposition=[Hop(**h) for h in row["decomposition"]],
            compare=row.get("compare"),
            split=row.get("split", "train"),
            unique_columns=row.get("unique_columns"),
        )
        for row in read_jsonl(out / "questions.jsonl")
    ]
    return World(entities, questions, manifest)
