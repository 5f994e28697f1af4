"""The world's relations: how each is asked, phrased inside a longer question, and searched for.

One table drives three things that must agree: the single-hop sub-queries the backbone
writes, the multi-hop question text (nested noun phrases), and the parser the scripted
executor uses to read a sub-query back into (relation, subject, descriptor).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# How a named entity of each type is written inside a question ("the film Velora Tesk").
TYPE_NOUN: dict[str, str] = {
    "person": "",
    "country": "",
    "city": "the city",
    "film": "the film",
    "book": "the novel",
    "band": "the band",
    "company": "the company",
    "river": "the river",
}

ENTITY_OBJECTS = ("person", "city", "country")


@dataclass(frozen=True)
class Relation:
    key: str
    subject: str
    """Subject entity type."""
    object: str
    """Object entity type, or a literal kind: year, number, length, list (names, comma-separated)."""
    question: str
    """Single-hop question about `{s}`."""
    keywords: str
    """Words the scripted executor adds to the subject name when it searches."""
    phrase: str = ""
    """Noun phrase for the object, used when this hop is nested inside a longer question."""
    occupation: str = ""
    """For person-valued relations: the occupation the object must have (also its descriptor)."""

    @property
    def is_entity(self) -> bool:
        return self.object in ENTITY_OBJECTS

    def pattern(self) -> re.Pattern[str]:
        head, _, tail = self.question.partition("{s}")
        return re.compile(re.escape(head) + r"(?P<s>[^?\n]+?)" + re.escape(tail))


# One relation a line: Relation(key, subject, object, question, keywords, phrase, occupation).
# fmt: off
RELATIONS: dict[str, Relation] = {r.key: r for r in [
    Relation("directed_by", "film", "person", "Who directed {s}?", "directed film", "the director of {s}", "film director"),
    Relation("release_year", "film", "year", "In what year was {s} released?", "released"),
    Relation("written_by", "book", "person", "Who wrote {s}?", "novel written by", "the author of {s}", "novelist"),
    Relation("published_year", "book", "year", "In what year was {s} first published?", "first published"),
    Relation("lead_singer", "band", "person", "Who is the lead singer of {s}?", "lead singer", "the lead singer of {s}", "singer"),
    Relation("formed_in", "band", "city", "In which city was {s} formed?", "band formed in", "the city where {s} was formed"),
    Relation("formed_year", "band", "year", "In what year was {s} formed?", "band formed"),
    Relation("founded_by", "company", "person", "Who founded {s}?", "company founded by", "the founder of {s}", "entrepreneur"),
    Relation("headquartered_in", "company", "city", "In which city is {s} headquartered?", "headquartered", "the city where {s} is headquartered"),
    Relation("company_founded", "company", "year", "In what year was {s} founded?", "company founded"),
    Relation("born_in", "person", "city", "In which city was {s} born?", "born in", "the birthplace of {s}"),
    Relation("birth_year", "person", "year", "In what year was {s} born?", "born"),
    Relation("located_in", "city", "country", "In which country is {s} located?", "city in country", "the country where {s} is located"),
    Relation("population", "city", "number", "What is the population of {s}?", "population"),
    Relation("city_founded", "city", "year", "In what year was {s} founded?", "city founded"),
    Relation("capital", "country", "city", "What is the capital of {s}?", "capital", "the capital of {s}"),
    Relation("established", "country", "year", "In what year was {s} established?", "established as a state"),
    Relation("flows_through", "river", "country", "Through which country does {s} flow?", "river flows through", "the country that {s} flows through"),
    Relation("length", "river", "length", "How long is {s}?", "river length km"),
    Relation("cities", "country", "list", "Which cities are in {s}?", "cities of"),
]}
# fmt: on

LIST_RELATIONS = frozenset(k for k, r in RELATIONS.items() if r.object == "list")
"""Relations whose answer is a list of names (a wide task's first hop); never a bridge question's hop."""

PERSON_RELATIONS = frozenset(k for k, r in RELATIONS.items() if r.subject == "person")
"""Relations asked of a person: where namesakes make a sub-query ambiguous."""

RELATIONS_OF: dict[str, list[str]] = {}
for _r in RELATIONS.values():
    if _r.key not in LIST_RELATIONS:
        RELATIONS_OF.setdefault(_r.subject, []).append(_r.key)

_PATTERNS = [(r, r.pattern()) for r in RELATIONS.values()]
_DESCRIPTOR = re.compile(r"^(?P<name>.+?)\s*\((?P<desc>[^()]+)\)$")


def render_subject(entity_type: str, name: str, descriptor: str = "") -> str:
    """A named subject as a sub-query writes it: "the city Korvash (Dresk)", "Tavo Mirelk (novelist)"."""
    noun = TYPE_NOUN[entity_type]
    text = f"{noun} {name}" if noun else name
    return f"{text} ({descriptor})" if descriptor else text


@dataclass(frozen=True)
class ParsedSubQuery:
    relation: Relation
    name: str
    descriptor: str
    text: str
    """The matched sub-query text."""


def split_subject(subject: str) -> tuple[str, str, str]:
    """(type noun or "", bare name, descriptor) of a subject as written in a sub-query."""
    subject = subject.strip()
    noun = ""
    for candidate in sorted({n for n in TYPE_NOUN.values() if n}, key=len, reverse=True):
        if subject.lower().startswith(candidate + " "):
            noun, subject = candidate, subject[len(candidate) + 1 :]
            break
    m = _DESCRIPTOR.match(subject)
    if m:
        return noun, m.group("name").strip(), m.group("desc").strip()
    return noun, subject, ""


def parse_subquery(text: str, known_type=None) -> ParsedSubQuery | None:
    """Read a sub-query (anywhere in `text`) back into relation, subject name and descriptor.

    `known_type(name) -> set of entity types` lets bare names (people, countries) pick the
    right relation where two relations share a question pattern.
    """
    best: ParsedSubQuery | None = None
    for rel, pat in _PATTERNS:
        for m in pat.finditer(text):
            noun, name, desc = split_subject(m.group("s"))
            if TYPE_NOUN[rel.subject] != noun:
                continue
            if not noun and known_type is not None and rel.subject not in known_type(name):
                continue
            candidate = ParsedSubQuery(rel, name, desc, m.group(0))
            if best is None or len(candidate.text) > len(best.text):
                best = candidate
    return best
