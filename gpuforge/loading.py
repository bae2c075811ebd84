"""The one way gpuforge reads a YAML or JSON file, so that hostile input fails fast and clearly.

gpuforge runs in CI on files from pull requests and on every node at boot. A loader that
hangs, eats memory or prints a traceback there is a defect, so every file goes through
the same checks before anything looks at its content:

- regular files only (`/dev/zero`, a FIFO or a directory is refused before any read);
- at most `max_bytes`, a cap that fits the file's purpose (read with one byte to spare,
  so an endless device cannot exhaust memory);
- strict UTF-8, with the byte offset of the first bad byte;
- a nesting-depth cap, checked while parsing, so deep input cannot exhaust the stack;
- YAML aliases refused (a "billion laughs" file expands shared parts on every walk);
- duplicate keys refused in YAML and JSON (the last one would otherwise win silently);
- JSON's non-standard NaN and Infinity refused;
- every OSError, bad path (NUL byte, over-long name) or parse failure is an InputError
  (exit 2) that names the file, the rule and the fix.

The JSON half uses the standard library only: the node agent imports it on bare GPU
nodes. PyYAML is imported only when a YAML file is read.
"""

from __future__ import annotations

import errno
import functools
import json
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from gpuforge.display import cut
from gpuforge.errors import InputError

if TYPE_CHECKING:
    import yaml

# Caps per purpose. Every shipped file of each kind is under a tenth of its cap.
# The YAML parser is pure Python (the C one cannot refuse aliases while composing) and reads
# about 150 KiB a second, so the config cap also bounds the time a hostile file can take.
MAX_CONFIG_BYTES = 256 * 1024  # a matrix, a stack file, Pulumi.yaml, a manifest
MAX_DATA_BYTES = 16 * 1024 * 1024  # a catalog or a saved AWS response
MAX_DEPTH = 64  # the deepest shipped file nests 6 levels


def expand_user(path: Path, *, what: str) -> Path:
    """`path` with a leading `~` or `~user` expanded; InputError naming `what` when that home is unknown.

    pathlib raises RuntimeError for `~user` of a user this machine does not have (`~0`, found by the fuzz test
    of stack paths), which would otherwise end a command in a traceback."""
    try:
        return path.expanduser()
    except RuntimeError:
        user = str(path).split("/", 1)[0]
        raise InputError(
            f"{what} = {str(path)[:200]!r}: {user} names the home folder of a user this machine does not have. "
            "Fix: give the path without ~, or with ~ alone for your own home folder."
        ) from None


def _fail(path: Path | str, problem: str, fix: str) -> InputError:
    return InputError(f"{path}: {problem}. Fix: {fix}.")


class RefusedFile(OSError):
    """A file refused before its content is trusted: not a regular file, or more than its cap."""


