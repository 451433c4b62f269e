#!/bin/sh
# Real programs under LD_PRELOAD of each library given, each compared with
# the same run without kennel: same output, exit code 0, and kennel's exit
# line (KENNEL_SHOW_STATS=1) must show it mapped memory, so a test cannot
# pass by silently falling back to glibc. For the hardened library this is
# the test for false alarms: a real program that uses the heap correctly
# must not be stopped by a canary, zero check or guard. Also checks that
# each library's code never calls __tls_get_addr (the fast path must use
# initial-exec TLS).
#
# usage: run.sh /path/to/libkennel.so [/path/to/libkennel-secure.so ...]
# The libraries run one after another (the redis ports are fixed).
# A program that is not installed is skipped with a note, unless
# KENNEL_PRELOAD_REQUIRE=1 (CI installs them all and sets it).
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
require=${KENNEL_PRELOAD_REQUIRE:-0}
failures=0
ran=0

fail() {
    echo "FAIL  $*"
    failures=$((failures + 1))
}

missing() {
    if [ "$require" = 1 ]; then fail "$1 is not installed"; else echo "skip  $1 is not installed"; fi
}

# served <stderr file>: some kennel exit line reports a non-zero peak.
served() {
    grep -Eq 'kennel: [0-9]+ bytes mapped, peak [1-9][0-9]* bytes' "$1"
}

# compare <name> <command...>: stdout and exit code must match, with and
# without kennel; kennel must have served the allocations.
compare() {
    name=$1
    shift
    (cd "$work" && "$@") >"$work/$name.plain" 2>"$work/$name.plain.err"
    plain=$?
    (cd "$work" && LD_PRELOAD="$lib" KENNEL_SHOW_STATS=1 "$@") >"$work/$name.kennel" 2>"$work/$name.kennel.err"
    kennel=$?
    ran=$((ran + 1))
    if [ $plain -ne 0 ] || [ $kennel -ne 0 ]; then
        fail "$name: exit codes $plain without kennel, $kennel with kennel"
        tail -5 "$work/$name.kennel.err"
    elif ! cmp -s "$work/$name.plain" "$work/$name.kennel"; then
        fail "$name: output differs with kennel"
        diff "$work/$name.plain" "$work/$name.kennel" | head -10
    elif ! served "$work/$name.kennel.err"; then
        fail "$name: kennel did not serve the allocations"
    else
        echo "ok    $name ($(grep -Eo 'peak [0-9]+' "$work/$name.kennel.err" | sort -k2 -n | tail -1 | awk '{printf "%.1f MiB peak", $2 / 1048576}'))"
    fi
}

# check_library: every program below under LD_PRELOAD=$lib. (The body is
# not indented so that the here-document keeps its terminator in column 0.)
check_library() {
# The fast path's thread-local access must not call __tls_get_addr.
if command -v objdump >/dev/null; then
    calls=$(objdump -d "$lib" | grep -c 'call.*__tls_get_addr')
    if [ "$calls" -ne 0 ]; then fail "$libname calls __tls_get_addr $calls times"; else echo "ok    no __tls_get_addr in $libname"; fi
    if ! readelf -dW "$lib" | grep -q STATIC_TLS; then fail "$libname lacks the STATIC_TLS flag"; fi
else
    missing objdump
fi

if command -v python3 >/dev/null; then compare python3 python3 "$here/alloc_heavy.py"; else missing python3; fi

if command -v gcc >/dev/null; then
    compare gcc gcc -O2 -I"$root/include" -c "$root/tests/c/conformance.c" -o /dev/stdout
else
    missing gcc
fi

if command -v g++ >/dev/null; then
    if g++ -O2 -std=c++17 "$here/cxx.cpp" -o "$work/cxx" 2>"$work/cxx.build"; then
        compare c++ "$work/cxx"
    else
        fail "c++: cannot build the test program"
        cat "$work/cxx.build"
    fi
else
    missing g++
fi

if command -v lua5.4 >/dev/null; then compare lua5.4 lua5.4 "$here/tables.lua"; else missing lua5.4; fi

# Perl's hashes and strings: many small blocks grown by realloc.
if command -v perl >/dev/null; then
    compare perl perl -e 'my %h; $h{"k$_"} = "v" x ($_ % 40) for 1 .. 200000; my $t = 0; $t += length $h{$_} for keys %h; my @k = sort keys %h; print "$t $#k $k[777]\n"'
else
    missing perl
fi

if command -v sqlite3 >/dev/null; then
    cat >"$work/sql" <<'SQL'
CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT, value REAL);
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 200000)
INSERT INTO t SELECT i, 'name' || i, i * 0.5 FROM n;
CREATE INDEX t_name ON t(name);
SELECT count(*), sum(value), max(length(name)) FROM t;
SELECT name FROM t WHERE name LIKE 'name1999%' ORDER BY id LIMIT 3;
SELECT group_concat(id) FROM (SELECT id FROM t ORDER BY value DESC LIMIT 5);
SQL
    rm -f "$work/db1" "$work/db2"
    compare sqlite3-build sh -c "rm -f db1; sqlite3 db1 < sql"
    compare sqlite3-query sh -c "sqlite3 db1 'SELECT count(*), avg(value) FROM t WHERE id % 3 = 0;'"
