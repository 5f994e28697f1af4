"""Invented names built from syllables, so nothing in the world collides with real knowledge.

A model cannot answer a question about "Velorin Tasko" from memory: it has to search.
Every name the forge hands out is unique unless a caller asks for a namesake on purpose.
"""

from __future__ import annotations

import random

_ONSETS = [
    "b",
    "d",
    "f",
    "g",
    "k",
    "l",
    "m",
    "n",
    "p",
    "r",
    "s",
    "t",
    "v",
    "z",
    "br",
    "dr",
    "kr",
    "tr",
    "th",
    "sk",
]
_VOWELS = ["a", "e", "i", "o", "u", "ae", "ia", "ou"]
_CODAS = ["", "", "", "n", "r", "l", "s", "k", "th", "nd", "sk", "rn"]

# Real words (and a few real proper nouns) that the syllables can spell; rejected on sight.
_REAL = {
    "bad",
    "bed",
    "bin",
    "bus",
    "den",
    "din",
    "dun",
    "fan",
    "fin",
    "fun",
    "gun",
    "kin",
    "lad",
    "led",
    "man",
    "men",
    "mud",
    "nun",
    "pan",
    "pen",
    "pin",
    "pun",
    "ran",
    "rum",
    "run",
    "sad",
    "sun",
    "tan",
    "ten",
    "tin",
    "ton",
    "van",
    "zen",
    "ban",
    "bar",
    "car",
    "far",
    "for",
    "tar",
    "tor",
    "sir",
    "par",
    "rome",
    "paris",
    "lima",
    "mali",
    "peru",
    "oslo",
    "bern",
    "kiev",
    "baku",
    "riga",
    "doha",
    "sana",
    "tokyo",
    "delhi",
    "milan",
    "turin",
    "lyon",
    "nice",
    "rabat",
    "dakar",
    "sofia",
    "tonga",
    "samoa",
}


class NameForge:
    """Deterministic generator of unique invented words and names (one per call)."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.used: set[str] = set()

    def _syllable(self) -> str:
        return self.rng.choice(_ONSETS) + self.rng.choice(_VOWELS) + self.rng.choice(_CODAS)

    def word(self, min_syllables: int = 2, max_syllables: int = 3) -> str:
        """A fresh capitalised word, never handed out before."""
        while True:
            n = self.rng.randint(min_syllables, max_syllables)
            w = "".join(self._syllable() for _ in range(n))
            if 4 <= len(w) <= 12 and w not in _REAL and w not in self.used:
                self.used.add(w)
                return w.capitalize()

    def title(self, words: int) -> str:
        """A multi-word invented title (films, books, bands, companies)."""
        return " ".join(self.word(2, 3) for _ in range(words))
