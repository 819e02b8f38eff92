# mstar-c — the two commands of the README, and a few more for developers.
#
#   make demo     install what is missing, build, run the demo (the main job);
#                 DEMO_ARGS="--abort-rate 0.2" passes options to it
#   make check    install what is missing, build, run every test: all but gpu in the normal
#                 build, then unit + integration + hostile again under ASan+UBSan, then each
#                 fuzz target, then unit + integration + hostile once more under TSan (check-tsan)
#   make install  install headers, libraries, pkg-config and CMake files (PREFIX=/usr/local)
#   make bench    run every benchmark suite: report in bench-report/ (docs/bench/: the latest)
#   make format   clang-format every C source
JOBS   ?= $(shell nproc)
BUILD  ?= build
SANBUILD ?= build-asan
TSANBUILD ?= build-tsan
PREFIX ?= /usr/local
CMAKE_FLAGS ?=
DEMO_ARGS ?=

.PHONY: all deps build demo check check-main check-asan check-tsan install bench format clean

all: build

deps:
	@./scripts/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS) -- --no-print-directory

demo: build
	$(BUILD)/mstar demo $(DEMO_ARGS)

check-main: build
	ctest --test-dir $(BUILD) -LE gpu --output-on-failure -j $(JOBS)

check-asan: deps
	@cmake -S . -B $(SANBUILD) -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER=clang \
	    -DMSTAR_SANITIZE=address,undefined -DMSTAR_FUZZ=ON -DMSTAR_CUDA=OFF >/dev/null
	@cmake --build $(SANBUILD) -j $(JOBS) -- --no-print-directory
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
	    ctest --test-dir $(SANBUILD) -L 'unit|integration|hostile' -E 'unit.install' --output-on-failure -j $(JOBS)
	ctest --test-dir $(SANBUILD) -L fuzz --output-on-failure

# The threads (mesh, UCX engine and reader, rank groups, allocators) under TSan. The benchmark
# report test runs every suite and is too slow under TSan; the install test builds outside.
check-tsan: deps
	@cmake -S . -B $(TSANBUILD) -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER=clang \
	    -DMSTAR_SANITIZE=thread -DMSTAR_CUDA=OFF >/dev/null
	@cmake --build $(TSANBUILD) -j $(JOBS) -- --no-print-directory
	TSAN_OPTIONS="suppressions=$(CURDIR)/tests/sanitizers/tsan.supp halt_on_error=1" \
	    ctest --test-dir $(TSANBUILD) -L 'unit|integration|hostile' -E 'unit.install|test_bench_report' \
	    --output-on-failure -j $(JOBS)

check: check-main check-asan check-tsan

install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

bench: build
	$(BUILD)/mstar bench all

format:
	clang-format -i $$(git ls-files '*.c' '*.h' '*.cu')

clean:
	rm -rf $(BUILD) $(SANBUILD) $(TSANBUILD)
