"""Synonym sources for CLEAR's substitution augmentation (``subs``), compiled to token ids.

Two sources, both turned into a `TokenSynonyms` lookup for one tokenizer:

* **A table file** (`TokenSynonyms.from_file`): JSON, one object mapping a word to the list of its synonyms::

      {"quick": ["fast", "speedy", "rapid"], "big": ["large", "huge"], "look after": ["mind"]}

  Keys are single words (entries whose key the tokenizer splits into several words, like ``"look after"``, are
  skipped: they cannot match one word of a sentence); synonyms may be any text. Matching is on the tokenizer's
  pieces, so an uncased tokenizer matches ``"Quick"`` too, and a word split into several pieces (``"un ##believ
  ##ably"``) is matched and replaced as a whole. For cased tokenizers a capitalised variant of each entry is
  added (``"Quick" -> "Fast", ...``).

  CLEAR built its substitutions from counter-fitted word vectors (Mrkšić et al., 2016): the synonyms of a word
  are its nearest neighbours in that space. `synonyms_from_word_vectors` does this for any vectors file in the
  word2vec/GloVe text format (``word v1 v2 ... vd`` per line)::

      python -m contrastive_hf.data.synonyms --word-vectors counter-fitted-vectors.txt --output synonyms.json

  From WordNet (``pip install nltk``, then ``nltk.download("wordnet")``), a table is::

      from nltk.corpus import wordnet
      table = {}
      for synset in wordnet.all_synsets():
          names = [lemma.name().replace("_", " ") for lemma in synset.lemmas()]
          for name in names:
              table.setdefault(name, set()).update(other for other in names if other != name)
      json.dump({word: sorted(synonyms) for word, synonyms in table.items()}, open("synonyms.json", "w"))

* **The encoder's own input embeddings** (`TokenSynonyms.from_input_embeddings`), needing no external data: the
  synonyms of a whole-word vocabulary entry (a token that is a word on its own, like ``quick``, not a piece like
  ``##ly``) are its nearest neighbours by cosine similarity among the other whole-word entries. Meaningful for a
  pretrained encoder (continued pre-training); for a model trained from scratch the neighbours are computed once,
  from the initial (random) embeddings.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np
import torch

from .seeding import mix64
from .token_batch import ragged_arange, special_token_table

__all__ = [
    "TokenSynonyms",
    "load_synonyms",
    "word_start_table",
    "load_synonym_file",
    "save_synonym_file",
    "synonyms_from_word_vectors",
    "word_hashes",
]

logger = logging.getLogger(__name__)

_WORD_START_MARKERS = ("Ġ", "▁")  # byte-level BPE (GPT-2, RoBERTa) and SentencePiece (T5, XLM-R, ALBERT)
_HASH_BASE = np.uint64(0x100000001B3)  # FNV-1a's 64-bit prime: odd, so powers of it never vanish modulo 2**64


def word_start_table(tokenizer) -> np.ndarray:
    """A boolean table over token ids: True where a token begins a word.

    WordPiece marks the pieces that continue a word (``##ing``); byte-level BPE and SentencePiece mark the pieces
    that begin one (``Ġquick``, ``▁quick``), and tokens without letters or digits (punctuation) are words of their
    own there. Special tokens count as word starts; the first token after a special token always begins a word.
    """
    tokens = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    tokens = [token if isinstance(token, str) else "" for token in tokens]
    starts = np.ones(len(tokens), dtype=bool)
    backend = getattr(tokenizer, "backend_tokenizer", None)
    prefix = getattr(getattr(backend, "model", None), "continuing_subword_prefix", None)
    if prefix:
        starts[:] = [not token.startswith(prefix) for token in tokens]
    else:
        marker = _word_start_marker(backend, tokens)
        if marker is not None:
            starts[:] = [token.startswith(marker) or not any(c.isalnum() for c in token) for token in tokens]
        else:
            logger.warning(
                "Cannot tell word boundaries for %s (no '##' continuation pieces, no 'Ġ'/'▁' word starts): every "
                "token is taken as a word of its own.",
                type(tokenizer).__name__,
            )
    starts[special_token_table(tokenizer)[: len(tokens)]] = True
    return starts


def _word_start_marker(backend, tokens: list[str]) -> str | None:
    """The character that begins word-start pieces: from the pre-tokenizer (ByteLevel: "Ġ", Metaspace: its
    replacement, usually "▁"), else the marker most of the vocabulary starts with."""
    if backend is not None:
        found = []

        def visit(node):
            if isinstance(node, dict):
                if node.get("type") == "ByteLevel":
                    found.append("Ġ")
                elif node.get("type") == "Metaspace":
                    found.append(node.get("replacement", "▁"))
                for value in node.values():
                    visit(value)
            elif isinstance(node, list):
                for value in node:
                    visit(value)

        visit(json.loads(backend.to_str()).get("pre_tokenizer"))
        if found:
            return found[0]
    counts = {marker: sum(token.startswith(marker) for token in tokens) for marker in _WORD_START_MARKERS}
    marker = max(counts, key=counts.get)
    return marker if counts[marker] >= 0.05 * len(tokens) else None


def _piece_hashes(vocab_size: int) -> np.ndarray:
    """A fixed pseudo-random 64-bit code per token id, the letters of the word hashes."""
    return mix64(np.arange(vocab_size, dtype=np.uint64) + np.uint64(0x5EED))


def word_hashes(ids: np.ndarray, starts: np.ndarray, lengths: np.ndarray, vocab_size: int) -> np.ndarray:
    """A 64-bit hash of each word ``ids[starts[i] : starts[i] + lengths[i]]`` of a flat id array (vectorised).

    The hash is ``sum_j code(piece_j) * B**j`` modulo 2**64, so two words collide only by a 2**-64 accident.
    """
    positions = ragged_arange(lengths)
    pieces = ids[np.repeat(starts, lengths) + positions]
    powers = _powers(int(lengths.max(initial=1)))
    with np.errstate(over="ignore"):
        terms = _piece_hashes(vocab_size)[pieces] * powers[positions]
        sums = np.cumsum(terms, dtype=np.uint64)
        ends = np.cumsum(lengths) - 1
        totals = sums[ends]
        totals[1:] -= sums[ends[:-1]]
    return totals


def _powers(count: int) -> np.ndarray:
    powers = np.ones(max(count, 1), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for index in range(1, count):  # at most the longest word, in pieces
            powers[index] = powers[index - 1] * _HASH_BASE
    return powers


@dataclass
class TokenSynonyms:
    """Synonyms over token ids for one tokenizer: which words have synonyms, and their replacement pieces.

    Words of one piece are looked up directly by id (``single_offset``/``single_count``), words of several pieces
    by their `word_hashes` (``multi_hashes``, sorted, with ``multi_offset``/``multi_count``). Both point into the
    choices: choice ``c`` replaces the word with ``pool[choice_start[c] : choice_start[c] + choice_length[c]]``.
    Build one with `from_table`, `from_file` or `from_input_embeddings`.
    """

    word_starts: np.ndarray
    single_offset: np.ndarray
    single_count: np.ndarray
    multi_hashes: np.ndarray
    multi_offset: np.ndarray
    multi_count: np.ndarray
    choice_start: np.ndarray
    choice_length: np.ndarray
    pool: np.ndarray
    source: str = "table"

    @property
    def vocab_size(self) -> int:
        return len(self.word_starts)

    def __len__(self) -> int:
        """Number of words (single- and multi-piece) that have at least one synonym."""
        return int((self.single_count > 0).sum()) + len(self.multi_hashes)

    def __repr__(self) -> str:
        return f"TokenSynonyms({len(self)} words, {len(self.choice_start)} choices, source={self.source!r})"

    def resized(self, vocab_size: int) -> TokenSynonyms:
        """The same synonyms over a larger vocabulary (tokens added since, like [DEL], are words without synonyms)."""
        extra = vocab_size - self.vocab_size
        if extra <= 0:
            return self
        return dataclasses.replace(
            self,
            word_starts=np.concatenate([self.word_starts, np.ones(extra, dtype=bool)]),
            single_offset=np.concatenate([self.single_offset, np.zeros(extra, dtype=np.int64)]),
            single_count=np.concatenate([self.single_count, np.zeros(extra, dtype=np.int64)]),
        )

    # ------------------------------------------------------------------------------------------------
    # Lookup
    # ------------------------------------------------------------------------------------------------

    def lookup(self, ids: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(offset, count)`` of the synonym choices of each word ``ids[starts[i] : starts[i] + lengths[i]]`` of a
        flat id array; ``count`` is 0 for words without synonyms."""
        first = ids[starts]
        offset = self.single_offset[first]
        count = self.single_count[first]
        multi = np.flatnonzero(lengths != 1)
        if len(multi):
            count[multi] = 0  # a word's first piece alone is another word
            if len(self.multi_hashes):
                hashes = word_hashes(ids, starts[multi], lengths[multi], self.vocab_size)
                slot = np.minimum(np.searchsorted(self.multi_hashes, hashes), len(self.multi_hashes) - 1)
                found = self.multi_hashes[slot] == hashes
                offset[multi[found]] = self.multi_offset[slot[found]]
                count[multi[found]] = self.multi_count[slot[found]]
        return offset, count

    def synonyms_of(self, word: str, tokenizer) -> list[str]:
        """The synonyms of ``word`` as text (for inspecting a source)."""
        ids = np.asarray(tokenizer(word, add_special_tokens=False)["input_ids"], dtype=np.int64)
        if len(ids) == 0:
            return []
        offset, count = self.lookup(ids, np.array([0]), np.array([len(ids)]))
        choices = range(int(offset[0]), int(offset[0] + count[0]))
        return [
            tokenizer.decode(self.pool[self.choice_start[c] : self.choice_start[c] + self.choice_length[c]])
            for c in choices
        ]

    # ------------------------------------------------------------------------------------------------
    # Building
    # ------------------------------------------------------------------------------------------------

    @classmethod
    def from_file(cls, path: str | os.PathLike, tokenizer) -> TokenSynonyms:
        """Compile a JSON synonym table file (see the module docstring for its format)."""
        return cls.from_table(load_synonym_file(path), tokenizer, source=os.path.basename(str(path)))

    @classmethod
    def from_table(cls, table: Mapping[str, Iterable[str]], tokenizer, source: str = "table") -> TokenSynonyms:
        """Compile a word -> synonyms mapping for ``tokenizer``."""
        starts = word_start_table(tokenizer)
        pairs = []  # (word text, synonym text), in all the spellings a tokenizer may see
        cased = (
            tokenizer("A", add_special_tokens=False)["input_ids"]
            != tokenizer("a", add_special_tokens=False)["input_ids"]
        )
        for word, synonyms in table.items():
            for synonym in synonyms:
                if synonym == word:
                    continue
                pairs.append((word, synonym))
                if cased and word[:1].islower():
                    pairs.append((word[:1].upper() + word[1:], synonym[:1].upper() + synonym[1:]))
        if not pairs:
            raise ValueError("The synonym table is empty: give at least one word with one synonym.")
        # a word mid-sentence follows a space; byte-level BPE spells it differently ("Ġquick") from a first word
        texts = [text for word, synonym in pairs for text in (word, synonym, " " + word, " " + synonym)]
        encoded = tokenizer(texts, add_special_tokens=False)["input_ids"]
        entries: dict[tuple[int, ...], list[tuple[int, ...]]] = {}
        several_words = set()
        for index, (word, _) in enumerate(pairs):
            for variant in (0, 2):
                key, value = tuple(encoded[4 * index + variant]), tuple(encoded[4 * index + variant + 1])
                if not key or not value:
                    continue
                # the first piece starts a word by its place in the sentence; the others must continue it
                if any(starts[piece] for piece in key[1:]):
                    several_words.add(word)
                    continue
                choices = entries.setdefault(key, [])
                if value not in choices and value != key:
                    choices.append(value)
        if several_words:
            logger.info(
                "%d synonym table key(s) are several words for this tokenizer and can never match one word; "
                "skipped (e.g. %s).",
                len(several_words),
                ", ".join(repr(word) for word in sorted(several_words)[:3]),
            )
        entries = {key: value for key, value in entries.items() if value}
        if not entries:
            raise ValueError(
                "No entry of the synonym table matches a single word of this tokenizer: check that the keys are "
                "words (not phrases) in the tokenizer's language."
            )
        return cls._compile(entries, starts, len(tokenizer), source)

    @classmethod
    def from_input_embeddings(
        cls,
        embeddings,
        tokenizer,
        num_neighbours: int = 10,
        min_similarity: float | None = None,
        chunk_size: int = 2048,
    ) -> TokenSynonyms:
        """Synonyms from the nearest neighbours of whole-word vocabulary entries in the input-embedding matrix.

        Args:
            embeddings: the ``(vocab, d)`` input-embedding matrix (a tensor or array), or a model whose
                ``get_input_embeddings()`` gives it.
            tokenizer: the model's tokenizer.
            num_neighbours: synonyms per word, the most similar first.
            min_similarity: keep only neighbours with at least this cosine similarity.
            chunk_size: rows of the similarity matrix computed at once (memory: ``chunk_size * vocab`` floats).
        """
        if num_neighbours < 1:
            raise ValueError(f"num_neighbours must be >= 1, got {num_neighbours}.")
        if hasattr(embeddings, "get_input_embeddings"):
            embeddings = embeddings.get_input_embeddings().weight
        weight = torch.as_tensor(embeddings).detach().float().cpu()
        if weight.dim() != 2:
            raise ValueError(f"Expected a (vocab, hidden) embedding matrix, got shape {tuple(weight.shape)}.")
        starts = word_start_table(tokenizer)
        size = min(len(starts), weight.shape[0])
        tokens = tokenizer.convert_ids_to_tokens(list(range(size)))
        special = special_token_table(tokenizer)
        groups: dict[bool, list[int]] = {}
        for token_id, token in enumerate(tokens):
            if not isinstance(token, str) or special[token_id] or not starts[token_id]:
                continue
            marked = token.startswith(_WORD_START_MARKERS)
            text = token[1:] if marked else token
            if len(text) >= 2 and text.isalpha():
                groups.setdefault(marked, []).append(token_id)  # neighbours keep the spacing of the word
        words, synonyms, counts = [], [], []  # words with neighbours; their neighbours, flat; how many each
        for candidates in groups.values():
            if len(candidates) < 2:
                continue
            ids = torch.tensor(candidates)
            vectors = torch.nn.functional.normalize(weight[ids], dim=-1)  # (C, d)
            k = min(num_neighbours, len(candidates) - 1)
            for begin in range(0, len(candidates), chunk_size):
                block = vectors[begin : begin + chunk_size] @ vectors.T  # (chunk, C)
                rows = torch.arange(block.shape[0])
                block[rows, rows + begin] = -float("inf")  # a word is not its own synonym
                scores, neighbours = block.topk(k, dim=-1)  # (chunk, k), most similar first
                keep = (
                    torch.ones_like(scores, dtype=torch.bool) if min_similarity is None else scores >= min_similarity
                )
                kept = keep.sum(dim=-1)
                words.append(ids[begin : begin + len(rows)][kept > 0])
                counts.append(kept[kept > 0])
                synonyms.append(ids[neighbours[keep]])  # row-major: each word's kept neighbours in order
        count = torch.cat(counts).numpy().astype(np.int64) if counts else np.zeros(0, dtype=np.int64)
        if not count.sum():
            raise ValueError(
                "No whole-word vocabulary entry has a neighbour"
                + (f" with cosine similarity >= {min_similarity}" if min_similarity is not None else "")
                + ": lower min_similarity or give a synonym table file."
            )
        pool = torch.cat(synonyms).numpy().astype(np.int64)
        single_offset = np.zeros(len(tokenizer), dtype=np.int64)
        single_count = np.zeros(len(tokenizer), dtype=np.int64)
        word_ids = torch.cat(words).numpy()
        single_offset[word_ids] = np.cumsum(count) - count
        single_count[word_ids] = count
        return cls(
            word_starts=starts,
            single_offset=single_offset,
            single_count=single_count,
            multi_hashes=np.zeros(0, dtype=np.uint64),
            multi_offset=np.zeros(0, dtype=np.int64),
            multi_count=np.zeros(0, dtype=np.int64),
            choice_start=np.arange(len(pool), dtype=np.int64),
            choice_length=np.ones(len(pool), dtype=np.int64),
            pool=pool,
            source="input embeddings",
        )

    @classmethod
    def _compile(cls, entries, starts: np.ndarray, vocab_size: int, source: str) -> TokenSynonyms:
        keys = list(entries)
        counts = np.array([len(entries[key]) for key in keys], dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
        choices = [value for key in keys for value in entries[key]]
        choice_length = np.array([len(value) for value in choices], dtype=np.int64)
        choice_start = np.concatenate([[0], np.cumsum(choice_length)[:-1]]).astype(np.int64)
        pool = np.fromiter((piece for value in choices for piece in value), dtype=np.int64, count=choice_length.sum())
        single_offset = np.zeros(vocab_size, dtype=np.int64)
        single_count = np.zeros(vocab_size, dtype=np.int64)
        is_single = np.array([len(key) == 1 for key in keys], dtype=bool)
        single_ids = np.array([key[0] for key, single in zip(keys, is_single, strict=True) if single], dtype=np.int64)
        single_offset[single_ids] = offsets[is_single]
        single_count[single_ids] = counts[is_single]
        multi = [key for key, single in zip(keys, is_single, strict=True) if not single]
        if multi:
            flat = np.fromiter((piece for key in multi for piece in key), dtype=np.int64)
            lengths = np.array([len(key) for key in multi], dtype=np.int64)
            hashes = word_hashes(flat, np.cumsum(lengths) - lengths, lengths, vocab_size)
            order = np.argsort(hashes, kind="stable")
            multi_hashes, multi_offset, multi_count = (
                hashes[order],
                offsets[~is_single][order],
                counts[~is_single][order],
            )
        else:
            multi_hashes = np.zeros(0, dtype=np.uint64)
            multi_offset = multi_count = np.zeros(0, dtype=np.int64)
        return cls(
            word_starts=starts,
            single_offset=single_offset,
            single_count=single_count,
            multi_hashes=multi_hashes,
            multi_offset=multi_offset,
            multi_count=multi_count,
            choice_start=choice_start,
            choice_length=choice_length,
            pool=pool,
            source=source,
        )


def load_synonyms(source, tokenizer) -> TokenSynonyms:
    """A `TokenSynonyms` from any synonym source: a JSON table file path, a word -> synonyms mapping, a compiled
    `TokenSynonyms`, or a model / ``(vocab, d)`` embedding matrix (nearest neighbours in the input embeddings)."""
    if isinstance(source, TokenSynonyms):
        return source.resized(len(tokenizer))
    if isinstance(source, (str, os.PathLike)):
        return TokenSynonyms.from_file(source, tokenizer)
    if isinstance(source, Mapping):
        return TokenSynonyms.from_table(source, tokenizer)
    if hasattr(source, "get_input_embeddings") or isinstance(source, (torch.Tensor, np.ndarray)):
        return TokenSynonyms.from_input_embeddings(source, tokenizer)
    raise ValueError(
        f"Cannot build synonyms from a {type(source).__name__}: give a JSON table path, a dict of word -> synonyms, "
        "a TokenSynonyms, or a model whose input embeddings give nearest-neighbour synonyms."
    )


# ----------------------------------------------------------------------------------------------------
# Table files
# ----------------------------------------------------------------------------------------------------


def load_synonym_file(path: str | os.PathLike) -> dict[str, list[str]]:
    """Read and check a JSON synonym table: ``{"word": ["synonym", ...], ...}``."""
    if not os.path.isfile(path):
        raise ValueError(f"Synonym table file not found: {path}.")
    try:
        with open(path, encoding="utf-8") as handle:
            table = json.load(handle)
    except json.JSONDecodeError as error:
        raise ValueError(f"Synonym table {path} is not valid JSON ({error}).") from error
    if not isinstance(table, dict):
        raise ValueError(
            f'Synonym table {path} must be a JSON object mapping words to lists of synonyms, like {{"quick": '
            f'["fast", "speedy"]}}; got a {type(table).__name__}.'
        )
    for word, synonyms in table.items():
        if not isinstance(synonyms, list) or not all(isinstance(synonym, str) for synonym in synonyms):
            raise ValueError(f"Synonym table {path}: the entry {word!r} must be a list of strings, got {synonyms!r}.")
    return table


def save_synonym_file(table: Mapping[str, Iterable[str]], path: str | os.PathLike) -> None:
    """Write a synonym table in the format `load_synonym_file` reads."""
    with open(path, "w", encoding="utf-8") as handle:
        json.dump({word: list(synonyms) for word, synonyms in table.items()}, handle, ensure_ascii=False, indent=0)


def synonyms_from_word_vectors(
    path: str | os.PathLike,
    num_neighbours: int = 10,
    min_similarity: float = 0.7,
    max_words: int | None = None,
    chunk_size: int = 2048,
) -> dict[str, list[str]]:
    """A synonym table from word vectors in the word2vec/GloVe text format (``word v1 ... vd`` per line; a
    ``count dim`` header line is allowed): each word's nearest neighbours by cosine similarity, most similar first.

    With counter-fitted vectors (Mrkšić et al., 2016), as CLEAR used, near neighbours are synonyms rather than
    merely related words (counter-fitting pushes antonyms apart).
    """
    words, rows = [], []
    with open(path, encoding="utf-8") as handle:
        for line_number, line in enumerate(handle):
            parts = line.rstrip().split(" ")
            if line_number == 0 and len(parts) == 2 and all(part.isdigit() for part in parts):
                continue  # word2vec header
            if len(parts) < 2:
                continue
            try:
                rows.append([float(value) for value in parts[1:]])
            except ValueError as error:
                raise ValueError(f"{path}, line {line_number + 1}: not 'word v1 v2 ...' ({error}).") from error
            if rows and len(rows[-1]) != len(rows[0]):
                raise ValueError(f"{path}, line {line_number + 1}: {len(rows[-1])} values, expected {len(rows[0])}.")
            words.append(parts[0])
            if max_words is not None and len(words) >= max_words:
                break
    if len(words) < 2:
        raise ValueError(f"{path} holds fewer than two word vectors.")
    vectors = torch.nn.functional.normalize(torch.tensor(rows, dtype=torch.float32), dim=-1)
    k = min(num_neighbours, len(words) - 1)
    table = {}
    for begin in range(0, len(words), chunk_size):
        block = vectors[begin : begin + chunk_size] @ vectors.T
        rows_index = torch.arange(block.shape[0])
        block[rows_index, rows_index + begin] = -float("inf")
        scores, neighbours = block.topk(k, dim=-1)
        for row in range(block.shape[0]):
            keep = neighbours[row][scores[row] >= min_similarity].tolist()
            if keep:
                table[words[begin + row]] = [words[n] for n in keep]
    return table


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m contrastive_hf.data.synonyms",
        description="Build a JSON synonym table for the 'subs' augmentation from word vectors (word2vec/GloVe "
        "text format), e.g. counter-fitted vectors as CLEAR used.",
    )
    parser.add_argument("--word-vectors", required=True, help="Vectors file: 'word v1 v2 ... vd' per line.")
    parser.add_argument("--output", required=True, help="Where to write the JSON table.")
    parser.add_argument("--num-neighbours", type=int, default=10)
    parser.add_argument("--min-similarity", type=float, default=0.7)
    parser.add_argument("--max-words", type=int, default=None, help="Read only the first N vectors.")
    args = parser.parse_args(argv)
    table = synonyms_from_word_vectors(args.word_vectors, args.num_neighbours, args.min_similarity, args.max_words)
    save_synonym_file(table, args.output)
    print(f"Wrote {len(table)} words with synonyms to {args.output}.")


if __name__ == "__main__":
    main()
