#!/bin/sh
# The exported list of libmstar.so is the public API and nothing else: every defined dynamic
# symbol is a function declared in include/mstar/ (no internal mstar__ function, no msgpuck mp_*),
# and every function declared there is exported (none forgot its MSTAR_API mark).
#
# The declared functions come from gcc's -aux-info, which writes one line per prototype the
# compiler saw with the header and line it came from; static inline helpers (NF: defined here)
# are not exported and are left out.
#   check_exports.sh INCLUDE_DIR LIBMSTAR_SO SCRATCH_DIR
set -eu
include="$1"
lib="$2"
work="$3"
printf '#include <mstar/mstar.h>\n' >"$work/api.c"
gcc -std=c11 -I"$include" -fsyntax-only -aux-info "$work/api.txt" "$work/api.c"
grep -E "^/\* [^ ]*/mstar/[a-z_]+\.h:[0-9]+:NC \*/" "$work/api.txt" |
    sed -E 's/^[^(]* \**([A-Za-z_][A-Za-z0-9_]*) \(.*/\1/' | sort -u >"$work/declared.txt"
nm -D --defined-only "$lib" | awk '{ print $NF }' | grep -vE '^(_init|_fini)$' |
    sort -u >"$work/exported.txt"
[ -s "$work/declared.txt" ] || { echo "install test: no declarations found in $include"; exit 1; }
extra=$(comm -13 "$work/declared.txt" "$work/exported.txt")
missing=$(comm -23 "$work/declared.txt" "$work/exported.txt")
if [ -n "$extra" ]; then
    echo "install test: libmstar.so exports $(echo "$extra" | wc -l) symbols no public header declares:"
    echo "$extra" | head -n 20
fi
if [ -n "$missing" ]; then
    echo "install test: $(echo "$missing" | wc -l) declared functions are not exported (MSTAR_API?):"
    echo "$missing" | head -n 20
fi
[ -z "$extra" ] && [ -z "$missing" ] || exit 1
echo "install test: libmstar.so exports the $(wc -l <"$work/declared.txt") declared functions, nothing else"
