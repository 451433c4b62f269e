#!/usr/bin/env python3
"""Runs a wasm32-wasi program (a test binary) with the wasmtime Python
package: `python3 tests/wasi_run.py program.wasm [args...]`. The program
sees its arguments, the environment and the current directory; its exit
code becomes ours (a trap exits with 134). Used by `zig build test
-Dtarget=wasm32-wasi -Dwasi-python=...` (tests/targets.sh)."""
import os
import sys

from wasmtime import Engine, ExitTrap, Linker, Module, Store, Trap, WasiConfig


def main():
    if len(sys.argv) < 2:
        print("usage: wasi_run.py program.wasm [args...]", file=sys.stderr)
        return 2
    path = sys.argv[1]
    engine = Engine()
    linker = Linker(engine)
    linker.define_wasi()
    module = Module.from_file(engine, path)
    wasi = WasiConfig()
    wasi.argv = [os.path.basename(path)] + sys.argv[2:]
    wasi.inherit_env()
    wasi.inherit_stdout()
    wasi.inherit_stderr()
    wasi.preopen_dir(".", ".")
    store = Store(engine)
    store.set_wasi(wasi)
    instance = linker.instantiate(store, module)
    start = instance.exports(store)["_start"]
    try:
        start(store)
    except ExitTrap as e:
        return e.code
    except Trap as e:
        print(f"wasi_run.py: {path} trapped: {e}", file=sys.stderr)
        return 134
    return 0


if __name__ == "__main__":
    sys.exit(main())
