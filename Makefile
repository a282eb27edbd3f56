# The README's commands. `make demo` and `make test` work on a fresh Debian 12
# machine: they install what is missing, build, and run.

BUILD ?= build
JOBS ?= 2
BUILD_TYPE ?= RelWithDebInfo
CMAKE_FLAGS ?=

# Debian packages the build and the tests need (clang and its runtimes for
# the libFuzzer targets).
PKGS = cmake g++ make pkg-config libcaf-dev libcpp-httplib-dev libssl-dev \
       libboost-json1.81-dev libboost1.81-dev libhiredis-dev libfmt-dev \
       doctest-dev \
       libsqlite3-dev redis-server zlib1g-dev libbrotli-dev \
       clang-14 libclang-rt-14-dev prometheus libvalijson-dev openssl stunnel4 \
       libtcmalloc-minimal4 libre2-dev libidn2-dev

# -- sanitizer and fuzz builds ------------------------------------------------
ASAN_BUILD ?= build-asan
TSAN_BUILD ?= build-tsan
FUZZ_BUILD ?= build-fuzz
SUPP := $(CURDIR)/tests/sanitizers
# Test binaries the ASan run starts once each, not once per test case (an
# instrumented process takes ~0.8 s to start; the e2e cases start their own
# processes and keep one ctest test each).
ASAN_WHOLE_BINARIES ?= pgw-unit-tests;pgw-contract-tests;pgw-integration-tests
# Tests left out of the ASan run (a ctest -E regex; empty: none).
ASAN_EXCLUDE ?=
# More cmake flags for the ASan build, e.g. -DPGW_UBSAN_ALL=ON to keep
# UBSan's null and alignment checks (CMakeLists.txt says why they are off).
ASAN_CMAKE_FLAGS ?=
ASAN_ENV = ASAN_OPTIONS=halt_on_error=1:detect_leaks=1:check_initialization_order=1:strict_init_order=1 \
           UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:suppressions=$(SUPP)/ubsan.supp \
           LSAN_OPTIONS=suppressions=$(SUPP)/lsan.supp:print_suppressions=0
# atexit_sleep_ms=0: TSan otherwise sleeps 1 s in every exiting process (the
# simulator's prompt-shutdown test measures that).
TSAN_ENV = TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:atexit_sleep_ms=0:suppressions=$(SUPP)/tsan.supp
# ThreadSanitizer cannot map its shadow memory under the kernel's full address
# space randomisation on some kernels: run its programs without it when the
# machine allows (setarch -R), as they are when they start in a test.
NOASLR := $(shell setarch $$(uname -m) -R true >/dev/null 2>&1 && echo setarch $$(uname -m) -R)

FUZZ_TARGETS = fuzz_sse_parser fuzz_retry_after fuzz_config_loader fuzz_chat_decoder fuzz_usage_settlement fuzz_side_decoders fuzz_serve_request fuzz_structured
FUZZ_SMOKE_SECONDS ?= 15
FUZZ_SECONDS ?= 300
FUZZ_FLAGS ?= -timeout=10 -rss_limit_mb=2048 -print_final_stats=1

.PHONY: deps serve-client build check test demo clean test-asan test-tsan fuzz-build fuzz fuzz-smoke

## deps: apt-get install exactly the packages that are missing
deps:
	@missing=""; \
	for p in $(PKGS); do \
	  dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'install ok installed' \
	    || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  sudo=""; [ "$$(id -u)" -eq 0 ] || sudo=sudo; \
	  echo "installing:$$missing"; \
	  $$sudo apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -q --no-install-recommends $$missing; \
	else echo "deps: all $(words $(PKGS)) packages present"; fi
	@$(MAKE) --no-print-directory serve-client

## serve-client: the openai npm package the serve e2e tests drive (pinned by
## tests/e2e/serve_client/package-lock.json; nothing fetched when present)
SERVE_CLIENT = tests/e2e/serve_client
serve-client:
	@if ! command -v npm >/dev/null; then \
	  echo "serve-client: npm not found: the serve e2e tests need Node 20 + npm"; exit 1; fi
	@if [ -f $(SERVE_CLIENT)/node_modules/openai/package.json ] && \
	   node -e 'const l=require("./$(SERVE_CLIENT)/package-lock.json"),p=require("./$(SERVE_CLIENT)/node_modules/openai/package.json");process.exit(l.packages["node_modules/openai"].version===p.version?0:1)'; \
	then echo "serve-client: openai $$(node -p 'require("./$(SERVE_CLIENT)/node_modules/openai/package.json").version') present"; \
	else cd $(SERVE_CLIENT) && npm ci --no-audit --no-fund; fi

