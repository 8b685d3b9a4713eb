"""A minimal YAML reader (Python stdlib only) for the block-style files of deploy/prometheus and
deploy/kubernetes/components/monitoring: nested mappings and sequences, plain and quoted
scalars, `|` / `>` block scalars (with `-` / `+` chomping), empty flow collections (`[]`, `{}`)
and one-line flow sequences of plain scalars. Scalars stay strings (no int/bool conversion).
Anchors, tags, multi-document streams, multi-line plain or quoted scalars and flow mappings
with content are not supported: load() raises YamlError on what it does not understand rather
than guess. It is not a general YAML parser; keep the files it reads in that simple style.
"""

import json
import re

__all__ = ["YamlError", "load", "load_file"]


class YamlError(ValueError):
    pass


_KEY = re.compile(r"^([A-Za-z0-9_.\-/]+|\"[^\"]*\"|'[^']*'):(?:\s+(.*))?$")
_BLOCK = re.compile(r"^([|>])([+-]?)\s*(?:#.*)?$")


class _Reader:
    def __init__(self, text):
        self.lines = text.split("\n")
        self.i = 0

    def _significant(self, j):
        """Index of the next line at or after j that is not blank or a comment, or None."""
        while j < len(self.lines):
            stripped = self.lines[j].strip()
            if stripped and not stripped.startswith("#"):
                if stripped in ("---", "..."):
                    raise YamlError(f"line {j + 1}: document markers are not supported")
                if "\t" in self.lines[j][: len(self.lines[j]) - len(self.lines[j].lstrip())]:
                    raise YamlError(f"line {j + 1}: tab in indentation")
                return j
            j += 1
        return None

    def peek(self):
        j = self._significant(self.i)
        if j is None:
            return None, None, None
        line = self.lines[j]
        indent = len(line) - len(line.lstrip(" "))
        return j, indent, line[indent:]

    def error(self, j, message):
        raise YamlError(f"line {j + 1}: {message}: {self.lines[j].strip()!r}")

    # node := sequence | mapping, at exactly `indent`
    def node(self, indent):
        j, ind, content = self.peek()
        if j is None or ind < indent:
            return None
        if content == "-" or content.startswith("- "):
            return self.sequence(ind)
        return self.mapping(ind)

    def sequence(self, indent):
        items = []
        while True:
            j, ind, content = self.peek()
            if j is None or ind < indent:
                return items
            if ind > indent:
                self.error(j, "unexpected indentation")
            if not (content == "-" or content.startswith("- ")):
                return items
            rest = content[1:].lstrip(" ")
            if not rest or rest.startswith("#"):
                self.i = j + 1
                items.append(self.node(indent + 1))
                continue
            if _KEY.match(rest):
                # "- key: value": a mapping whose keys sit where `key` starts.
                col = indent + (len(content) - len(rest))
                self.lines[j] = " " * col + rest
                items.append(self.mapping(col))
                continue
            self.i = j + 1
            items.append(self.scalar(j, rest))

    def mapping(self, indent):
        result = {}
        while True:
            j, ind, content = self.peek()
            if j is None or ind < indent:
                return result
            if ind > indent:
                self.error(j, "unexpected indentation")
            if content == "-" or content.startswith("- "):
                return result  # a sequence at the parent's key indentation ends this mapping
            m = _KEY.match(content)
            if not m:
                self.error(j, "expected `key: value`")
            key = m.group(1)
            if key[0] in "\"'":
                key = key[1:-1]
            if key in result:
                self.error(j, f"duplicate key {key!r}")
            rest = (m.group(2) or "").strip()
            self.i = j + 1
            if not rest or rest.startswith("#"):
                nj, nind, ncontent = self.peek()
                if nj is not None and nind == indent and (
                        ncontent == "-" or ncontent.startswith("- ")):
                    result[key] = self.sequence(indent)
                elif nj is not None and nind > indent:
                    result[key] = self.node(nind)
                else:
                    result[key] = None
            elif _BLOCK.match(rest):
                style, chomp = _BLOCK.match(rest).groups()
                result[key] = self.block(indent, style, chomp)
            else:
                result[key] = self.scalar(j, rest)

    def block(self, parent_indent, style, chomp):
        raw = []
        while self.i < len(self.lines):
            line = self.lines[self.i]
            if line.strip() and len(line) - len(line.lstrip(" ")) <= parent_indent:
                break
            raw.append(line)
            self.i += 1
        content = [l for l in raw if l.strip()]
        if not content:
            return ""
        base = len(content[0]) - len(content[0].lstrip(" "))
        body = []
        for l in raw:
            if l.strip() and len(l) - len(l.lstrip(" ")) < base:
                raise YamlError(f"block scalar line less indented than its first line: {l!r}")
            body.append(l[base:] if l.strip() else "")
        trailing = 0
        while body and body[-1] == "":
            body.pop()
            trailing += 1
        if style == "|":
            text = "\n".join(body)
        else:
            # Folding: the break between two lines of text is a space, n blank lines between
            # them are n breaks; around more-indented lines the breaks are kept.
            text, last, empties = "", None, 0
            for l in body:
                if l == "":
                    empties += 1
                    continue
                kind = "more" if l.startswith(" ") else "text"
                if last is None:
                    text += "\n" * empties
                elif last == "text" and kind == "text":
                    text += " " if empties == 0 else "\n" * empties
                else:
                    text += "\n" * (empties + 1)
                text += l
                last, empties = kind, 0
        if chomp == "-":
            return text
        if chomp == "+":
            return text + "\n" * (1 + trailing)
        return text + "\n"

    def scalar(self, j, text):
        if text.startswith('"'):
            end = _quoted_end(text, '"')
            if end is None:
                self.error(j, "unterminated or multi-line double-quoted scalar")
            try:
                value = json.loads(text[: end + 1])
            except json.JSONDecodeError:
                self.error(j, "unsupported escape in a double-quoted scalar")
            rest = text[end + 1:].strip()
        elif text.startswith("'"):
            end = _quoted_end(text, "'")
            if end is None:
                self.error(j, "unterminated or multi-line single-quoted scalar")
            value = text[1:end].replace("''", "'")
            rest = text[end + 1:].strip()
        elif text.startswith("["):
            if not text.rstrip().endswith("]") or "[" in text[1:] or "{" in text:
                self.error(j, "only one-line flow sequences of plain scalars are supported")
            inner = text.strip()[1:-1].strip()
            return [s.strip() for s in inner.split(",")] if inner else []
        elif text.startswith("{"):
            if text.strip() != "{}":
                self.error(j, "only empty flow mappings are supported")
            return {}
        elif text[0] in "&*!%@`":
            self.error(j, "anchors, aliases, tags and directives are not supported")
        else:
            value = re.split(r"\s+#", text, maxsplit=1)[0].rstrip()
            # (A continuation line of a multi-line plain scalar is more indented than its key:
            # mapping() and sequence() reject it as unexpected indentation.)
            rest = ""
        if rest and not rest.startswith("#"):
            self.error(j, "text after a quoted scalar")
        return value


def _quoted_end(text, quote):
    i = 1
    while i < len(text):
        c = text[i]
        if quote == '"' and c == "\\":
            i += 2
            continue
        if c == quote:
            if quote == "'" and i + 1 < len(text) and text[i + 1] == "'":
                i += 2
                continue
            return i
        i += 1
    return None


def load(text):
    reader = _Reader(text)
    j, ind, _ = reader.peek()
    if j is None:
        return None
    value = reader.node(ind)
    j, _, _ = reader.peek()
    if j is not None:
        reader.error(j, "unexpected content (bad indentation?)")
    return value


def load_file(path):
    with open(path, encoding="utf-8") as f:
        return load(f.read())