else
    missing sqlite3
fi

if command -v redis-server >/dev/null && command -v redis-benchmark >/dev/null && command -v redis-cli >/dev/null; then
    # One server without kennel and one with it, each answering a bounded
    # redis-benchmark run and then the same scripted commands.
    for variant in plain kennel; do
        port=$((6390 + ran % 50 + $([ $variant = kennel ] && echo 50 || echo 0)))
        if [ $variant = kennel ]; then preload=$lib; else preload=; fi
        LD_PRELOAD=$preload KENNEL_SHOW_STATS=1 redis-server --port "$port" --save '' --appendonly no --daemonize no \
            >"$work/redis.$variant.log" 2>"$work/redis.$variant.err" &
        server=$!
        i=0
        while ! redis-cli -p "$port" ping >/dev/null 2>&1 && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
        redis-benchmark -p "$port" -n 50000 -c 20 -q -t set,get,lpush,lpop,incr,hset >"$work/redis.$variant.bench" 2>&1
        echo "bench exit $?" >"$work/redis.$variant.out"
        for k in $(seq 1 200); do redis-cli -p "$port" set "key$k" "value$k" >/dev/null; done
        redis-cli -p "$port" mget key1 key100 key200 >>"$work/redis.$variant.out"
        redis-cli -p "$port" rpush list a b c d >>"$work/redis.$variant.out"
        redis-cli -p "$port" lrange list 0 -1 >>"$work/redis.$variant.out"
        redis-cli -p "$port" shutdown nosave >/dev/null 2>&1
        wait $server
        echo "server exit $?" >>"$work/redis.$variant.out"
    done
    ran=$((ran + 1))
    if ! cmp -s "$work/redis.plain.out" "$work/redis.kennel.out"; then
        fail "redis: results differ with kennel"
        diff "$work/redis.plain.out" "$work/redis.kennel.out" | head -10
    elif ! grep -q "bench exit 0" "$work/redis.kennel.out" || ! grep -q "server exit 0" "$work/redis.kennel.out"; then
        fail "redis: benchmark or server failed"
        cat "$work/redis.kennel.out"
    elif ! served "$work/redis.kennel.err"; then
        fail "redis: kennel did not serve the allocations"
        cat "$work/redis.kennel.err"
    else
        echo "ok    redis-server + redis-benchmark ($(grep -Eo 'peak [0-9]+' "$work/redis.kennel.err" | awk '{printf "%.1f MiB peak", $2 / 1048576}'))"
    fi
else
    missing redis-server
fi

}

for arg in "$@"; do
    lib=$(cd "$(dirname "$arg")" && pwd)/$(basename "$arg")
    libname=$(basename "$arg")
    echo "--    $libname"
    check_library
done

if [ $failures -ne 0 ]; then
    echo "preload: $failures failure(s)"
    exit 1
fi
echo "preload: $ran program runs matched with kennel"
