# lazytpu front door.
#   make run    bootstrap Debian packages, build, train the example, print metrics
#   make test   bootstrap, build, run every test (C, ASan, Python)
#   make bench  build and run the benchmarks
PY      ?= /usr/bin/python3
BUILD   ?= build
ASAN    ?= build-asan
JOBS    ?= 2

.PHONY: all bootstrap build build-asan test test-c test-asan run bench clean

all: build

bootstrap:
	@bash scripts/bootstrap.sh

build: bootstrap
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	@cmake --build $(BUILD) -j$(JOBS)

build-asan: bootstrap
	@cmake -S . -B $(ASAN) -DCMAKE_BUILD_TYPE=Debug -DLAZYTPU_ASAN=ON >/dev/null
	@cmake --build $(ASAN) -j$(JOBS)

test: build build-asan
	cd $(BUILD) && ctest --output-on-failure
	cd $(ASAN) && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure

run: build
	PYTHONPATH=python $(PY) examples/fashion_mnist.py

bench: build
	$(BUILD)/bench_core
	$(BUILD)/bench_allreduce
	$(PY) bench/bench_elementwise.py --lib $(BUILD)/liblazytpu.so
	PYTHONPATH=python $(PY) bench/train_step.py
	PYTHONPATH=python LAZYTPU_BIN_DIR=$(BUILD) $(PY) bench/bench_multicore.py

clean:
	rm -rf $(BUILD) $(ASAN)
