#!/usr/bin/env python3
"""Names in anonymous namespaces are unique across src/ (issue 25, cmake/UnityBuild.cmake).

A unity batch compiles several .cpp files as one translation unit, so two files' file-local names
meet there. Two definitions of one name with one signature fail to compile, but two overloads of
one name compile, and a call may then pick the other file's function without a word. So no two
files of src/ may declare the same name at the top of an anonymous namespace (type aliases
excepted: two aliases of one name either agree or fail to compile). The fuzz project batches the
torch-free libraries together, so the rule is across all of src/, not per target.

Usage: check_unity_names.py SOURCE_DIR. Prints each clash, exits 1 if there is one.
"""
import collections
import pathlib
import re
import sys

# A target of one file, never batched with another: src/CMakeLists.txt (dpinfer_parquet MODULE).
ALONE = {"src/io/parquet/parquet_module.cpp"}

DECLARATIONS = [
    re.compile(r"^(?:constexpr|const|static|inline)[^=(]*?\b(\w+)\s*(?:=|\[|\{)"),  # constants
    re.compile(r"^(?:struct|class|enum class|enum|union)\s+(\w+)"),                  # types
    re.compile(r"^(?:template\s*<[^>]*>\s*)?[\w:<>,*&\s]+?[\s*&](\w+)\("),            # functions
]


def top_level_lines_of_anonymous_namespaces(text):
    """The lines that begin at the top level of an anonymous namespace (column 0, brace depth of
    its contents), skipping comments, strings and raw strings."""
    lines, depth, anon_depths, i, n = [], 0, [], 0, len(text)
    line_start = 0
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            i = text.find("\n", i)
            i = n if i < 0 else i
            continue
        if text.startswith("/*", i):
            i = text.find("*/", i) + 2
            continue
        raw = re.match(r'(?:u8|u|U|L)?R"([^(\s]*)\(', text[i:i + 40])
        if raw and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            i = text.find(")" + raw.group(1) + '"', i + raw.end()) + len(raw.group(1)) + 2
            continue
        if c in "\"'" and not (c == "'" and i > 0 and text[i - 1].isdigit()):
            i += 1
            while i < n and text[i] != c:
                i += 2 if text[i] == "\\" else 1
            i += 1
            continue
        if c == "\n":
            line_start = i + 1
            if anon_depths and depth == anon_depths[-1]:
                end = text.find("\n", line_start)
                lines.append(text[line_start:end if end >= 0 else n])
        elif c == "{":
            depth += 1
            if re.search(r"(?:^|\s)namespace\s*$", text[line_start:i]):
                anon_depths.append(depth)
        elif c == "}":
            if anon_depths and depth == anon_depths[-1]:
                anon_depths.pop()
            depth -= 1
        i += 1
    return lines


def main():
    root = pathlib.Path(sys.argv[1])
    where = collections.defaultdict(set)
    for path in sorted((root / "src").rglob("*.cpp")):
        name = path.relative_to(root).as_posix()
        if name in ALONE:
            continue
        for line in top_level_lines_of_anonymous_namespaces(path.read_text()):
            if not line or line[0] in " \t/#}" or line.startswith(("using ", "namespace ", "template <typename")):
                continue
            for pattern in DECLARATIONS:
                m = pattern.match(line)
                if m:
                    where[m.group(1)].add(name)
                    break
    clashes = {k: v for k, v in where.items() if len(v) > 1}
    for k, files in sorted(clashes.items()):
        print(f"'{k}' is declared in the anonymous namespaces of {', '.join(sorted(files))}: a unity batch makes them "
              "one translation unit; give each file's its own name, or share one declaration in a header")
    checked = sum(len(v) for v in where.values())
    print(f"check_unity_names: {checked} file-local names in src/, {len(clashes)} clash(es)")
    return 1 if clashes else 0


if __name__ == "__main__":
    sys.exit(main())
