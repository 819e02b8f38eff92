#!/bin/sh
# The layering docs/architecture.md ("Layers") promises, checked two ways:
#   - includes: a folder of src/ includes the internal headers of itself and the folders below
#     it only;
#   - calls: an object of a folder calls functions defined by itself and the folders below it
#     only, read from the objects' symbols (`nm`: each undefined symbol is looked up among the
#     symbols the library's other objects define). This sees what includes cannot: a call
#     through a public header into a folder above.
# Outside src/: examples/ and python/src/ include the public headers (<mstar/...>) and their own
# only; apps/ and models/ may add the named internal set (the tool headers, and for the
# benchmarks the bench headers below); python/CMakeLists.txt configures its own targets only.
# Usage: run.sh SOURCE_DIR [OBJECT_DIR]  (OBJECT_DIR: the mstar_objects target's object folder,
# build/CMakeFiles/mstar_objects.dir; without it the call check is skipped)
set -u
export LC_ALL=C
root="$1"
src="$root/src"
objs="${2:-}"
fail=0

# The layers, bottom up: each folder and the folders it may use.
below() {
    case "$1" in
    core) echo "" ;;
    wire) echo "core" ;;
    device) echo "core" ;;
    mesh) echo "core wire" ;;
    ranks) echo "core wire mesh device" ;;
    step) echo "core device" ;;
    resources) echo "core wire device step ranks" ;;
    tensors) echo "core wire mesh device" ;;
    graphs) echo "core wire mesh device ranks step tensors resources" ;;
    *) echo "?" ;;
    esac
}
folders="core wire device mesh ranks step resources tensors graphs"

# The named internal headers apps/ and models/ may include (docs/architecture.md "Layers").
tool_headers="core/vec.h core/json.h core/u64map.h core/fs.h"
bench_headers="tensors/bookkeeper.h tensors/ucx/ucx_engine.h"

for dir in "$src"/*/; do
    f=$(basename "$dir")
    if [ "$(below "$f")" = "?" ]; then
        echo "layering: src/$f has no place in the layers (add it to tests/layout/run.sh and docs/architecture.md)"
        fail=1
    fi
done

# ---- includes ---------------------------------------------------------------------------------
for f in $folders; do
    ok=" $f $(below "$f") "
    hits=$(grep -rnE '^[[:space:]]*#[[:space:]]*include[[:space:]]+"[a-z]+/' "$src/$f" \
        --include='*.c' --include='*.h' --include='*.cu' --include='*.cuh' 2>/dev/null |
        awk -v ok="$ok" -v all=" $folders " '{
            split($0, q, "\""); split(q[2], part, "/"); d = " " part[1] " "
            if (index(all, d) && !index(ok, d)) print }')
    if [ -n "$hits" ]; then
        echo "layering: src/$f may include only $(below "$f"):"
        echo "$hits"
        fail=1
    fi
done

# ---- calls ------------------------------------------------------------------------------------
if [ -n "$objs" ]; then
    tmp="${TMPDIR:-/tmp}/layering.$$"
    mkdir -p "$tmp"
    # Objects of sources that still exist (a moved file's old object may linger in the build).
    (cd "$objs" && find src -name '*.o') | while read -r o; do
        s=${o%.o}
        [ -f "$root/$s" ] && echo "$o"
    done >"$tmp/objects"
    if [ ! -s "$tmp/objects" ]; then
        echo "layering: no objects under $objs/src (build the library first)"
        fail=1
    fi
    # nm -A prefixes each line with its object: src/<folder>/...o: (one nm run per question).
    (cd "$objs" && ${NM:-nm} -A -g --defined-only $(cat "$tmp/objects")) |
        awk 'NF == 3 { split($1, p, "/"); print $3, p[2] }' | sort -u >"$tmp/defined"
    (cd "$objs" && ${NM:-nm} -A -u $(cat "$tmp/objects")) |
        awk '{ o = $1; sub(/:$/, "", o); sub(/\.o$/, "", o); split(o, p, "/"); print $NF, p[2], o }' |
        sort >"$tmp/used"
    # symbol user-folder user-source defining-folder, for calls that cross folders
    join "$tmp/used" "$tmp/defined" | awk '$2 != $4' >"$tmp/cross"
    for f in $folders; do
        bad=$(awk -v f="$f" -v ok=" $(below "$f") " '$2 == f && index(ok, " " $4 " ") == 0 {
                  print "  " $3 " calls " $1 " (src/" $4 ")" }' "$tmp/cross")
        if [ -n "$bad" ]; then
            echo "layering: src/$f may call only $(below "$f"):"
            echo "$bad"
            fail=1
        fi
    done
    rm -rf "$tmp"
fi

# ---- outside src/ -----------------------------------------------------------------------------
# allowed_outside DIR HEADERS: DIR's sources include internal headers (a path under a folder of
# src/) only from HEADERS.
allowed_outside() {
    [ -d "$root/$1" ] || return 0
    pattern=$(echo $folders | sed 's/ /|/g')
    grep -rnE "^[[:space:]]*#[[:space:]]*include[[:space:]]+[\"<]($pattern)/" "$root/$1" \
        --include='*.c' --include='*.h' --include='*.cu' --include='*.cuh' 2>/dev/null |
        while IFS= read -r hit; do
            header=$(echo "$hit" | sed -E 's/.*include[[:space:]]+["<]([^">]+)[">].*/\1/')
            case " $2 " in *" $header "*) ;; *) echo "$hit" ;; esac
        done
}
check_outside() { # check_outside DIR HEADERS WHAT
    hits=$(allowed_outside "$1" "$2")
    if [ -n "$hits" ]; then
        echo "layering: $1 includes $3:"
        echo "$hits"
        fail=1
    fi
}
check_outside apps/mstar/bench "$tool_headers $bench_headers" \
    "the public headers, the tool headers and the bench headers only"
