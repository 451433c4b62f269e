# kennel: every target goes through `zig build`. When no Zig 0.17.1 is on
# PATH, the pinned compiler is installed from PyPI into a project-local
# virtual environment (.venv), so a fresh machine needs only python3 and make.
# The same environment holds matplotlib for the benchmark chart.

ZIG_VERSION := 0.17.1
VENV        := .venv
PYTHON      := $(VENV)/bin/python
VENV_ZIG    := $(VENV)/bin/zig
SYSTEM_ZIG  := $(shell command -v zig 2>/dev/null)
ZIG         := $(if $(and $(SYSTEM_ZIG),$(filter $(ZIG_VERSION),$(shell zig version 2>/dev/null))),zig,$(VENV_ZIG))

.PHONY: all build test test-targets wasmtime bench bench-instr bench-secure fmt fmt-check clean zig

all: build

$(PYTHON):
	python3 -m venv $(VENV)

# The venv's zig is a link to the binary shipped inside the ziglang wheel.
$(VENV_ZIG): | $(PYTHON)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check ziglang==$(ZIG_VERSION)
	ln -sf "$$($(PYTHON) -c 'import ziglang, os; print(os.path.join(os.path.dirname(ziglang.__file__), "zig"))')" $(VENV_ZIG)
	@test "$$($(VENV_ZIG) version)" = "$(ZIG_VERSION)" || { echo "expected zig $(ZIG_VERSION)"; exit 1; }

zig: $(if $(filter zig,$(ZIG)),,$(VENV_ZIG))

$(VENV)/.matplotlib: | $(PYTHON)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check matplotlib
	touch $@

build: zig
	$(ZIG) build -Doptimize=ReleaseFast

# The native suite, then the other targets' suites through their runners
# (qemu-user, wine, wasmtime; each skipped with a note when missing) and
# the cross-compiled-only targets: tests/targets.sh.
# Twice as many build steps at once as cores: many test binaries spend
# much of their run waiting (threads that sleep, children, programs under
# LD_PRELOAD), and with one step per core a compiler then ran alone.
TEST_JOBS ?= $(shell echo $$(( $$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1) * 2 )))
test: zig
	$(ZIG) build test --summary all -j$(TEST_JOBS)
	KENNEL_TEST_JOBS=$(TEST_JOBS) sh tests/targets.sh $(ZIG)

# The other targets only; TARGETS="aarch64-linux-musl x86_64-windows" for some.
test-targets: zig
	KENNEL_TEST_JOBS=$(TEST_JOBS) sh tests/targets.sh $(ZIG) $(TARGETS)

# The WASI runner of the wasm32-wasi suite: the wasmtime package, in .venv.
wasmtime: $(VENV)/.wasmtime

$(VENV)/.wasmtime: | $(PYTHON)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check wasmtime
	touch $@

# QUICK=1 for a short first look. Peers that are not installed are skipped
# with a note; their runtime libraries are enough (no -dev packages):
#   apt-get install libmimalloc2.0 libjemalloc2 libtcmalloc-minimal4
bench: zig $(VENV)/.matplotlib
	$(PYTHON) bench/run.py --zig $(ZIG) $(if $(QUICK),--quick)

bench-instr: zig
	$(PYTHON) bench/run.py --zig $(ZIG) --instr

# What the hardened build (-Dsecure) and each of its features cost.
bench-secure: zig $(VENV)/.matplotlib
	$(PYTHON) bench/run.py --zig $(ZIG) --secure $(if $(QUICK),--quick)

fmt: zig
	$(ZIG) fmt build.zig build.zig.zon src tests bench examples

fmt-check: zig
	$(ZIG) fmt --check build.zig build.zig.zon src tests bench examples

clean:
	rm -rf .zig-cache zig-out
