"""The built-in deterministic tokenizer: no downloads, honest counts, fast.

It is what the emulator counts with (usage, `/tokenize`, `/detokenize`, prefix-cache block hashes)
and what servescope falls back to when no model tokenizer is available.

The rule (fixed, documented, versioned by `VOCAB_VERSION`):

1. Pre-tokenize `text` with one regex, left to right, into pieces of four kinds::

       ` ?[A-Za-z]+`       a run of ASCII letters, with at most one leading space
       ` ?[0-9]`           one digit, with at most one leading space
       ` ?[^\\sA-Za-z0-9]`  one other non-space character, with at most one leading space
       `\\s`                one whitespace character

2. A letter run is split greedily, longest match first (at most 9 characters; the leading space
   stays on the first piece), into vocabulary pieces. The vocabulary holds, each with and without
   a leading space: every 1-, 2- and 3-letter lowercase string, the capitalised 1- and 2-letter
   strings, and ~400 common English words (lowercase and capitalised). A letter the vocabulary
   cannot place falls back to its byte.
3. A digit, an ASCII punctuation mark or an ASCII whitespace character is one token (a digit or
   punctuation mark with a leading space is one token too). Any other character becomes its UTF-8
   bytes, one token per byte (ids 0..255); a leading space before it is its own token.

Guarantees (tested in tests/unit/test_tokenizer.py):

- `decode(encode(t)) == t` for every str `t` (byte fallback makes it lossless).
- Prefix stability: for `ids = encode(t)` and any `k`, `encode(decode(ids[:k])) == ids[:k]` unless the cut
  splits the bytes of one non-ASCII character.
- Word ids (`word_ids()`: whole words with a leading space) concatenate freely: any sequence of them
  decodes to text that re-encodes to exactly that sequence, so a prompt built from N of them is N tokens.
- Counts are honest for English: about 1 token per common word, ~3 characters per token otherwise
  (real BPE vocabularies give ~4), 1 token per digit, 1 per punctuation mark.

The vocabulary (~37k entries) is built lazily on first use, once per process (not at import).
"""

from __future__ import annotations

import re
from functools import lru_cache

__all__ = ["Tokenizer", "get_tokenizer", "VOCAB_VERSION"]

VOCAB_VERSION = "servescope-words-1"

_PIECE_RE = re.compile(r" ?[A-Za-z]+| ?[0-9]| ?[^\sA-Za-z0-9]|\s")
_MAX_PIECE = 9
_LOWER = "abcdefghijklmnopqrstuvwxyz"
_UPPER = _LOWER.upper()
_PUNCT = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"
_SPACE_CHARS = " \t\n\r\x0b\x0c"

# Common English words (4..8 letters; shorter ones are in the 1-3 letter tables already).
_COMMON = """
about above after again against also always another answer around asked away back because
been before began being below best better between both bring build built business called came
cannot case change children city close come common company could country course data days
death development different does done down during each early easy either else end enough even
ever every example explain face fact family far feel few field find first following food form
found four free friend from full general give given going good government great group hand
have having head hear help here high himself history home house however important include
information inside into issue itself just keep kind know known large last later least leave
left less life light like line list little live local long look made make making many matter
mean means member might mind model money more most mother move much music must name national
near need never new next night nothing number often once only open order other others over
own part people perhaps person place plan play point possible power present problem program
public question quite rather read real really reason result right room said same school second
seem seen service several should show side since small social some something sometimes state
still story student study such sure system take taken than that their them then there these
they thing things think this those though thought three through time today together told
toward turn under understand until upon used using very want water week well were what when
where whether which while white whole whose why will with within without word work world would
write year years yes young your greater number numbers compare value values decimal place
places tenths hundredths step steps first second third reasoning therefore benchmark server
token tokens request requests latency throughput model models memory cache batch prompt output
input serving engine decode prefill hello please thank thanks question answer okay wait hmm
let maybe check again actually means result results correct indeed consider another approach
"""


