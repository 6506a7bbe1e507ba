# nightshift — GNU make build.
#
#   make            build build/nightshift (release, -O2, AVX2/FMA)
#   make test       install missing Debian packages, build, run every test (ends "N passed, N failed")
#   make asan       the same tests on an ASan+UBSan build (build-asan/)
#   make fuzz       libFuzzer targets (clang) in build-fuzz/bin; run them with scripts/fuzz (all of them: no argument)
#   make demo       install, build, fetch the default model, clear the example backlog
#   make CUDA=1     also compile the CUDA backend with nvcc (sm_90 + PTX)
#   make MPI=1      link OpenMPI (mpicc): `mpirun -np N nightshift run ...` spreads one backlog over N ranks
#   make build/bench/NAME    bench/NAME.c linked against the library (the bench/*.sh scripts build theirs so)
#
# Every src/<layer>/<module>.c is part of libnightshift.a except src/cli/main.c; every tests/test_*.c is
# its own test binary linked against that library. Adding a module or a test needs no edit here. With
# CUDA=1 the device tests (tests/test_cuda*.c) and bench_cuda also link the CUDA test harness,
# tests/cuda_harness.cu (host-array wrappers of the kernels), which is not part of the library.

BUILD    ?= build
CC       ?= cc
OPT      ?= -O2
ARCH     ?= -mavx2 -mfma -mf16c
SANITIZE ?=
CFLAGS   ?=
NS_CFLAGS = -std=c11 -Wall -Wextra -Werror -D_GNU_SOURCE -g $(OPT) $(ARCH) $(SANITIZE) -Isrc -MMD -MP $(CFLAGS)
LDLIBS    = -lsqlite3 -ljansson -lz -lzstd -lpcre2-8 -lcrypto -lxxhash -lmicrohttpd -lpthread -lm
NVCC     ?= nvcc
CUDA_HOME ?= /usr/local/cuda
NVCCFLAGS = -O2 -std=c++17 -Isrc -Xcompiler -Wall,-Wextra --Werror all-warnings \
            -gencode=arch=compute_90,code=sm_90 -gencode=arch=compute_90,code=compute_90