## build: configure and compile everything, test suites included (warnings on, -j2)
build: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j$(JOBS)

## check: deps + build + every test suite (ctest), no sanitizers
check: build
	cd $(BUILD) && ctest --output-on-failure --timeout 600

## test: the whole suite in the ASan+UBSan build, the TSan suite and the fuzz
## smoke (CI). `make check` runs the suite on the optimised build.
test: deps
	@$(MAKE) --no-print-directory test-asan
	@$(MAKE) --no-print-directory test-tsan
	@$(MAKE) --no-print-directory fuzz-smoke

## test-asan: the whole suite built with ASan+UBSan (g++), in $(ASAN_BUILD)
test-asan: deps
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPGW_SANITIZE=ON \
	  -DPGW_WHOLE_BINARY_TESTS='$(ASAN_WHOLE_BINARIES)' $(ASAN_CMAKE_FLAGS)
	$(ASAN_ENV) cmake --build $(ASAN_BUILD) -j$(JOBS)
	cd $(ASAN_BUILD) && $(ASAN_ENV) ctest --output-on-failure --timeout 900 \
	  $(if $(ASAN_EXCLUDE),-E '$(ASAN_EXCLUDE)')

## test-tsan: the tests of our own threaded code built with TSan, in $(TSAN_BUILD)
test-tsan: deps
	cmake -S . -B $(TSAN_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPGW_TSAN=ON
	$(TSAN_ENV) $(NOASLR) cmake --build $(TSAN_BUILD) -j$(JOBS) --target pgw-tsan-tests
	cd $(TSAN_BUILD) && $(TSAN_ENV) $(NOASLR) ctest --output-on-failure --timeout 900

## fuzz-build: the libFuzzer targets (clang), in $(FUZZ_BUILD)
fuzz-build: deps
	CXX=clang++-14 cmake -S . -B $(FUZZ_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPGW_FUZZ=ON
	cmake --build $(FUZZ_BUILD) -j$(JOBS)

# Runs every target for $(1) seconds, $(JOBS) at a time (each fuzzer is one
# thread), on a scratch corpus seeded from tests/fuzz/corpus/<target> (which
# it never writes); a crash, leak or timeout leaves its input in
# $(FUZZ_BUILD)/artifacts/ and fails.
define run_fuzzers
	@$(MAKE) --no-print-directory -j$(JOBS) FUZZ_RUN_SECONDS=$(1) \
	  $(addprefix fuzz-run-,$(FUZZ_TARGETS))
endef

# One target's run, for FUZZ_RUN_SECONDS (without it libFuzzer's
# -max_total_time= would mean no limit); it prints one line when it ends
# (the runs go side by side), or the tail of its log when it fails.
FUZZ_RUN_SECONDS ?= $(FUZZ_SMOKE_SECONDS)
fuzz-run-%:
	@mkdir -p $(FUZZ_BUILD)/corpus/$* $(FUZZ_BUILD)/artifacts; \
	dict=""; [ -f tests/fuzz/$*.dict ] && dict="-dict=tests/fuzz/$*.dict"; \
	$(ASAN_ENV) $(FUZZ_BUILD)/tests/fuzz/$* $(FUZZ_FLAGS) $$dict \
	  -max_total_time=$(FUZZ_RUN_SECONDS) -artifact_prefix=$(FUZZ_BUILD)/artifacts/$*- \
	  $(FUZZ_BUILD)/corpus/$* tests/fuzz/corpus/$* 2>$(FUZZ_BUILD)/$*.log \
	  || { echo "== $*: FAILED, the end of $(FUZZ_BUILD)/$*.log:"; \
	       tail -n 60 $(FUZZ_BUILD)/$*.log; exit 1; }; \
	echo "== $*: $(FUZZ_RUN_SECONDS) s: $$(grep -E '^(Done|stat::number_of_executed_units|stat::peak_rss_mb)|INFO: seed corpus' \
	  $(FUZZ_BUILD)/$*.log | tr -s ' \n' ' ')"

## fuzz-smoke: each fuzz target for FUZZ_SMOKE_SECONDS (15) seconds
fuzz-smoke: fuzz-build
	$(call run_fuzzers,$(FUZZ_SMOKE_SECONDS))

## fuzz: each fuzz target for FUZZ_SECONDS (300) seconds
fuzz: fuzz-build
	$(call run_fuzzers,$(FUZZ_SECONDS))

## demo: deps + only what the demo needs (pgw-actor) + the embedded default run
demo: deps
	@echo "make demo: the first build compiles pgw-actor and its libraries (several minutes on 2 cores); later runs start at once."
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j$(JOBS) --target pgw-actor
	$(BUILD)/pgw-actor demo

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(TSAN_BUILD) $(FUZZ_BUILD)
