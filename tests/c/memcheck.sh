#!/bin/sh
# Valgrind's memcheck must report a read after free in a C program using
# kennel's valgrind build, and (the control) not with the plain build, where
# kennel's blocks are invisible to it. Both runs keep valgrind from putting
# its own malloc in place of kennel's (somalloc=nouserintercepts), as a user
# of the valgrind build must.
#
# usage: memcheck.sh <program linked with the valgrind build> <same, plain build>
# Skipped with a note when valgrind is not installed, unless
# KENNEL_PRELOAD_REQUIRE=1 (CI installs it and sets that).
set -u
if ! command -v valgrind >/dev/null; then
    if [ "${KENNEL_PRELOAD_REQUIRE:-0}" = 1 ]; then echo "FAIL  valgrind is not installed"; exit 1; fi
    echo "skip  valgrind is not installed"
    exit 0
fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT
failures=0

valgrind --tool=memcheck --soname-synonyms=somalloc=nouserintercepts --error-exitcode=99 "$1" >"$out" 2>&1
rc=$?
# Exactly one error: the read after free, and nothing in the correct uses
# before it.
if [ $rc -eq 99 ] && grep -q "Invalid read of size 1" "$out" && grep -q "free'd" "$out" &&
    grep -q "ERROR SUMMARY: 1 errors from 1 contexts" "$out" && grep -q "kennel served" "$out"; then
    echo "ok    memcheck reports a read after free with kennel's valgrind build, and nothing else"
else
    echo "FAIL  memcheck with the valgrind build: exit $rc"
    cat "$out"
    failures=1
fi

valgrind --tool=memcheck --soname-synonyms=somalloc=nouserintercepts --error-exitcode=99 "$2" >"$out" 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -q "kennel served" "$out"; then
    echo "ok    control: without the valgrind build memcheck sees no kennel block"
else
    echo "FAIL  control run with the plain build: exit $rc"
    cat "$out"
    failures=1
fi
exit $failures
