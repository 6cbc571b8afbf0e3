#!/usr/bin/env python3
"""Checks the relative links of the repository's Markdown files.

Usage: check_links.py ROOT      check README.md, docs/*.md and every other tracked *.md under ROOT
       check_links.py --self-test

Every link [text](target) outside code (fenced blocks and inline code spans) whose target has no URL scheme
(http:, https:, mailto:, ...) must name an existing file or folder, relative to the linking file's folder (or to
ROOT when it starts with /). Where the target has a #anchor and is a Markdown file (a bare #anchor means the
linking file itself), the anchor must be the slug of one of its headings, by GitHub's rules: the heading's text
lower-cased, punctuation dropped except - and _, each space turned into -, and -1, -2, ... added to repeats.
Each dead link is printed as FILE:LINE: dead link TARGET (why); the exit status is 1 if there is any.
Python 3 standard library only.
"""

import os
import re
import subprocess
import sys
import tempfile
import unicodedata
import urllib.parse

SKIPPED_DIRS = {"node_modules", ".git"}


def skipped_dir(name):
    return name in SKIPPED_DIRS or name == "build" or name.startswith("build-") or name.startswith("build_")


def markdown_files(root):
    """README.md, docs/*.md, and every other tracked *.md (or every *.md, outside a git checkout)."""
    files = set()
    for name in ["README.md"]:
        if os.path.isfile(os.path.join(root, name)):
            files.add(name)
    docs = os.path.join(root, "docs")
    if os.path.isdir(docs):
        for name in os.listdir(docs):
            if name.endswith(".md") and os.path.isfile(os.path.join(docs, name)):
                files.add("docs/" + name)
    tracked = None
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-z", "--", "*.md"], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, check=True)
        tracked = [p for p in out.stdout.decode("utf-8", "replace").split("\0") if p]
    except (OSError, subprocess.CalledProcessError):
        tracked = None
    if tracked is None:
        tracked = []
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if not skipped_dir(d))
            for name in filenames:
                if name.endswith(".md"):
                    tracked.append(os.path.relpath(os.path.join(dirpath, name), root).replace(os.sep, "/"))
    for path in tracked:
        if any(skipped_dir(part) for part in path.split("/")[:-1]):
            continue
        if os.path.isfile(os.path.join(root, path)):  # a tracked file may be deleted or moved in the work tree
            files.add(path)
    return sorted(files)


FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")


def code_free_lines(text):
    """The file's lines with fenced code blocks blanked and inline code spans removed (line numbers kept)."""
    lines = text.split("\n")
    result = []
    fence = None  # (char, length) of the open fence
    for line in lines:
        m = FENCE.match(line)
        if fence is None:
            if m and not (m.group(1)[0] == "`" and "`" in m.group(2)):
                fence = (m.group(1)[0], len(m.group(1)))
                result.append("")
                continue
            result.append(strip_code_spans(line))
        else:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= fence[1] and not m.group(2).strip():
                fence = None
            result.append("")
    return result


def strip_code_spans(line):
    """Removes `code` spans: a run of backticks up to the next run of the same length."""
    out = []
    i = 0
    n = len(line)
    while i < n:
        c = line[i]
        if c == "\\" and i + 1 < n:
            out.append(line[i:i + 2])
            i += 2
            continue
        if c == "`":
            j = i
            while j < n and line[j] == "`":
                j += 1
            run = line[i:j]
            k = j
            close = -1
            while k < n:
                if line[k] == "`":
                    m = k
                    while m < n and line[m] == "`":
                        m += 1
                    if m - k == len(run):
                        close = k
                        break
                    k = m
                else:
                    k += 1
            if close < 0:
                out.append(run)  # no closing run: literal backticks
                i = j
            else:
                out.append(" ")
                i = close + len(run)
            continue
        out.append(c)
        i += 1
    return "".join(out)


# [text](target "title") or ![alt](target); the text may hold one level of [brackets].
INLINE_LINK = re.compile(r"(?<!\\)!?\[(?:[^\[\]\\]|\\.|\[[^\[\]]*\])*\]\(\s*(<[^>]*>|[^\s()]*(?:\([^\s()]*\)[^\s()]*)*)"
                         r"(?:\s+(?:\"[^\"]*\"|'[^']*'|\([^)]*\)))?\s*\)")
# [label]: target
REFERENCE_DEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def links(text):
    """(line number, target) of every link outside code."""
    found = []
    for number, line in enumerate(code_free_lines(text), start=1):
        for m in INLINE_LINK.finditer(line):
            found.append((number, m.group(1)))
        m = REFERENCE_DEF.match(line)
        if m:
            found.append((number, m.group(1)))
    return [(n, t[1:-1] if t.startswith("<") and t.endswith(">") else t) for n, t in found]


ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
HTML_ID = re.compile(r"<a\s[^>]*?(?:name|id)\s*=\s*[\"']([^\"']+)[\"']", re.IGNORECASE)


