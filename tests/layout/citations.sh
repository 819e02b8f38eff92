#!/bin/sh
# Citations stay inside the repository. Comments and docs explain the design by pointing at
# docs/design.md (its headings, and the hard cases T-n and G-n) and docs/invariants.md (the rules
# I-n); a reader must never need a file the repository does not hold. This fails on:
#   - a section sign or the name of a specification kept outside the repository;
#   - a hard case or rule number that design.md / invariants.md does not define;
#   - a quoted heading (design.md "Heading") or a link (design.md#slug) that names no heading;
#   - a path into the repository's folders (src/..., docs/..., tests/...) that does not exist.
# Usage: citations.sh SOURCE_DIR
set -u
root="$1"
cd "$root" || exit 2
fail=0
paths="src include tests docs examples apps models python scripts README.md CONTRIBUTING.md CMakeLists.txt cmake
Makefile"
# Only what exists (a checkout may lack an optional folder); text files only.
set --
for p in $paths; do [ -e "$p" ] && set -- "$@" "$p"; done
scan() { grep -rI --exclude=citations.sh --exclude-dir=__pycache__ "$@"; }

report() { # report WHAT WHERE: a failure, and the lines that show it
    echo "citations: $1:"
    [ -z "$2" ] || echo "$2"
    fail=1
}
forbid() { # forbid WHAT HITS: a failure when there are hits
    [ -z "$2" ] || report "$1" "$2"
}

# 1. Nothing outside the repository. The section sign is built and the names are written as
# bracket expressions, so that this file does not name them itself.
sect=$(printf '\302\247')
forbid "a section sign (cite docs/design.md or docs/invariants.md instead)" \
    "$(scan -nF "$sect" "$@")"
forbid "a specification or path outside the repository" \
    "$(scan -nE 'transport[-]spec|graph-runner[-]spec|DESIGN[.]md|[.][.]/shared|/work[/]shared|reference/0[0-9]' "$@")"

# 2. Every hard case and rule cited is defined.
cases=$(grep -oE '^- \*\*[TG]-[0-9]+\*\*' docs/design.md | grep -oE '[TG]-[0-9]+')
rules=$(grep -oE '^\*\*I-[0-9]+\.' docs/invariants.md | grep -oE 'I-[0-9]+')
for id in $(scan -ohwE '[TGI]-[0-9]+' "$@" | sort -u); do
    case " $(echo $cases $rules) " in
    *" $id "*) ;;
    *) report "$id is defined in neither docs/design.md nor docs/invariants.md" \
        "$(scan -nw "$id" "$@")" ;;
    esac
done

# 3. Quoted headings: design.md "A", "B" and "C" / architecture.md "A" name headings of that file.
headings() { grep -E '^#{1,4} ' "docs/$1" | sed -E 's/^#+ //'; }
scan -ohE '(design|architecture|invariants)\.md "[^"]+"((,|, and| and| /) "[^"]+")*' "$@" |
    sed -E 's/^([a-z]+\.md) /\1\n/' | awk '
        /\.md$/ { file = $0; next }
        { n = split($0, part, "\""); for (i = 2; i <= n; i += 2) print file "\t" part[i] }' |
    sort -u >"${TMPDIR:-/tmp}/citations.$$"
while IFS='	' read -r file heading; do
    if ! headings "$file" | grep -qxF "$heading"; then
        report "docs/$file has no heading \"$heading\"" "$(scan -nF "\"$heading\"" "$@")"
    fi
done <"${TMPDIR:-/tmp}/citations.$$"
rm -f "${TMPDIR:-/tmp}/citations.$$"

# 4. Markdown links to a heading: (design.md#slug), GitHub's slug of a heading of that file.
slugs() { headings "$1" | tr 'A-Z' 'a-z' | sed -E 's/[^a-z0-9 _-]//g; s/ /-/g'; }
for link in $(scan -ohE '(design|architecture|invariants)\.md#[a-z0-9_-]+' "$@" | sort -u); do
    file=${link%%#*}
    if ! slugs "$file" | grep -qxF "${link#*#}"; then
        report "docs/$file has no heading for the link $link" "$(scan -nF "$link" "$@")"
    fi
done

# 5. Paths: every path into the repository's own folders that a comment or a doc names exists
# (a glob or a pattern such as tests/unit/test_*.c names a family, not a file).
top="src|include|tests|docs|examples|apps|models|python|scripts|cmake"
for path in $(scan -ohE "(^|[^A-Za-z0-9_./-])($top)/[A-Za-z0-9_./*{}<>-]*" "$@" |
    sed -E 's/^[^a-z]//; s/[.]+$//' | grep -v '[*{}<>]' | sort -u); do
    case "$path" in */test_ | */fuzz_) continue ;; esac
    if [ ! -e "$path" ]; then
        report "$path does not exist" "$(scan -nF "$path" "$@" | head -5)"
    fi
done

[ $fail -eq 0 ] && echo "citations: ok"
exit $fail
