#!/usr/bin/env python3
"""Every relative link between the documentation's pages resolves (issue 31).

usage: check_links.py REPO_ROOT

Checks README.md, docs/**/*.md and every other tracked Markdown file outside tests/data and
third_party: each [text](target) and ![alt](target) outside code must name a file or folder
that exists, and a #anchor must be a heading (GitHub's slug) or an <a id/name> of the target
page. Links with a scheme (https:, mailto:) are not followed. Prints one line per broken link,
FILE:LINE: what is wrong, and exits 1 when there is any; 0 otherwise; 2 for bad usage.
Standard library only.
"""
import os
import re
import subprocess
import sys

FENCE = re.compile(r"^\s*(```|~~~)")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(([^()\s]*(?:\([^()\s]*\)[^()\s]*)*)(?:\s+\"[^\"]*\")?\)")
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
HTML_ANCHOR = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")


def markdown_files(root):
    """README.md and docs/ first, then the other tracked .md files (git ls-files; else a walk)."""
    try:
        names = subprocess.run(["git", "-C", root, "ls-files", "*.md", "**/*.md"], check=True,
                               capture_output=True, text=True).stdout.split("\n")
    except (OSError, subprocess.CalledProcessError):
        names = []
        for d, _, files in os.walk(root):
            if "/." in d or "/build" in d:
                continue
            names += [os.path.relpath(os.path.join(d, f), root) for f in files if f.endswith(".md")]
    names = sorted({n for n in names if n and not n.startswith(("tests/data/", "third_party/", "build/"))})
    # git ls-files lists what is committed or added; a page written but not yet added is still a page.
    for d, _, files in os.walk(os.path.join(root, "docs")):
        names += [os.path.relpath(os.path.join(d, f), root) for f in files if f.endswith(".md")]
    return sorted(set(names))


def github_slug(title):
    """GitHub's heading id: lower case, markup and punctuation dropped, spaces to hyphens."""
    title = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", title)  # a link's text
    title = title.strip().lower()
    title = re.sub(r"[^\w\- ]", "", title)
    return title.replace(" ", "-")


def outside_code(lines):
    """(line number, text) of the lines outside fenced code, inline code blanked."""
    in_fence = False
    for n, line in enumerate(lines, 1):
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        if not in_fence:
            yield n, INLINE_CODE.sub("", line)


_anchor_cache = {}


def anchors(path):
    if path not in _anchor_cache:
        found, seen = set(), {}
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
        in_fence = False
        for line in lines:
            if FENCE.match(line):
                in_fence = not in_fence
                continue
            if in_fence:
                continue
            m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
            if m:
                slug = github_slug(m.group(1))
                count = seen.get(slug, 0)
                seen[slug] = count + 1
                found.add(slug if count == 0 else f"{slug}-{count}")
            found.update(HTML_ANCHOR.findall(line))
        _anchor_cache[path] = found
    return _anchor_cache[path]


def check(root):
    problems = []
    for name in markdown_files(root):
        path = os.path.join(root, name)
        if not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
        for n, line in outside_code(lines):
            for target in LINK.findall(line):
                if not target or re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):
                    continue
                file_part, _, anchor = target.partition("#")
                dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
                if not os.path.exists(dest):
                    problems.append(f"{name}:{n}: link '{target}': {os.path.relpath(dest, root)} does not exist")
                    continue
                if "#" in target and dest.endswith(".md"):
                    if not anchor:
                        problems.append(f"{name}:{n}: link '{target}': an empty anchor")
                    elif anchor not in anchors(dest):
                        problems.append(f"{name}:{n}: link '{target}': no heading or <a id> '{anchor}' in "
                                        f"{os.path.relpath(dest, root)}")
    return problems


def main():
    if len(sys.argv) != 2 or not os.path.isdir(sys.argv[1]):
        print("usage: check_links.py REPO_ROOT", file=sys.stderr)
        return 2
    problems = check(sys.argv[1])
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} broken link(s)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