def heading_text(raw):
    """The text GitHub renders for a heading's Markdown: links as their text, no code marks, no emphasis stars,
    no HTML tags."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", raw)
    text = re.sub(r"<[^>]+>", "", text)
    text = text.replace("`", "").replace("*", "")
    return text.strip()


def slug(text):
    out = []
    for c in text.lower():
        if c.isalnum() or c in "-_" or unicodedata.category(c).startswith("M"):
            out.append(c)
        elif c == " ":
            out.append("-")
    return "".join(out)


def anchors(text):
    """Every anchor a Markdown file offers: its headings' slugs (repeats numbered) and explicit HTML anchors."""
    result = set()
    seen = {}
    lines = text.split("\n")
    plain = code_free_lines(text)
    previous = ""
    for raw, line in zip(lines, plain):
        heading = None
        in_code = line == "" and raw.strip() != ""
        if not in_code:
            m = ATX.match(raw)
            if m:
                heading = m.group(2) or ""
            elif SETEXT.match(raw) and previous.strip() and not previous.lstrip().startswith("|") \
                    and not ATX.match(previous) and not SETEXT.match(previous):
                heading = previous.strip()
            for m in HTML_ID.finditer(raw):
                result.add(m.group(1))
        if heading is not None:
            base = slug(heading_text(heading))
            if base in seen:
                seen[base] += 1
                result.add("%s-%d" % (base, seen[base]))
            else:
                seen[base] = 0
                result.add(base)
            previous = ""
        else:
            previous = "" if in_code else raw
    return result


def check(root):
    """(links checked, [(file, line, target, why)])."""
    root = os.path.abspath(root)
    anchor_cache = {}

    def anchors_of(path):
        if path not in anchor_cache:
            with open(path, encoding="utf-8", errors="replace") as f:
                anchor_cache[path] = anchors(f.read())
        return anchor_cache[path]

    checked = 0
    dead = []
    for rel in markdown_files(root):
        path = os.path.join(root, rel)
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        for number, target in links(text):
            if not target or SCHEME.match(target):
                continue
            checked += 1
            file_part, _, anchor = target.partition("#")
            file_part = urllib.parse.unquote(file_part.split("?", 1)[0])
            anchor = urllib.parse.unquote(anchor)
            if file_part == "":
                resolved = path
            elif file_part.startswith("/"):
                resolved = os.path.normpath(os.path.join(root, file_part.lstrip("/")))
            else:
                resolved = os.path.normpath(os.path.join(os.path.dirname(path), file_part))
            if not os.path.exists(resolved):
                dead.append((rel, number, target, "no such file: %s" % os.path.relpath(resolved, root)))
                continue
            if anchor and os.path.isfile(resolved) and resolved.lower().endswith((".md", ".markdown")):
                found = anchors_of(resolved)
                if anchor not in found and anchor.lower() not in found:
                    dead.append((rel, number, target,
                                 "no heading #%s in %s" % (anchor, os.path.relpath(resolved, root))))
    return checked, dead


def report(root):
    checked, dead = check(root)
    for rel, number, target, why in dead:
        print("%s:%d: dead link %s (%s)" % (rel, number, target, why))
    if dead:
        print("%d links checked, %d dead" % (checked, len(dead)))
        return 1
    print("%d links checked, all alive" % checked)
    return 0


def self_test():
    with tempfile.TemporaryDirectory() as root:
        os.makedirs(os.path.join(root, "docs"))
        os.makedirs(os.path.join(root, "node_modules", "pkg"))
        with open(os.path.join(root, "README.md"), "w") as f:
            f.write("# Title\n\n"
                    "See [the guide](docs/GUIDE.md#the-set-up-step) and [again](docs/GUIDE.md#notes-1).\n"
                    "A [dead file](docs/MISSING.md), a [bad anchor](docs/GUIDE.md#no-such-heading).\n"
                    "[Here](#title), [the site](https://example.com/x.md), [mail](mailto:a@example.com).\n"
                    "Code: `[not a link](nowhere.md)`.\n\n"
                    "```sh\n[not a link either](nowhere.md)\n```\n")
        with open(os.path.join(root, "docs", "GUIDE.md"), "w") as f:
            f.write("# Guide\n\n## The *set-up* step!\n\n## Notes\n\n## Notes\n\nBack to [the top](../README.md).\n")
        with open(os.path.join(root, "node_modules", "pkg", "README.md"), "w") as f:
            f.write("[ignored](missing.md)\n")
        checked, dead = check(root)
        got = sorted((rel, target) for rel, _, target, _ in dead)
        want = [("README.md", "docs/GUIDE.md#no-such-heading"), ("README.md", "docs/MISSING.md")]
        if got != want or checked != 6:
            print("self-test FAILED: %d links checked, dead %r; wanted 6 checked, dead %r" % (checked, got, want))
            return 1
    print("self-test passed: 6 links checked, the 2 dead ones found")
    return 0


def main(argv):
    if len(argv) == 2 and argv[1] == "--self-test":
        return self_test()
    if len(argv) != 2 or argv[1].startswith("-"):
        print("usage: check_links.py ROOT | --self-test", file=sys.stderr)
        return 2
    if not os.path.isdir(argv[1]):
        print("check_links.py: %s is not a folder" % argv[1], file=sys.stderr)
        return 2
    return report(argv[1])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
