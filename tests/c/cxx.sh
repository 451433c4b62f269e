#!/bin/sh
# C++ programs built with the system g++ (libstdc++, what C++ programs on
# Linux use) and linked with each kennel library given: tests/c/cxx.cpp
# (operator new and delete served by kennel) and tests/c/cxx_replace.cpp (a
# program replacing operator new and delete itself); and, with each shared
# library preloaded, tests/c/cxx_plugin.cpp loaded by a C program with
# dlopen(RTLD_LOCAL), whose C++ runtime kennel must still find.
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
# A C++ plugin that a C program loads with dlopen(RTLD_LOCAL), under each
# shared library preloaded: its C++ runtime is outside the global scope.
if g++ -std=c++17 -O2 -Wall -Wextra -Werror -shared -fPIC "$here/cxx_plugin.cpp" -o "$work/plugin.so" 2>"$work/build" &&
    gcc -std=gnu11 -O2 -Wall -Wextra -Werror "$here/cxx_plugin_host.c" -ldl -o "$work/plugin_host" 2>>"$work/build"; then
    for lib in "$@"; do
        case $lib in *.a) continue ;; esac
        preload=$(cd "$(dirname "$lib")" && pwd)/$(basename "$lib")
        if LD_PRELOAD=$preload "$work/plugin_host" "$work/plugin.so"; then
            echo "ok    C++ plugin loaded with RTLD_LOCAL, $(basename "$lib") preloaded"
        else
            echo "FAIL  C++ plugin loaded with RTLD_LOCAL, $(basename "$lib") preloaded"
            failures=$((failures + 1))
        fi
    done
else
    echo "FAIL  cannot build the C++ plugin"
    cat "$work/build"
    failures=$((failures + 1))
fi
if [ $failures -ne 0 ]; then
    echo "c++: $failures program(s) failed"
    exit 1
fi
