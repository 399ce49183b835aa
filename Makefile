# lazytpu front door.
#   make run    bootstrap (Debian packages, .venv with torch 2.13), build, train
#               the example on 8 simulated cores, print the metrics report
#   make test   bootstrap, build, run every test (C, ASan, Python vs eager PyTorch)
#   make bench  build and run the benchmarks
#   make opinfo the whole OpInfo sweep (PyTorch's op_db vs eager, one worker
#               process per op at a time); prints ops passed / via fallback /
#               failed (OPINFO_ARGS="--ops sort,topk" to narrow it)
#   make examples  build and run the Lightning (Trainer, Fabric) and Keras examples
#               (Fashion-MNIST; 1 and 8 cores, accelerator="lazytpu" and Lightning's
#               own accelerator="tpu" in torch_xla compatibility mode, and the same
#               framework on eager CPU)
#   make fuzz-c libFuzzer (clang, ASan+UBSan) on the C API for FUZZ_SECONDS
#               (default 600); new crashes land in $(FUZZ)/artifacts/
#   make xla-suite  pytorch/xla's own tests (v2.9, the device-generic files) unchanged
#               under python -m lazytpu, per-file pass/fail/error/skip and a total
#               against the expected failures (scripts/xla_suite_expected.txt);
#               fetches nothing: LAZYTPU_PYTORCH_XLA_TESTS=<xla checkout>/test
#               (XLA_SUITE_ARGS="-k test_mp" to narrow it)
#   make fuzz   the differential property tests (device vs eager) long:
#               FUZZ_EXAMPLES (default 2000) examples per op-table entry,
#               random seeds; counts in $(FUZZ)/prop-stats.json
VENV    := .venv
PY      := $(CURDIR)/$(VENV)/bin/python
BUILD   ?= build
ASAN    ?= build-asan
JOBS    ?= 2
FUZZ    ?= build-fuzz
FUZZ_SECONDS ?= 600
FUZZ_CC ?= clang
FUZZ_EXAMPLES ?= 2000

.PHONY: all bootstrap build build-asan install test test-c test-asan run bench opinfo examples fuzz-c fuzz xla-suite clean

all: build

bootstrap:
	@bash scripts/bootstrap.sh

build: bootstrap
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLAZYTPU_TORCH=ON -DLT_PYTHON=$(PY) >/dev/null
	@cmake --build $(BUILD) -j$(JOBS)
	@$(MAKE) --no-print-directory install

# lazytpu installed into .venv in editable mode (once): PyTorch's backend
# autoloading finds it, and lazytpu-run is on the venv's PATH.
install: $(VENV)/.lazytpu-installed
$(VENV)/.lazytpu-installed: pyproject.toml setup.py
	@echo "installing lazytpu into $(VENV) (editable)"
	@LAZYTPU_BUILD_DIR=$(BUILD) $(PY) -m pip install -q --no-build-isolation --no-deps -e . \
	  2>&1 | grep -v "is ignored: it is neither" || true
	@$(PY) -c "import importlib.metadata as m; m.version('lazytpu')" && touch $@

build-asan: bootstrap
	@cmake -S . -B $(ASAN) -DCMAKE_BUILD_TYPE=Debug -DLAZYTPU_ASAN=ON -DLAZYTPU_TORCH=OFF >/dev/null
	@cmake --build $(ASAN) -j$(JOBS)

test: build build-asan
	cd $(BUILD) && ctest --output-on-failure
	cd $(ASAN) && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure

run: build
	$(PY) examples/fashion_mnist.py

examples: build
	$(PY) examples/lightning_fashion_mnist.py --accelerator cpu --devices 1
	$(PY) examples/lightning_fashion_mnist.py --devices 1
	$(PY) examples/lightning_fashion_mnist.py --devices 8
	$(PY) -m lazytpu examples/lightning_fashion_mnist.py --accelerator tpu --devices 1
	$(VENV)/bin/lazytpu-run python examples/lightning_fashion_mnist.py --accelerator tpu --devices 8
	$(PY) examples/fabric_fashion_mnist.py --accelerator cpu --devices 1
	$(PY) examples/fabric_fashion_mnist.py --devices 1
	$(PY) examples/fabric_fashion_mnist.py --devices 8
	$(PY) -m lazytpu examples/fabric_fashion_mnist.py --accelerator tpu --devices 1
	$(VENV)/bin/lazytpu-run python examples/fabric_fashion_mnist.py --accelerator tpu --devices 8
	$(PY) examples/keras_fashion_mnist.py --device cpu
	$(PY) examples/keras_fashion_mnist.py --cores 1
	$(PY) examples/keras_fashion_mnist.py --cores 8

xla-suite: build
	@test -n "$(LAZYTPU_PYTORCH_XLA_TESTS)" || { echo "xla-suite: set LAZYTPU_PYTORCH_XLA_TESTS to the test/ directory of a pytorch/xla v2.9 checkout (nothing is fetched)"; exit 2; }
	LAZYTPU_BIN_DIR=$(CURDIR)/$(BUILD) $(PY) scripts/xla_suite.py $(XLA_SUITE_ARGS)

opinfo: build
	$(PY) tests/opinfo/sweep.py --jobs $(JOBS) --strict $(OPINFO_ARGS)

bench: build
	$(BUILD)/bench_core
	$(BUILD)/bench_allreduce
	$(PY) bench/bench_elementwise.py --lib $(BUILD)/liblazytpu.so
	LAZYTPU_BIN_DIR=$(BUILD) $(PY) bench/models.py

# Working corpus in $(FUZZ)/corpus (kept between runs), seeded with the
# committed regression inputs tests/fuzz/corpus/ (read only). One job on
# purpose: the machine is shared.
fuzz-c: bootstrap
	@cmake -S . -B $(FUZZ) -DCMAKE_C_COMPILER=$(FUZZ_CC) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	    -DLAZYTPU_FUZZ=ON -DLAZYTPU_TORCH=OFF >/dev/null
	@cmake --build $(FUZZ) -j$(JOBS) --target fuzz_trace
	@mkdir -p $(FUZZ)/corpus $(FUZZ)/artifacts
	$(FUZZ)/fuzz_trace -max_total_time=$(FUZZ_SECONDS) -timeout=20 -rss_limit_mb=3072 \
	    -max_len=2048 -print_final_stats=1 -artifact_prefix=$(FUZZ)/artifacts/ \
	    $(FUZZ)/corpus tests/fuzz/corpus

# hypothesis's failing examples are kept in $(FUZZ)/hypothesis (replayed
# first next time); the last case before a crash is the last line of
# $(FUZZ)/prop-cases.log. Every op-table entry runs even if others fail.
fuzz: build
	@mkdir -p $(FUZZ)
	@rm -f $(FUZZ)/prop-cases.log
	HYPOTHESIS_PROFILE=lazytpu-fuzz LAZYTPU_PROP_EXAMPLES=$(FUZZ_EXAMPLES) \
	  LAZYTPU_PROP_TIMEOUT=600 LAZYTPU_PROP_STATS=$(FUZZ)/prop-stats.json \
	  LAZYTPU_PROP_LOG=$(FUZZ)/prop-cases.log PYTHONPATH=$(CURDIR)/python \
	  LAZYTPU_BIN_DIR=$(CURDIR)/$(BUILD) \
	  $(PY) -m pytest -q -p no:cacheprovider tests/python/test_property_ops.py
	@cat $(FUZZ)/prop-stats.json; echo

clean:
	rm -rf $(BUILD) $(ASAN) $(FUZZ)