def read_bytes(path: Path, *, max_bytes: int, follow_links: bool = True) -> bytes:
    """The content of the regular file at `path`, at most `max_bytes`; OSError for anything else.

    The one guard for every file gpuforge reads from a place others may write (a CI checkout, /run,
    /var/lib): the file is opened non-blocking and checked with fstat on the open descriptor, so a
    FIFO or a device can neither block nor feed the read, and a file swapped between check and read
    is still the one checked. At most `max_bytes` + 1 bytes are read, whatever the size says (sysfs
    and /proc report sizes that are not the content's). `follow_links=False` opens with O_NOFOLLOW:
    a symbolic link as the last part of the path is refused (ELOOP), so a link in a folder another
    user can write cannot point the read at another file.
    RefusedFile (an OSError) for a file that is not regular or too large.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    if not follow_links:
        flags |= os.O_NOFOLLOW
    fd = os.open(path, flags)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise RefusedFile(None, "not a regular file (a directory, device or pipe)")
        if info.st_size > max_bytes:
            raise RefusedFile(None, f"{info.st_size} bytes is more than it may hold ({max_bytes})")
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read(max_bytes + 1)
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise RefusedFile(None, f"more than the {max_bytes} bytes it may hold")
    return data


def read_text(path: Path, *, what: str, max_bytes: int, fix: str) -> str:
    """The file's text: a regular UTF-8 file of at most `max_bytes` (read_bytes), else InputError naming the fix.

    `what` names the file's role in messages ("cannot read the image manifest: ...").
    """
    try:
        data = read_bytes(path, max_bytes=max_bytes)
    except FileNotFoundError:
        raise _fail(path, f"cannot read the {what}: no such file", fix) from None
    except ValueError:  # an embedded NUL byte
        raise _fail(repr(str(path)), f"cannot read the {what}: a path cannot hold a NUL byte", fix) from None
    except OSError as error:
        if error.errno == errno.ENAMETOOLONG:
            raise _fail(
                cut(str(path)),
                f"cannot read the {what}: the path is longer than the system allows",
                fix,
            ) from None
        raise _fail(path, f"cannot read the {what}: {error.strerror or error}", fix) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise _fail(
            path,
            f"cannot read the {what}: not UTF-8 text (byte {error.start} is {data[error.start : error.start + 1]!r})",
            fix,
        ) from None


# --- JSON -----------------------------------------------------------------------------------


def _refuse_constant(name: str) -> object:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"{text} is beyond the range of a number")
    return value


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {key!r} (the last one would silently win)")
        result[key] = value
    return result


def _json_depth(text: str, max_depth: int) -> int | None:
    """The offset where nesting first passes `max_depth` (outside strings), or None.

    Checked before parsing: json's C scanner recurses once per level.
    """
    depth = 0
    in_string = escaped = False
    for offset, char in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > max_depth:
                return offset
        elif char in "]}":
            depth -= 1
    return None


def parse_json(text: str, *, source: str, fix: str, max_depth: int = MAX_DEPTH) -> Any:
    """Parse JSON text with the checks above; `source` names it in errors."""
    too_deep = _json_depth(text, max_depth)
    if too_deep is not None:
        raise _fail(source, f"nested more than {max_depth} levels deep (at character {too_deep})", fix)
    try:
        return json.loads(
            text, object_pairs_hook=_unique_pairs, parse_constant=_refuse_constant, parse_float=_finite
        )
    except json.JSONDecodeError as error:
        raise _fail(
            source, f"not valid JSON (line {error.lineno}, column {error.colno}: {error.msg})", fix
        ) from None
    except ValueError as error:  # from the hooks: a duplicate key, NaN, Infinity or 1e999
        raise _fail(source, f"not valid JSON: {error}", fix) from None


def load_json(
    path: Path, *, what: str, fix: str, max_bytes: int = MAX_CONFIG_BYTES, max_depth: int = MAX_DEPTH
) -> Any:
    """Read and parse a JSON file; InputError (exit 2) for every way it can be bad."""
    return parse_json(
        read_text(path, what=what, max_bytes=max_bytes, fix=fix),
        source=str(path),
        fix=fix,
        max_depth=max_depth,
    )


# --- YAML -----------------------------------------------------------------------------------


@functools.cache
def _loader(timestamps_as_text: bool, max_depth: int) -> type[yaml.SafeLoader]:
    """A SafeLoader that refuses aliases, duplicate keys and deep nesting while composing."""
    import yaml
    from yaml.constructor import ConstructorError
    from yaml.error import Mark
    from yaml.events import AliasEvent, Event
    from yaml.nodes import MappingNode, Node

    class GuardedLoader(yaml.SafeLoader):
        _depth = 0

        def compose_node(self, parent: Node | None, index: int) -> Node | None:
            event: Event = self.peek_event()  # type: ignore[no-untyped-call]
            mark = cast("Mark", event.start_mark)  # the pure-Python parser's marks
            if isinstance(event, AliasEvent):
                raise ConstructorError(
                    None, None, "aliases (*name) are not allowed; write the value out", mark
                )
            self._depth += 1
            if self._depth > max_depth:
                raise ConstructorError(None, None, f"nested more than {max_depth} levels deep", mark)
            try:
                return super().compose_node(parent, index)
            finally:
                self._depth -= 1

        def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
            self.flatten_mapping(node)  # merge keys (<<) first, so that merged keys count too
            seen: set[Any] = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                try:
                    duplicate = key in seen
                except TypeError:
                    raise ConstructorError(
                        None,
                        None,
                        f"a mapping key must be text or a number, found {key!r}",
                        key_node.start_mark,
                    ) from None
                if duplicate:
                    raise ConstructorError(
                        None,
                        None,
                        f"duplicate key {key!r} (the last one would silently win)",
                        key_node.start_mark,
                    )
                seen.add(key)
            return super().construct_mapping(node, deep=deep)

    if timestamps_as_text:
        GuardedLoader.yaml_implicit_resolvers = {
            first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
            for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
        }
    return GuardedLoader


def parse_yaml(
    text: str, *, source: str, fix: str, timestamps_as_text: bool = False, max_depth: int = MAX_DEPTH
) -> Any:
    """Parse one YAML document with the checks above; `source` names it in errors.

    `timestamps_as_text` keeps `2025-07-01T11:30:00Z` a string, as the Pulumi CLI hands it to a program.
    """
    return _parse(text, source, fix, timestamps_as_text, max_depth, stream=False)


def parse_yaml_documents(
    text: str, *, source: str, fix: str, timestamps_as_text: bool = False, max_depth: int = MAX_DEPTH
) -> list[Any]:
    """Every document of a YAML stream (documents between `---` lines), with the checks above; an empty
    document is None, so that each keeps its place. An error names the document: `source#2` is the third."""
    documents: list[Any] = _parse(text, source, fix, timestamps_as_text, max_depth, stream=True)
    return documents


def _parse(
    text: str, source: str, fix: str, timestamps_as_text: bool, max_depth: int, *, stream: bool
) -> Any:
    import yaml

    documents: list[Any] = []
    try:
        # The constructor already reads the text, and refuses control characters YAML forbids.
        loader = _loader(timestamps_as_text, max_depth)(text)
        loader.name = source  # error marks name the file, not "<unicode string>"
        try:
            if not stream:
                return loader.get_single_data()
            while loader.check_data():  # type: ignore[no-untyped-call]
                documents.append(loader.get_data())
            return documents
        finally:
            loader.dispose()
    except yaml.YAMLError as error:
        if isinstance(error, yaml.reader.ReaderError):  # raised before `name` was set above
            error.name = source
        where = f"{source}#{len(documents)}" if stream else source
        raise _fail(where, f"not valid YAML: {_one_line(error)}", fix) from None
    except (ValueError, OverflowError) as error:  # a date-like value that is no date: 2025-02-30
        where = f"{source}#{len(documents)}" if stream else source
        raise _fail(where, f"not valid YAML: {error}", fix) from None


def load_yaml(
    path: Path,
    *,
    what: str,
    fix: str,
    max_bytes: int = MAX_CONFIG_BYTES,
    timestamps_as_text: bool = False,
    max_depth: int = MAX_DEPTH,
) -> Any:
    """Read and parse a YAML file; InputError (exit 2) for every way it can be bad."""
    text = read_text(path, what=what, max_bytes=max_bytes, fix=fix)
    return parse_yaml(
        text, source=str(path), fix=fix, timestamps_as_text=timestamps_as_text, max_depth=max_depth
    )


def load_yaml_documents(
    path: Path,
    *,
    what: str,
    fix: str,
    max_bytes: int = MAX_CONFIG_BYTES,
    timestamps_as_text: bool = False,
    max_depth: int = MAX_DEPTH,
) -> list[Any]:
    """Read and parse every document of a YAML file (parse_yaml_documents); InputError (exit 2) for every way it
    can be bad. The size cap holds for the whole file, so it bounds the documents together."""
    text = read_text(path, what=what, max_bytes=max_bytes, fix=fix)
    return parse_yaml_documents(
        text, source=str(path), fix=fix, timestamps_as_text=timestamps_as_text, max_depth=max_depth
    )


def _one_line(error: Exception) -> str:
    return " ".join(str(error).split())
