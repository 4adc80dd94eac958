# Vigil — build, demo and test entry points (SPEC §7).
#
#   make demo    install missing Debian packages, build what the demo runs (rulecheck, the
#                torch trainer), run rulecheck on the bundled example and the trainer
#   make test    install, build everything, run every test; then the same under ASan+UBSan
#   make bench   build and run the benchmarks (not part of `make test`)
#
# Meant to run as root on a fresh Debian 12 machine; packages are only
# installed when dpkg says one is missing, so reruns stay fast.

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := demo

JOBS       ?= 2
# A literal comma, for use inside $(call ...) arguments.
, := ,
BUILD      ?= build
ASAN_BUILD ?= build-asan
BUILD_TYPE ?= RelWithDebInfo
# Debug keeps the sanitizer tree's compile time down; the checks don't need -O2.
ASAN_BUILD_TYPE ?= Debug

PACKAGES := build-essential cmake ninja-build ccache pkg-config tao-pegtl-dev libeigen3-dev \
            libfmt-dev libgtest-dev libgmock-dev librapidcheck-dev libre2-dev libcli11-dev \
            nlohmann-json3-dev libbenchmark-dev clang libclang-rt-14-dev \
            libprotobuf-dev protobuf-compiler libtorch-dev libgloo-dev libopenblas0-openmp \
            pybind11-dev python3-dev python3-torch python3-numpy python3-pytest \
            chromium libjs-dygraphs libsimdjson-dev libfast-float-dev

RULECHECK := $(BUILD)/tools/rulecheck/rulecheck
TORCH_TRAINER := $(BUILD)/examples/torch_trainer/torch_trainer
DEMO_RULES := examples/demo.rules
DEMO_TRACE := examples/traces/demo.jsonl

# configure(DIR, BUILD_TYPE, EXTRA_ARGS): Ninja tree with g++ and ccache when present.
# The Python package is built for Debian's /usr/bin/python3 (the one with python3-torch).
# The compiler is pinned only on the first configure (changing it later would wipe the cache).
define configure
	@launcher=""; if command -v ccache >/dev/null; then launcher="-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"; fi; \
	compiler=""; if [ ! -f $(1)/CMakeCache.txt ]; then compiler="-DCMAKE_CXX_COMPILER=g++"; fi; \
	cmake -S . -B $(1) -G Ninja -DCMAKE_BUILD_TYPE=$(2) -DPython_EXECUTABLE=/usr/bin/python3 $$launcher $$compiler $(3) >/dev/null
endef

.PHONY: all deps build build-demo demo test test-main test-asan bench clean

all: build

deps:
	@missing=""; \
	for p in $(PACKAGES); do \
	  dpkg-query -W -f='$${Status}' "$$p" 2>/dev/null | grep -q 'install ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "==> installing:$$missing"; \
	  sudo=""; if [ "$$(id -u)" -ne 0 ]; then sudo=sudo; fi; \
	  $$sudo apt-get update; \
	  DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y --no-install-recommends $$missing; \
	fi

build: deps
	@echo "==> configuring $(BUILD) ($(BUILD_TYPE))"
	$(call configure,$(BUILD),$(BUILD_TYPE),-DVIGIL_REQUIRE_TORCH=ON)
	@echo "==> building $(BUILD)"
	cmake --build $(BUILD) -j $(JOBS)

# Only what the demo runs: rulecheck, and the example trainer when libtorch was
# found (configure then adds its folder). Tests and benchmarks wait for `make test`.
build-demo: deps
	@echo "==> configuring $(BUILD) ($(BUILD_TYPE))"
	$(call configure,$(BUILD),$(BUILD_TYPE),-DVIGIL_REQUIRE_TORCH=ON)
	@echo "==> building the demo's targets in $(BUILD)"
	@targets=rulecheck; if [ -d $(BUILD)/examples/torch_trainer ]; then targets="$$targets torch_trainer"; fi; \
	if [ -d $(BUILD)/python ]; then targets="$$targets vigil_python"; fi; \
	cmake --build $(BUILD) -j $(JOBS) --target $$targets

# rulecheck exits 1 when rules fired: that is the point of the demo, not a failure.
demo: build-demo
	@echo "==> $(RULECHECK) run $(DEMO_RULES) --trace $(DEMO_TRACE)"
	@status=0; $(RULECHECK) run $(DEMO_RULES) --trace $(DEMO_TRACE) || status=$$?; \
	case $$status in \
	  0) echo "demo: PASS (no rule fired)";; \
	  1) echo "demo: PASS (rules fired, see above)";; \
	  *) echo "demo: FAIL (rulecheck exit status $$status)"; exit 1;; \
	esac
	@if [ -x $(TORCH_TRAINER) ]; then \
	  echo "==> $(TORCH_TRAINER) (the same faulty run without and with examples/torch_trainer/trainer.rules)"; \
	  $(TORCH_TRAINER); \
	else echo "demo: libtorch not found, skipping the torch trainer"; fi
	@if [ -f $(BUILD)/python/vigil/__init__.py ]; then \
	  echo "==> examples/python/faulty_run.py (the same faulty run in Python, vigil.torch.Monitor)"; \
	  PYTHONPATH=$(BUILD)/python /usr/bin/python3 examples/python/faulty_run.py; \
	else echo "demo: the Python package was not built, skipping the Python demo"; fi

test-main: build
	@echo "==> ctest $(BUILD)"
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

test-asan: deps
	@echo "==> configuring $(ASAN_BUILD) (address,undefined)"
	$(call configure,$(ASAN_BUILD),$(ASAN_BUILD_TYPE),-DVIGIL_SANITIZE=address$(,)undefined -DVIGIL_BUILD_BENCH=OFF -DVIGIL_WITH_TORCH=OFF)
	@echo "==> building $(ASAN_BUILD)"
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	@echo "==> ctest $(ASAN_BUILD)"
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --test-dir $(ASAN_BUILD) --output-on-failure -j $(JOBS)

# Runs both suites even when the first fails, then gives one verdict.
test:
	@main=0; asan=0; \
	$(MAKE) --no-print-directory test-main || main=$$?; \
	$(MAKE) --no-print-directory test-asan || asan=$$?; \
	echo; \
	[ $$main -eq 0 ] && echo "tests ($(BUILD)): PASS" || echo "tests ($(BUILD)): FAIL"; \
	[ $$asan -eq 0 ] && echo "tests ($(ASAN_BUILD), asan+ubsan): PASS" || echo "tests ($(ASAN_BUILD), asan+ubsan): FAIL"; \
	if [ $$main -ne 0 ] || [ $$asan -ne 0 ]; then echo "make test: FAIL"; exit 1; fi; \
	echo "make test: PASS"

bench: deps
	$(call configure,$(BUILD),$(BUILD_TYPE),-DVIGIL_BUILD_BENCH=ON)
	cmake --build $(BUILD) -j $(JOBS) --target run_benchmarks

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)

