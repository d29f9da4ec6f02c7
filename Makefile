# Entry points for people and CI. `make serve` and `make test` install what is
# missing (Debian packages), build, then serve or test.
JOBS ?= 2
BUILD ?= build
ASAN_BUILD ?= build-asan
TSAN_BUILD ?= build-tsan
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 60
FUZZERS ?= gguf jinja tok oai

.PHONY: all deps deps-fuzz node-deps build build-asan build-tsan build-fuzz fuzz serve test test-long test-fast install clean
PREFIX ?= /usr/local

all: build

deps:
	@./scripts/install-deps.sh

# clang and libFuzzer's runtime too (only the fuzz build needs them)
deps-fuzz:
	@./scripts/install-deps.sh fuzz

node-deps: deps
	@./scripts/install-node-deps.sh

build: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DPOWER_WERROR=ON >/dev/null
	cmake --build $(BUILD) -j $(JOBS)

build-asan: deps
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DPOWER_SANITIZE=address -DPOWER_WERROR=ON >/dev/null
	cmake --build $(ASAN_BUILD) -j $(JOBS) --target power_asan_tests

build-tsan: deps
	cmake -S . -B $(TSAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DPOWER_SANITIZE=thread -DPOWER_WERROR=ON >/dev/null
	cmake --build $(TSAN_BUILD) -j $(JOBS) --target power_tsan_tests

# libFuzzer binaries (clang, ASan + UBSan with float-to-integer overflow).
build-fuzz: deps-fuzz
	cmake -S . -B $(FUZZ_BUILD) -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Debug -DPOWER_FUZZ=ON -DPOWER_WERROR=ON >/dev/null
	cmake --build $(FUZZ_BUILD) -j $(JOBS) $(addprefix --target fuzz_,$(FUZZERS))

# Runs each fuzzer for FUZZ_SECONDS, one after the other, starting from the
# seed corpus; new inputs go to $(FUZZ_BUILD)/corpus/<name> (the seeds in
# the repository stay as they are), crashes to $(FUZZ_BUILD)/crash-<name>-*.
fuzz: build-fuzz
	@for f in $(FUZZERS); do \
	  mkdir -p $(FUZZ_BUILD)/corpus/$$f; \
	  echo "fuzz: $$f for $(FUZZ_SECONDS) s"; \
	  $(FUZZ_BUILD)/fuzz_$$f -max_total_time=$(FUZZ_SECONDS) -timeout=10 -rss_limit_mb=2048 \
	    -print_final_stats=1 -artifact_prefix=$(FUZZ_BUILD)/crash-$$f- \
	    $(FUZZ_BUILD)/corpus/$$f tests/fuzz/corpus/$$f || exit 1; \
	done

serve: build
	./scripts/serve.sh $(BUILD)/power

# Every test, in the release build and again under ASan+UBSan and TSan.
test: node-deps build build-asan build-tsan
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)
	ctest --test-dir $(ASAN_BUILD) --output-on-failure -j $(JOBS) -LE slow
	ctest --test-dir $(TSAN_BUILD) --output-on-failure -j $(JOBS) -L tsan

# The parity cases too long for every run (llama.cpp and Power at 16K
# positions, each KV type).
test-long: node-deps build
	PW_PEER_LONG=1 ctest --test-dir $(BUILD) --output-on-failure -R test_peer_llamacpp

test-fast: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

# Installs bin/power and the man page under $(PREFIX) (staged under
# $(DESTDIR) when set, as packagers do).
install: build
	DESTDIR=$(DESTDIR) cmake --install $(BUILD) --prefix $(PREFIX)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(TSAN_BUILD) $(FUZZ_BUILD)
