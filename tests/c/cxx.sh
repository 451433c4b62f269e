#!/bin/sh
# C++ programs built with the system g++ (libstdc++, what C++ programs on
# Linux use) and linked with each kennel library given: tests/c/cxx.cpp
# (operator new and delete served by kennel) and tests/c/cxx_replace.cpp (a
# program replacing operator new and delete itself).
#
# usage: cxx.sh <include dir> <libkennel.so or libkennel.a>...
# Skipped with a note when g++ is not installed, unless
# KENNEL_PRELOAD_REQUIRE=1 (CI installs it and sets that).
set -u
if ! command -v g++ >/dev/null; then
    if [ "${KENNEL_PRELOAD_REQUIRE:-0}" = 1 ]; then echo "FAIL  g++ is not installed"; exit 1; fi
    echo "skip  g++ is not installed"
    exit 0
fi
here=$(cd "$(dirname "$0")" && pwd)
include=$1
shift
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
n=0
for lib in "$@"; do
    n=$((n + 1))
    case $lib in
    *.a) link="$lib -lpthread" ;;
    *) link="$lib -Wl,-rpath,$(cd "$(dirname "$lib")" && pwd)" ;;
    esac
    for program in cxx cxx_replace; do
        # -Wno-sized-deallocation: cxx_replace defines operator delete
        # without its sized form on purpose.
        # shellcheck disable=SC2086
        if ! g++ -std=c++17 -O2 -Wall -Wextra -Werror -Wno-sized-deallocation -I"$include" \
            "$here/$program.cpp" $link -o "$work/$program-$n" 2>"$work/build"; then
            echo "FAIL  $program with $(basename "$lib"): cannot build"
            cat "$work/build"
            failures=$((failures + 1))
            continue
        fi
        echo "== $program with $lib"
        if ! "$work/$program-$n"; then failures=$((failures + 1)); fi
    done
done
if [ $failures -ne 0 ]; then
    echo "c++: $failures program(s) failed"
    exit 1
fi