class Tokenizer:
    """Deterministic word-piece tokenizer; see the module docstring for the rule."""

    __slots__ = ("_piece_to_id", "_id_to_bytes", "_id_to_text", "_word_ids", "_eos_id")

    def __init__(self) -> None:
        pieces: list[str] = []
        seen: set[str] = set()

        def add(p: str) -> None:
            if p not in seen:
                seen.add(p)
                pieces.append(p)

        singles = list(_LOWER) + list(_UPPER) + list("0123456789") + list(_PUNCT)
        for p in singles:
            add(p)
            add(" " + p)
        for c in _SPACE_CHARS:
            add(c)
        for a in _LOWER:
            for b in _LOWER:
                add(a + b)
                add(" " + a + b)
                add(a.upper() + b)
                add(" " + a.upper() + b)
        for a in _LOWER:
            for b in _LOWER:
                for c in _LOWER:
                    add(a + b + c)
                    add(" " + a + b + c)
        words = sorted(set(_COMMON.split()))
        for w in words:
            for v in (w, w.capitalize()):
                add(v)
                add(" " + v)
        self._id_to_bytes: list[bytes] = [bytes([i]) for i in range(256)]
        self._id_to_text: list[str] = [bytes([i]).decode("latin-1") for i in range(256)]
        self._piece_to_id: dict[str, int] = {}
        for p in pieces:
            self._piece_to_id[p] = len(self._id_to_bytes)
            self._id_to_bytes.append(p.encode())
            self._id_to_text.append(p)
        self._eos_id = len(self._id_to_bytes)
        self._id_to_bytes.append(b"")
        self._id_to_text.append("")
        # Whole words with a leading space: common words and 3-letter pieces, in a fixed order.
        word_pieces = [" " + w for w in words]
        word_pieces += [" " + a + b + c for a in "bdfgklmnprst" for b in "aeiou" for c in "dgklmnprst"]
        self._word_ids: tuple[int, ...] = tuple(self._piece_to_id[p] for p in word_pieces)

    @property
    def vocab_size(self) -> int:
        return len(self._id_to_bytes)

    @property
    def eos_id(self) -> int:
        """An id that decodes to the empty string (never produced by `encode`)."""
        return self._eos_id

    def word_ids(self) -> tuple[int, ...]:
        """Ids of whole words with a leading space; any sequence of them round-trips exactly."""
        return self._word_ids

    def encode(self, text: str) -> list[int]:
        """Text -> token ids (see the rule in the module docstring)."""
        table = self._piece_to_id
        out: list[int] = []
        append = out.append
        for piece in _PIECE_RE.findall(text):
            tid = table.get(piece)
            if tid is not None:
                append(tid)
                continue
            c = piece[-1]
            if c.isascii() and c.isalpha():
                self._split_letters(piece, out)
            else:
                if len(piece) == 2:  # " " + non-ASCII char
                    append(table[" "])
                out.extend(c.encode())
        return out

    def _split_letters(self, run: str, out: list[int]) -> None:
        table = self._piece_to_id
        i, n = 0, len(run)
        while i < n:
            for j in range(min(n, i + _MAX_PIECE), i, -1):
                tid = table.get(run[i:j])
                if tid is not None:
                    out.append(tid)
                    i = j
                    break
            else:  # unreachable with the 1-letter table, kept for safety
                out.extend(run[i].encode())
                i += 1

    def count(self, text: str) -> int:
        return len(self.encode(text))

    def decode(self, ids: list[int] | tuple[int, ...]) -> str:
        """Token ids -> text; ids outside the vocabulary raise IndexError."""
        table = self._id_to_bytes
        return b"".join([table[i] for i in ids]).decode("utf-8", errors="replace")

    def token_text(self, tid: int) -> str:
        """The text of one piece (a lone byte id gives its Latin-1 character)."""
        return self._id_to_text[tid]


@lru_cache(maxsize=1)
def get_tokenizer() -> Tokenizer:
    """The process-wide tokenizer (built on first call, ~0.1 s)."""
    return Tokenizer()
