"""Text from files and from AWS, made safe to show a person.

Names that gpuforge prints (matrix names, catalog records, stack names, AMI names and
tags, paths) come from files in pull requests or from AWS responses. Printed raw, an
ANSI escape sequence can clear the screen, recolour or hide a line, a carriage return
can overwrite a row, and a newline can forge a line of output ("ok: ..."), so every
printer passes them through `printable`. Error messages quote hostile values through
`cut`, so a megabyte-long value cannot bury the message and its fix.

Standard library only: the node agent imports it on bare GPU nodes.
"""

from __future__ import annotations

# Enough to recognise a name or a path; the rest is counted, not shown.
DEFAULT_LIMIT = 80


def printable(text: str) -> str:
    """`text` with every non-printable character (controls, escapes, newlines, bidi marks) written escaped.

    `\\x1b[2J` stays readable as the seven characters `\\x1b[2J`; printable text, including
    non-ASCII letters, is unchanged. A backslash is left as it is: the output is for people, not a
    format to be parsed back.
    """
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)


def printable_lines(text: str) -> str:
    """`printable` line by line: for messages whose own line breaks are layout (a list of findings)."""
    return "\n".join(printable(line) for line in text.split("\n"))


def cut(value: object, limit: int = DEFAULT_LIMIT) -> str:
    """`value` for an error message: ASCII-escaped, at most `limit` characters, saying how long it was.

    `ascii` rather than `printable`: a value is quoted because it was refused, and the reason is
    often a character that looks like another (a Unicode digit, a Cyrillic letter, a no-break space),
    so every non-ASCII character is shown by its code. Quotes show where a string starts and ends, a
    trailing space included; a longer value keeps its first `limit` characters and its length.
    """
    text = ascii(value)
    if len(text) <= limit:
        return text
    length = len(value) if isinstance(value, str | bytes) else len(text)
    return f"{text[:limit]}... ({length} characters)"
