"""Text from outside the tool, made safe for where it is shown (issue 38).

A result file travels (users share them, attach them to issues, paste reports into pull
requests), so every string read from one, and every path, is untrusted: a network name may
carry ``ESC]52;`` (a terminal writing the clipboard), a line break that ends a markdown table
row, or ``=HYPERLINK(...)`` that a spreadsheet runs. Each place text leaves the tool escapes it
through this one module, a leaf that imports nothing of the tool:

* :func:`terminal` -- the console and stderr: C0 and C1 controls, DEL, line and paragraph
  separators and the bidirectional overrides shown as ``\\x1b``, ``\\u202e``;
* :func:`csv_cell` -- a CSV cell a spreadsheet opens: text starting with ``= + - @``, TAB or
  CR gets a leading ``'`` (OWASP's advice against CSV injection); numbers stay numbers;
* :func:`markdown` -- a cell or note of a GitHub markdown table: text, never markup;
* :func:`html` -- text of the report's HTML page: entities, and controls escaped as above;
* :func:`neutralised` -- every string of a document just read from a file (keys included),
  with its controls escaped as :func:`terminal` escapes them, at the one place result files
  are parsed (``store.stored.parse``): whatever path a string then takes (a table, a note, an
  error line, a suggested command), it carries no control character to any of the places
  above (issue 46), and each place adds only its own escapes.

Example::

    terminal("resnet\\x1b]0;owned\\x07")   == "resnet\\\\x1b]0;owned\\\\x07"
    csv_cell("=1+2") == "'=1+2";  csv_cell("-3.5") == "-3.5"
"""
from __future__ import annotations

import html as _html
import re

# C0 (U+0000-U+001F), DEL, C1 (U+0080-U+009F); U+2028/U+2029 (line breaks to some terminals and
# to markdown renderers); the bidirectional embeddings, overrides and isolates, which reorder
# what a reader sees (CVE-2021-42574, "Trojan Source").
# Lone surrogates: a file name's bytes that are not UTF-8 (os.fsdecode), which no stream encodes.
# JSON's whitespace (TAB, LF, CR) is apart: JSON text holds it between values (:func:`plain_json`).
_CONTROLS = ("\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069"
             "\ud800-\udfff")
_UNSAFE = re.compile(f"[\t\n\r{_CONTROLS}]")
_UNSAFE_IN_JSON_TEXT = re.compile(f"[{_CONTROLS}]")


def _escaped(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def terminal(text: object, keep: str = "") -> str:
    """``text`` (or its ``str``) with every control character written as an escape, so that
    nothing in it moves the cursor, retitles the window, writes the clipboard or breaks the
    line it is shown on; the characters in ``keep`` (``"\n"``: lines of our own) stay."""
    return _UNSAFE.sub(lambda match: match.group() if match.group() in keep else _escaped(match),
                       str(text))


# What a spreadsheet takes as the start of a formula (OWASP, "CSV Injection").
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")


def csv_cell(text: str) -> str:
    """A text cell for a CSV file, on one line (a line break in a cell ends the row for many
    readers), with a leading ``'`` where a spreadsheet would read a formula (also behind the
    spaces a line break became), except for a plain number (``-3.5``, ``+1e-3``), which must
    stay a number."""
    flat = terminal(" ".join(str(text).splitlines()))
    text = str(text)
    formula = text.startswith(_FORMULA_STARTS) or flat.lstrip(" ").startswith(_FORMULA_STARTS)
    return "'" + flat if formula and not _NUMBER.fullmatch(text) else flat


# Line breaks of any kind end a table row; markdown's specials render as markup: [ ] a link or,
# after "!", a remote image; * _ ~ emphasis; ` code; | a cell break; # > a heading or quote at
# the start of a list item; "<" opens HTML and "&" an entity.
_BREAKS = re.compile("\r\n|[\r\n\u2028\u2029\x0b\x0c\x85]")
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]|~>#])")
# What GitHub makes live after markdown's own parsing, so a backslash escape does not stop it:
# $...$ math; @name a mention (and a@b.c an e-mail link); #123 and GH-123 issue references;
# :name: emoji; www. and scheme:// bare links. Math needs its "$" as an entity (never a
# delimiter, as in CommonMark's emphasis); the others are found in the rendered text, so a
# zero-width space goes after their first character (what Renovate and Dependabot write before
# a mention). Times such as 20:35:00 keep their colons: no emoji name is all digits but 100 and
# 1234. Matched in one pass over escaped text (a "\\" may stand inside an emoji's name).
_ZERO_WIDTH_SPACE = "&#8203;"
_LIVE = re.compile(r"\$|@(?=[a-z0-9])|#(?=[0-9])|(?<![a-z0-9])(?:gh-(?=[0-9])|www(?=\.))"
                   r"|:(?=//)|:(?=(?![0-9]+:)[\w+\\-]+:|(?:100|1234):)", re.IGNORECASE)


def _inert(match: re.Match) -> str:
    return "&#36;" if match.group() == "$" else match.group() + _ZERO_WIDTH_SPACE


def markdown(text: str) -> str:
    """``text`` as a markdown table cell or list item shows it, literally: line breaks become
    spaces, markdown's specials are backslash-escaped (no link, image or emphasis), ``<`` and
    ``&`` are entities (no HTML), what GitHub renders after parsing (math, mentions, issue
    references, emoji, bare links) is broken up, and other controls are escaped as for the
    terminal."""
    text = _BREAKS.sub(" ", str(text))
    text = terminal(_MARKDOWN_SPECIAL.sub(r"\\\1", text))
    text = text.replace("&", "&amp;").replace("<", "&lt;")
    return _LIVE.sub(_inert, text) or " "


def html(text: object, quote: bool = True) -> str:
    """``text`` as HTML shows it, literally: ``< > & "`` as entities and controls escaped as
    for the terminal (a page saved and shown with ``cat`` must not act on a terminal either)."""
    return _html.escape(terminal(text), quote=quote)


def plain_json(text: str) -> bool:
    """Whether JSON ``text`` surely parses to strings without a character :func:`terminal`
    escapes: no escape at all (a backslash starts each, ``\\t`` and ``\\u001b`` alike) and no
    raw control but TAB, LF and CR (which the json module's strict parsing allows only between
    values, never inside a string). Such a document needs no :func:`neutralised` (a folder of
    10,000 results spent a tenth of its reading time walking documents with nothing to
    escape)."""
    return "\\" not in text and _UNSAFE_IN_JSON_TEXT.search(text) is None


def neutralised(document: object) -> object:
    """``document`` (parsed JSON: dicts, lists, strings, numbers) with every string, keys
    included, passed through :func:`terminal`; changed in place where it is a container, and
    returned. Iterative: a document nested 900 deep is no crash."""
    if isinstance(document, str):
        return terminal(document)
    stack = [document] if isinstance(document, (dict, list)) else []
    while stack:
        container = stack.pop()
        if isinstance(container, dict):
            if any(_UNSAFE.search(key) for key in container if isinstance(key, str)):
                items = list(container.items())
                container.clear()
                container.update((terminal(key), value) for key, value in items)
            slots = list(container.items())
        else:
            slots = list(enumerate(container))
        for slot, value in slots:
            if isinstance(value, str):
                if _UNSAFE.search(value):
                    container[slot] = terminal(value)
            elif isinstance(value, (dict, list)):
                stack.append(value)
    return document
