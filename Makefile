# mstar-c — the two commands of the README, and a few more for developers.
#
#   make demo     install what is missing, build, run the demo (the main job);
#                 DEMO_ARGS="--abort-rate 0.2" passes options to it
#   make check    install what is missing, check formatting (check-format), build with -Werror,
#                 run every test: all but gpu in the normal build, then unit + integration +
#                 hostile again under ASan+UBSan, then each fuzz target, then unit + integration +
#                 hostile once more under TSan (check-tsan); every build of make check turns
#                 warnings into errors
#   make install  build libmstar, the mstar command and the Python package (not the tests), then
#                 install headers, libraries, the command, pkg-config and CMake files and the
#                 package under PREFIX
#   make bench    run every benchmark suite: report in bench-report/ (docs/bench/: the latest)
#   make format   clang-format every C source
#
# Variables: PREFIX (install root, /usr/local), JOBS (parallel compile jobs, nproc), CMAKE_FLAGS
# (extra cmake -D options for the normal build, e.g. -DMSTAR_CUDA=OFF), BUILD (its folder).
JOBS   ?= $(shell nproc)
BUILD  ?= build
SANBUILD ?= build-asan
TSANBUILD ?= build-tsan
PREFIX ?= /usr/local
CMAKE_FLAGS ?=
DEMO_ARGS ?=
WERROR ?=
SOURCES = git ls-files '*.c' '*.h' '*.cu' '*.cuh'

.PHONY: all deps configure build demo check check-format check-main check-asan check-tsan install \
        bench format clean

all: build

deps:
	@./scripts/install-deps.sh

# WERROR=ON|OFF sets -Werror for $(BUILD); left empty, the build keeps what it had, so a make demo
# after a make check does not rebuild everything.
configure: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo $(if $(WERROR),-DMSTAR_WERROR=$(WERROR)) \
	    $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS) -- --no-print-directory

demo: build
	$(BUILD)/mstar demo $(DEMO_ARGS)

# The gates run first: a source that make format would change fails make check before any build.
check-format:
	@clang-format --dry-run -Werror $$($(SOURCES)) || \
	    { echo "make check: the files above are not formatted; run make format"; exit 1; }

# make check builds with -Werror (the sanitizer builds below always do).
check check-main: WERROR = ON

check-main: build
	ctest --test-dir $(BUILD) -LE gpu --output-on-failure -j $(JOBS)

check-asan: deps
	@cmake -S . -B $(SANBUILD) -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER=clang \
	    -DMSTAR_SANITIZE=address,undefined -DMSTAR_FUZZ=ON -DMSTAR_CUDA=OFF -DMSTAR_WERROR=ON \
	    >/dev/null
	@cmake --build $(SANBUILD) -j $(JOBS) -- --no-print-directory
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
	    ctest --test-dir $(SANBUILD) -L 'unit|integration|hostile' -E 'unit.install' --output-on-failure -j $(JOBS)
	ctest --test-dir $(SANBUILD) -L fuzz --output-on-failure

# The threads (mesh, UCX engine and reader, rank groups, allocators) under TSan. The benchmark
# report test runs every suite and is too slow under TSan; the install test builds outside.
check-tsan: deps
	@cmake -S . -B $(TSANBUILD) -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER=clang \
	    -DMSTAR_SANITIZE=thread -DMSTAR_CUDA=OFF -DMSTAR_WERROR=ON >/dev/null
	@cmake --build $(TSANBUILD) -j $(JOBS) -- --no-print-directory
	TSAN_OPTIONS="suppressions=$(CURDIR)/tests/sanitizers/tsan.supp halt_on_error=1" \
	    ctest --test-dir $(TSANBUILD) -L 'unit|integration|hostile' -E 'unit.install|test_bench_report' \
	    --output-on-failure -j $(JOBS)

check: check-format check-main check-asan check-tsan

# Only what is installed: the libraries, the command (it needs the demo model and the benchmark
# library) and the Python package where it is configured (python3-dev found; not with
# -DMSTAR_PYTHON=OFF); headers, pkg-config and CMake files need no build.
# tests/install/fresh_clone.sh (.ci/run) runs it on a fresh clone, with and without the package.
install: configure
	@cmake --build $(BUILD) -j $(JOBS) --target mstar mstar_static mstar_cli \
	    $$(cmake --build $(BUILD) --target help | grep -qw mstar_python && echo mstar_python) \
	    -- --no-print-directory
	cmake --install $(BUILD) --prefix $(PREFIX)

bench: build
	$(BUILD)/mstar bench all

format:
	clang-format -i $$($(SOURCES))

clean:
	rm -rf $(BUILD) $(SANBUILD) $(TSANBUILD)