LIB_SRCS  = $(filter-out src/cli/main.c,$(wildcard src/*/*.c))
LIB_OBJS  = $(LIB_SRCS:%.c=$(BUILD)/%.o)
TEST_SRCS = $(wildcard tests/test_*.c)
TEST_BINS = $(TEST_SRCS:tests/%.c=$(BUILD)/tests/%)
BIN       = $(BUILD)/nightshift

ifeq ($(CUDA),1)
CU_SRCS  = $(wildcard src/*/*.cu)
CU_OBJS  = $(CU_SRCS:%.cu=$(BUILD)/%.cu.o)
LIB_OBJS += $(CU_OBJS)
NS_CFLAGS += -DNS_CUDA=1
LDLIBS   += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublasLt -lcublas -lcudart -lstdc++
endif

# MPI: the same sources through the MPI compiler wrapper; src/jobs/dist_mpi.c compiles to nothing without it.
ifeq ($(MPI),1)
CC       := mpicc
NS_CFLAGS += -DNS_MPI=1
endif

.PHONY: all test asan fuzz fuzz-bins demo deps clean check-cuda check-mpi
all: $(BIN) $(TEST_BINS)

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(NS_CFLAGS) -c $< -o $@

$(BUILD)/%.cu.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -MD -MP -MF $(@:.o=.d) -c $< -o $@

$(BUILD)/libnightshift.a: $(LIB_OBJS)
	@rm -f $@
	ar rcs $@ $^

$(BIN): $(BUILD)/src/cli/main.o $(BUILD)/libnightshift.a
	$(CC) $(NS_CFLAGS) $^ -o $@ $(LDLIBS)

$(BUILD)/tests/%: $(BUILD)/tests/%.o $(BUILD)/libnightshift.a
	$(CC) $(NS_CFLAGS) $^ -o $@ $(LDLIBS)

# The CUDA build's device tests and bench_cuda: the harness object before the library that it calls into.
ifeq ($(CUDA),1)
CUDA_HARNESS    = $(BUILD)/tests/cuda_harness.cu.o
CUDA_TEST_BINS  = $(filter $(BUILD)/tests/test_cuda%,$(TEST_BINS))
$(CUDA_TEST_BINS): $(BUILD)/tests/%: $(BUILD)/tests/%.o $(CUDA_HARNESS) $(BUILD)/libnightshift.a
	$(CC) $(NS_CFLAGS) $^ -o $@ $(LDLIBS)

$(BUILD)/bench/bench_cuda: $(BUILD)/bench/bench_cuda.o $(CUDA_HARNESS) $(BUILD)/libnightshift.a
	$(CC) $(NS_CFLAGS) $^ -o $@ $(LDLIBS)
endif

# bench/<name>.c -> $(BUILD)/bench/<name>, built on request by the bench/*.sh scripts (`make build/bench/NAME`).
$(BUILD)/bench/%: $(BUILD)/bench/%.o $(BUILD)/libnightshift.a
	$(CC) $(NS_CFLAGS) $^ -o $@ $(LDLIBS)

deps:
	@scripts/install-deps

test: deps
	@scripts/fetch-model || echo "make test: the SmolLM2 model could not be fetched; its tests will be skipped"
	@scripts/fetch-model gemma3 || echo "make test: the Gemma 3 model could not be fetched; its tests will be skipped"
	$(MAKE) all
	@$(MAKE) --no-print-directory check-cuda
	@$(MAKE) --no-print-directory check-mpi
	@tests/run $(BUILD)

asan: deps
	$(MAKE) BUILD=build-asan OPT=-O1 SANITIZE="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer" all
	@ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 tests/run build-asan

# libFuzzer needs clang; the library is rebuilt with coverage instrumentation. `make fuzz-bins` builds the
# targets without installing anything (tests/e2e_fuzz.sh uses it when clang can link libFuzzer).
FUZZ_SRCS = $(wildcard fuzz/fuzz_*.c)
FUZZ_BINS = $(FUZZ_SRCS:fuzz/%.c=build-fuzz/bin/%)
FUZZ_FLAGS = -std=c11 -D_GNU_SOURCE -g -O1 $(ARCH) -Isrc -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
fuzz:
	@scripts/install-deps fuzz
	@$(MAKE) --no-print-directory fuzz-bins

fuzz-bins:
	@$(MAKE) --no-print-directory BUILD=build-fuzz CC=clang OPT=-O1 \
	  SANITIZE="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all" build-fuzz/libnightshift.a
	@$(MAKE) --no-print-directory $(FUZZ_BINS)

build-fuzz/bin/%: fuzz/%.c build-fuzz/libnightshift.a
	@mkdir -p build-fuzz/bin
	clang $(FUZZ_FLAGS) $< build-fuzz/libnightshift.a -o $@ $(LDLIBS)

demo:
	@scripts/install-deps
	$(MAKE) $(BIN)
	@scripts/demo

# Compile the CUDA sources (no GPU needed); CI runs this when nvcc is on PATH.
check-cuda:
	@if command -v $(NVCC) >/dev/null 2>&1 && [ -n "$(wildcard src/*/*.cu)" ]; then \
	  $(MAKE) CUDA=1 BUILD=build-cuda all; else echo "check-cuda: nothing to compile"; fi

# The MPI build in build-mpi/ when mpicc is on PATH (scripts/install-deps mpi); tests/e2e_mpi.sh runs its
# binary, and reports itself skipped without it.
check-mpi:
	@if command -v mpicc >/dev/null 2>&1; then \
	  $(MAKE) --no-print-directory MPI=1 BUILD=build-mpi build-mpi/nightshift; else echo "check-mpi: no mpicc"; fi

clean:
	rm -rf build build-asan build-fuzz build-cuda build-mpi

-include $(LIB_OBJS:.o=.d) $(BUILD)/src/cli/main.d $(TEST_BINS:=.d) $(wildcard $(BUILD)/bench/*.d) $(CUDA_HARNESS:.o=.d)
