"""Text from the input, made safe for the place it is written: one rule per output kind.

Every name trainlens shows came from someone else's file (metric names, tags, run and
folder names, W&B keys, zip member names) and can hold anything a string can: an ESC
sequence that retitles the terminal or hides text, a newline that starts a forged
``::error`` line for GitHub Actions, a NUL that makes a JUnit report invalid XML, a
``![image](url)`` that a step summary would fetch. Each writer passes such text through
the rule of its output, where it writes it:

- :func:`terminal`: one line of plain text (the terminal, logs, CI output, notification
  and ``--exec`` environment text, Prometheus labels, plot labels). Control characters
  (C0 including newline, CR and tab, DEL, C1), bidi controls, line and paragraph
  separators and lone surrogates become visible escapes (``\\x1b``, ``\\u202e``); the rest
  is kept, so a name stays recognizable.
- :func:`xml`: :func:`terminal` and the noncharacters XML 1.0 forbids (U+FFFE, U+FFFF);
  ``& < >`` and quotes are the XML writer's to escape.
- :func:`markdown`: :func:`terminal`, then ``& < >`` as entities and every character that
  starts Markdown backslash-escaped, so no image, link, tag, code span, table cell or
  heading can come from the input.
- :func:`github_data` / :func:`github_property`: GitHub's workflow-command escaping (as
  in @actions/core: ``%``, CR, LF; ``:`` and ``,`` in properties), then :func:`terminal`.

A backslash is kept as it is: the escapes are for the person reading, and a name that
really holds the four characters ``\\x1b`` is as harmless as it looks.
"""

from __future__ import annotations

import html
import re

# Cc (C0, DEL, C1); bidi embeddings, overrides, isolates and marks (the "Trojan Source"
# set, CVE-2021-42574); the Unicode line and paragraph separators (some log viewers and
# JavaScript split lines on them); lone surrogates (not encodable: printing one is a
# UnicodeEncodeError, and no UTF-8 consumer can take it)
_CONTROLS = "\x00-\x1f\x7f-\x9f"
_BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_TERMINAL_UNSAFE = re.compile(f"[{_CONTROLS}{_BIDI}\u2028\u2029\ud800-\udfff]")
_XML_UNSAFE = re.compile("[\ufffe\uffff]")
# the characters that start markup inside a line of GitHub Markdown: emphasis, code
# spans, links and images, table cells, headings, strikethrough (all ASCII punctuation,
# so CommonMark's backslash escape applies to each); ``& < >`` become entities first
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]()!|#~])")


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def terminal(text: object) -> str:
    """``text`` as one line of plain text: every control, bidi control, line separator
    and lone surrogate shown as a visible escape (``\\n``-style for newline, CR and tab,
    so a name still reads as it was written)."""
    s = str(text)
    if not _TERMINAL_UNSAFE.search(s):
        return s  # the common case: a name with nothing to escape is the same object
    s = s.replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
    return _TERMINAL_UNSAFE.sub(_visible, s)


def terminal_lines(lines: list[str]) -> str:
    """Lines a renderer built, each made one terminal line, joined by newlines: a newline
    inside one of them (from the input) cannot start a line of its own."""
    return "\n".join(terminal(line) for line in lines)


def xml(text: object) -> str:
    """``text`` as XML 1.0 can carry it, in one line (an attribute or a line of content)."""
    return _XML_UNSAFE.sub(_visible, terminal(text))


def markdown(text: object) -> str:
    """``text`` as literal inline Markdown (also inside a table cell and ``<code>``):
    ``& < >`` as HTML entities (no raw HTML, no entity of the input's), the characters
    that start Markdown backslash-escaped."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", html.escape(terminal(text), quote=False))


def github_data(text: object) -> str:
    """The message of a GitHub workflow command (``::error …::MESSAGE``): GitHub's own
    escaping for ``%``, CR and LF (the runner turns ``%0A`` back into a line break inside
    the annotation, never into a line of the log), every other control as
    :func:`terminal` shows it."""
    s = str(text).replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return terminal(s)


def github_property(text: object) -> str:
    """A property value of a GitHub workflow command (``file=…,title=…``)."""
    return github_data(text).replace(":", "%3A").replace(",", "%2C")


__all__ = ["github_data", "github_property", "markdown", "terminal", "terminal_lines", "xml"]
