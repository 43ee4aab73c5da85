"""Plain English text from the gensim wheel, as a corpus file for decoder language models.

gensim's wheel ships two texts under ``gensim/test/test_data``: 106 Wikipedia
articles (``enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2``,
CC BY-SA) and 300 news articles (``lee_background.cor``).  This writes either as
a corpus in the format :mod:`onnxlite.data.corpus` reads: one document (an
article) per blank-line-separated block.  Wiki markup is stripped with gensim's
own ``filter_wiki``, then the bold/italic quotes and section headings it leaves.

    python -m onnxlite.data.gensim_text wiki corpus.txt [--documents N]
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from ..errors import UsageError

WIKI_FILE = "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
NEWS_FILE = "lee_background.cor"
SOURCES = ("wiki", "news")

_HEADING = re.compile(r"^\s*=+[^=\n]*=+\s*$", re.M)
_QUOTES = re.compile(r"'{2,}")
_SPACES = re.compile(r"[ \t]+")
#: paragraphs shorter than this are list debris, captions and link-only lines, not prose
MIN_PARAGRAPH = 40


def test_data() -> Path:
    """gensim's ``test/test_data`` folder, found without importing gensim."""
    import importlib.util

    spec = importlib.util.find_spec("gensim")
    if spec is None or spec.origin is None:
        raise UsageError("the gensim texts need gensim: pip install gensim")
    return Path(spec.origin).parent / "test" / "test_data"


def plain_wiki(markup: str) -> str:
    """An article's text without wiki markup: paragraphs joined by newlines, headings and short lines dropped."""
    from gensim.corpora.wikicorpus import filter_wiki

    text = _QUOTES.sub("", _HEADING.sub("", filter_wiki(markup)))
    paragraphs = [_SPACES.sub(" ", p).strip() for p in text.split("\n")]
    return "\n".join(p for p in paragraphs if len(p) >= MIN_PARAGRAPH)


def wiki_documents(limit: int | None = None) -> list[str]:
    """The shipped Wikipedia articles as plain text (redirects and stubs left out)."""
    import bz2

    from gensim.corpora.wikicorpus import extract_pages

    documents = []
    with bz2.BZ2File(test_data() / WIKI_FILE) as stream:
        for _title, markup, _page in extract_pages(stream):
            if markup.lstrip().upper().startswith("#REDIRECT"):
                continue
            text = plain_wiki(markup)
            if len(text) >= 10 * MIN_PARAGRAPH:
                documents.append(text)
            if limit is not None and len(documents) >= limit:
                break
    return documents


def news_documents(limit: int | None = None) -> list[str]:
    """The shipped news articles (one a line in the file)."""
    lines = (test_data() / NEWS_FILE).read_text(encoding="utf-8", errors="replace").splitlines()
    documents = [" ".join(line.split()) for line in lines if line.strip()]
    return documents[:limit] if limit is not None else documents


def documents(source: str, limit: int | None = None) -> list[str]:
    if source not in SOURCES:
        raise UsageError(f"gensim text {source!r}: expected one of {', '.join(SOURCES)}")
    return wiki_documents(limit) if source == "wiki" else news_documents(limit)


def write_corpus(source: str, target: str | os.PathLike[str], limit: int | None = None) -> Path:
    """Write ``source``'s documents to ``target`` (blank lines between them), atomically."""
    from ..atomic import write_text

    docs = documents(source, limit)
    path = Path(target)
    write_text(path, "\n\n".join(docs) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m onnxlite.data.gensim_text", description=__doc__.splitlines()[0])
    parser.add_argument("source", choices=SOURCES)
    parser.add_argument("target")
    parser.add_argument("--documents", type=int, default=None, help="at most this many documents")
    args = parser.parse_args(argv)
    try:
        path = write_corpus(args.source, args.target, args.documents)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
