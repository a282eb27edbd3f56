# The README's commands. `make demo` and `make test` work on a fresh Debian 12
# machine: they install what is missing, build, and run.

BUILD ?= build
JOBS ?= 2
BUILD_TYPE ?= RelWithDebInfo
CMAKE_FLAGS ?=

# Debian packages the build and the tests need.
PKGS = cmake g++ make pkg-config libcaf-dev libcpp-httplib-dev libssl-dev \
       libboost-json1.81-dev libhiredis-dev libfmt-dev doctest-dev \
       libsqlite3-dev redis-server zlib1g-dev libbrotli-dev

.PHONY: deps build test demo clean

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

## build: configure and compile (warnings on, -j2)
build: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j$(JOBS)

## test: deps + build + every test suite (ctest)
test: build
	cd $(BUILD) && ctest --output-on-failure --timeout 600

## demo: deps + build + the embedded default run
demo: build
	$(BUILD)/pgw-actor demo

clean:
	rm -rf $(BUILD)