for d in "$root"/apps/mstar/*/; do
    case "$d" in */bench/) continue ;; esac
    check_outside "apps/mstar/$(basename "$d")" "$tool_headers" \
        "the public headers and the tool headers only"
done
check_outside models "$tool_headers" "the public headers and the tool headers only"
check_outside python/src "" "the public headers only"

# Inside src/tensors: a transport with a folder of its own (arena/, cuda_ipc/, ucx/) is included
# from its own folder and by the manager that picks it (comm*.c) only, never from another
# transport; and a test-hook header (*_test_hooks.h) from its own folder only: the library never
# calls what is there for tests.
for sub in arena cuda_ipc ucx; do
    hits=$(grep -rnE "^[[:space:]]*#[[:space:]]*include[[:space:]]+\"tensors/$sub/" "$src" \
        --include='*.c' --include='*.h' --include='*.cu' | grep -vE "^$src/tensors/($sub/|comm[a-z_]*\.c:)")
    hooks=$(grep -rnE "^[[:space:]]*#[[:space:]]*include[[:space:]]+\"tensors/$sub/[a-z_]*_test_hooks\.h\"" \
        "$src" --include='*.c' --include='*.h' --include='*.cu' | grep -vE "^$src/tensors/$sub/")
    if [ -n "$hits$hooks" ]; then
        echo "layering: src/tensors/$sub/ is the manager's and its own (its test hooks its own):"
        [ -z "$hits" ] || echo "$hits"
        [ -z "$hooks" ] || echo "$hooks"
        fail=1
    fi
done

hits=$(grep -HnE '^[[:space:]]*#[[:space:]]*include[[:space:]]+"' "$root"/examples/*.c 2>/dev/null)
if [ -n "$hits" ]; then
    echo "layering: examples include only <mstar/...> and system headers:"
    echo "$hits"
    fail=1
fi

# python/CMakeLists.txt configures the targets it defines, never another folder's.
py="$root/python/CMakeLists.txt"
if [ -f "$py" ]; then
    own=$(sed -nE 's/^[[:space:]]*add_(library|executable|custom_target)\(([A-Za-z0-9_]+).*/\2/p' "$py")
    hits=$(grep -nE '^[[:space:]]*(target_[a-z_]+|set_target_properties|add_dependencies)\(' "$py" |
        while IFS= read -r line; do
            t=$(echo "$line" | sed -E 's/^[0-9]+:[[:space:]]*[a-z_]+\(([A-Za-z0-9_]+).*/\1/')
            case " $(echo $own) " in *" $t "*) ;; *) echo "$line" ;; esac
        done)
    if [ -n "$hits" ]; then
        echo "layering: python/CMakeLists.txt configures only its own targets ($(echo $own)):"
        echo "$hits"
        fail=1
    fi
fi

[ $fail -eq 0 ] && echo "layering: ok"
exit $fail
