# kennel: every target goes through `zig build`. When no Zig 0.17.1 is on PATH,
# the pinned compiler is installed from PyPI into a project-local virtual
# environment (.venv), so a fresh machine needs only python3 and make.

ZIG_VERSION := 0.17.1
VENV        := .venv
VENV_ZIG    := $(VENV)/bin/zig
SYSTEM_ZIG  := $(shell command -v zig 2>/dev/null)
ZIG         := $(if $(and $(SYSTEM_ZIG),$(filter $(ZIG_VERSION),$(shell zig version 2>/dev/null))),zig,$(VENV_ZIG))

.PHONY: all build test bench fmt fmt-check clean zig

all: build

# The venv's zig is a link to the binary shipped inside the ziglang wheel.
$(VENV_ZIG):
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check ziglang==$(ZIG_VERSION)
	ln -sf "$$($(VENV)/bin/python -c 'import ziglang, os; print(os.path.join(os.path.dirname(ziglang.__file__), "zig"))')" $(VENV_ZIG)
	@test "$$($(VENV_ZIG) version)" = "$(ZIG_VERSION)" || { echo "expected zig $(ZIG_VERSION)"; exit 1; }

zig: $(if $(filter zig,$(ZIG)),,$(VENV_ZIG))

build: zig
	$(ZIG) build -Doptimize=ReleaseFast

test: zig
	$(ZIG) build test --summary all

bench: zig
	$(ZIG) build demo -Doptimize=ReleaseFast

fmt: zig
	$(ZIG) fmt build.zig build.zig.zon src tests bench

fmt-check: zig
	$(ZIG) fmt --check build.zig build.zig.zon src tests bench

clean:
	rm -rf .zig-cache zig-out
