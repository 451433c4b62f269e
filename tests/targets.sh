#!/bin/sh
# The test suite on targets other than the host's (make test runs it after
# the native suite; README "Targets"): Linux on aarch64, riscv64, x86 and
# arm under qemu-user (aarch64 also with 16 KiB and 64 KiB pages, fast and
# hardened; riscv64 and arm without libc only), Windows under wine,
# wasm32-wasi under wasmtime (its Python package), each at the reduced size
# tests/util.zig picks for emulated runs; macOS, FreeBSD and
# wasm32-freestanding cross-compiled only (test binaries, the example and
# the C library).
#
# A runner that is missing skips its target with a note; with
# KENNEL_TARGETS_REQUIRE=1 (CI) a missing runner is a failure.
#
# Usage: tests/targets.sh [zig] [target...]   (default: every target)
# KENNEL_TEST_JOBS=N: zig build -jN (make test sets twice the cores).
ZIG=${1:-zig}
[ $# -gt 0 ] && shift
only="$*"
status=0
skipped=""

wanted() {
    [ -z "$only" ] && return 0
    for w in $only; do [ "$w" = "$1" ] && return 0; done
    return 1
}

skip() {
    if [ "${KENNEL_TARGETS_REQUIRE:-0}" = 1 ]; then
        echo "targets: FAIL $1: $2 (KENNEL_TARGETS_REQUIRE=1)"
        status=1
    else
        echo "targets: skip $1: $2"
        skipped="$skipped $1"
    fi
}

# Each target installs what it builds (the C library, the example) under
# a prefix of its own: in zig-out itself, a foreign libkennel.so took the
# native one's place, and LD_PRELOAD of it after `make test` failed.
prefix() {
    echo "zig-out/targets/$1"
}

# build_test TARGET LABEL ARGS...: zig build test for TARGET.
build_test() {
    target=$1
    label=$2
    shift 2
    echo "targets: === $label"
    start=$(date +%s)
    if "$ZIG" build test -Dtarget="$target" --prefix "$(prefix "$target")" --summary line ${KENNEL_TEST_JOBS:+-j$KENNEL_TEST_JOBS} "$@"; then
        echo "targets: ok $label ($(($(date +%s) - start)) s)"
    else
        echo "targets: FAIL $label"
        status=1
    fi
}

# Linux, with musl where libc is linked: static binaries need no sysroot.
for target in aarch64-linux-musl riscv64-linux-musl x86-linux-musl arm-linux-musleabihf; do
    arch=${target%%-*}
    case $arch in x86) qemu=qemu-i386 ;; *) qemu=qemu-$arch ;; esac
    wanted "$target" || continue
    if ! command -v "$qemu" >/dev/null 2>&1; then
        skip "$target" "$qemu is missing (apt-get install qemu-user)"
        continue
    fi
    # Both configurations (without libc, and ReleaseSafe with musl and the
    # pthread exit path) on one 64-bit and one 32-bit CPU; without libc on
    # the others, which saves CI building musl and the suite for each.
    case $arch in
        aarch64 | x86) build_test "$target" "$target (qemu)" -fqemu ;;
        *) build_test "$target" "$target (qemu)" -fqemu -Dtest-config=debug ;;
    esac
    if [ "$arch" = aarch64 ]; then
        # Kernels with 16 KiB (Apple silicon) and 64 KiB pages: qemu-user
        # shows the program that page size.
        # Hardened too: its guards are laid out by the kernel's page size.
        for pagesize in 16384 65536; do
            QEMU_PAGESIZE=$pagesize build_test "$target" "$target (qemu, $pagesize-byte pages)" -fqemu -Dtest-config=debug
            QEMU_PAGESIZE=$pagesize build_test "$target" "$target (qemu, $pagesize-byte pages, hardened)" -fqemu -Dtest-config=secure-debug
        done
    fi
done

if wanted x86_64-windows; then
    if command -v wine >/dev/null 2>&1; then
        # One wineserver for all the test binaries: each binary started its
        # own, and one starting while the last was shutting down lost its
        # connection ("wine client error: recvmsg: Connection reset by
        # peer") and failed the run.
        # (The prefix must exist for the server to start: on a fresh
        # machine wine fills it at the first test binary.)
        if command -v wineserver >/dev/null 2>&1; then
            mkdir -p "${WINEPREFIX:-$HOME/.wine}"
            WINEDEBUG=-all wineserver -p || true
        fi
        WINEDEBUG=-all build_test x86_64-windows "x86_64-windows (wine)" -fwine
        if command -v wineserver >/dev/null 2>&1; then wineserver -k || true; fi
    else
        skip x86_64-windows "wine is missing (apt-get install wine wine64)"
    fi
fi

if wanted wasm32-wasi; then
    python=""
    for candidate in "${KENNEL_WASI_PYTHON:-}" .venv/bin/python python3; do
        [ -n "$candidate" ] || continue
        if "$candidate" -c "import wasmtime" >/dev/null 2>&1; then
            python=$candidate
            break
        fi
    done
    if [ -n "$python" ]; then
        build_test wasm32-wasi "wasm32-wasi (wasmtime)" -Dwasi-python="$python"
    else
        skip wasm32-wasi "no Python with the wasmtime package (.venv/bin/pip install wasmtime)"
    fi
fi

for target in aarch64-macos x86_64-macos x86_64-freebsd wasm32-freestanding; do
    wanted "$target" || continue
    echo "targets: === $target (build only)"
    if "$ZIG" build test-build -Dtarget="$target" --prefix "$(prefix "$target")" --summary line ${KENNEL_TEST_JOBS:+-j$KENNEL_TEST_JOBS}; then
        echo "targets: ok $target (built)"
    else
        echo "targets: FAIL $target"
        status=1
    fi
done

[ -n "$skipped" ] && echo "targets: skipped (runner missing):$skipped"
exit $status
