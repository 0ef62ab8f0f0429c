# libkvtier - plain Makefile in the style of liburing.
#   make                 library (shared + static), kvbench, examples
#   make check           build and run the test suite
#   make check-asan      the same under AddressSanitizer + UBSan (build/asan)
#   make check-tsan      the same under ThreadSanitizer (build/tsan)
#   make install PREFIX=/usr/local DESTDIR=
VERSION  := 0.1.0
MAJOR    := 0

PREFIX     ?= /usr/local
LIBDIR     ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
BINDIR     ?= $(PREFIX)/bin
MANDIR     ?= $(PREFIX)/share/man
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig

BUILD  ?= build
SAN    ?=
CC     ?= cc
CFLAGS ?= -O2 -g

WARN    := -Wall -Wextra -Werror
BASE    := -std=gnu11 -D_GNU_SOURCE -fPIC -fvisibility=hidden -Iinclude -Ilib -pthread
ifneq ($(SAN),)
BASE    += -fsanitize=$(SAN) -fno-omit-frame-pointer -fno-sanitize-recover=all
SANLD   := -fsanitize=$(SAN)
endif
ALLCFLAGS = $(BASE) $(WARN) $(CFLAGS) -MMD -MP
LIBS    := -luring -ljansson -lnuma -lrdmacm -libverbs -lpthread -lm

LIB_SRC   := $(sort $(wildcard lib/*.c))
BENCH_SRC := $(sort $(wildcard bench/*.c bench/replay/*.c))
COMMON_SRC := $(sort $(wildcard common/*.c))
TEST_SRC  := $(sort $(wildcard tests/test_*.c))
EX_SRC    := $(sort $(wildcard examples/*.c))

LIB_OBJ   := $(LIB_SRC:%.c=$(BUILD)/%.o)
BENCH_OBJ := $(BENCH_SRC:%.c=$(BUILD)/%.o)
# Everything of kvbench but its main(), so tests can reach the workload code.
BENCH_CORE_OBJ := $(filter-out $(BUILD)/bench/kvbench.o,$(BENCH_OBJ))
BENCHLIB  := $(BUILD)/libkvbench.a
# What kvbench and the tests share (common/): block contents, owners, ports.
COMMON_OBJ := $(COMMON_SRC:%.c=$(BUILD)/%.o)
COMMONLIB := $(BUILD)/libkvcommon.a
TEST_BIN  := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
EX_BIN    := $(EX_SRC:examples/%.c=$(BUILD)/examples/%)

SONAME  := libkvtier.so.$(MAJOR)
SHLIB   := $(BUILD)/libkvtier.so.$(VERSION)
# The installed static archive: every object linked into one (ld -r) whose
# hidden symbols are then made local, so an engine that links it inherits no
# name but the public kvt_ ones. INTLIB holds the same objects as they are,
# for the tests, kvbench and the fuzz driver, which reach internal functions.
STLIB   := $(BUILD)/libkvtier.a
INTLIB  := $(BUILD)/libkvtier-internal.a
LD      ?= ld
OBJCOPY ?= objcopy
KVBENCH := $(BUILD)/kvbench

# The CUDA examples (examples/cuda/) are built when nvcc is found (on PATH or
# in /usr/local/cuda/bin) and no sanitizer is asked for; the library itself
# never links CUDA. NVCC_ARCH picks the GPU generation (default: Hopper).
NVCC      ?= $(firstword $(shell command -v nvcc 2>/dev/null) $(wildcard /usr/local/cuda/bin/nvcc))
NVCC_ARCH ?= -arch=sm_90
CUDA_SRC  := $(sort $(wildcard examples/cuda/*.cu))
CUDA_BIN  := $(if $(NVCC),$(if $(SAN),,$(CUDA_SRC:examples/cuda/%.cu=$(BUILD)/examples/cuda/%) $(BUILD)/kvbench-gpu))
# What the CUDA programs link besides libkvtier.a; to carry them to a machine
# without these libraries, name the static archives instead (see README).
CUDA_LIBS ?= $(LIBS)
CUDA_FLAGS = -O2 -std=c++17 $(NVCC_ARCH) -Iinclude -Iexamples/cuda -Werror all-warnings \
	     -Xcompiler -Wall,-Wextra,-Werror

.PHONY: all check check-asan check-tsan check-all check-install check-rdma install uninstall clean deps demo test
all: $(SHLIB) $(BUILD)/libkvtier.so $(STLIB) $(KVBENCH) $(EX_BIN) $(CUDA_BIN) $(BUILD)/kvtier.pc

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ALLCFLAGS) -c $< -o $@

# kvbench's sources: the commands in bench/, the replay simulator in bench/replay/.
$(BUILD)/bench/%.o: ALLCFLAGS += -Ibench -Ibench/replay -Icommon

# checksum_avx2.c alone is built for AVX2 on x86-64; checksum.c calls it
# only when the CPU has AVX2 (see the top of both files).
ifneq ($(filter x86_64%,$(shell $(CC) -dumpmachine)),)
AVX2_FLAGS := -mavx2
endif
$(BUILD)/lib/checksum_avx2.o: BASE += $(AVX2_FLAGS)

$(SHLIB): $(LIB_OBJ) lib/libkvtier.map
	$(CC) -shared -Wl,-soname,$(SONAME) -Wl,--version-script=lib/libkvtier.map \
		-Wl,--no-undefined $(SANLD) -o $@ $(LIB_OBJ) $(LIBS)

$(BUILD)/libkvtier.so: $(SHLIB)
	ln -sf libkvtier.so.$(VERSION) $(BUILD)/$(SONAME)
	ln -sf $(SONAME) $@

$(STLIB): $(LIB_OBJ) Makefile
	@rm -f $@ $(BUILD)/libkvtier.o
	$(LD) -r -o $(BUILD)/libkvtier.o $(LIB_OBJ)
	$(OBJCOPY) --localize-hidden $(BUILD)/libkvtier.o
	ar rcs $@ $(BUILD)/libkvtier.o

$(INTLIB): $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BENCHLIB): $(BENCH_CORE_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(COMMONLIB): $(COMMON_OBJ)
	@rm -f $@
	ar rcs $@ $^

# kvbench drives the device layer directly (bench/disk.c), so it links INTLIB.
$(KVBENCH): $(BUILD)/bench/kvbench.o $(BENCHLIB) $(COMMONLIB) $(INTLIB)
	$(CC) $(SANLD) -pthread -o $@ $(BUILD)/bench/kvbench.o $(BENCHLIB) $(COMMONLIB) $(INTLIB) $(LIBS)

$(BUILD)/examples/%: examples/%.c $(STLIB)
	@mkdir -p $(dir $@)
	$(CC) $(ALLCFLAGS) -o $@ $< $(STLIB) $(SANLD) $(LIBS)

$(BUILD)/examples/cuda/%: examples/cuda/%.cu $(wildcard examples/cuda/*.cuh) include/kvtier.h $(STLIB)
	@mkdir -p $(dir $@)
	$(NVCC) $(CUDA_FLAGS) -o $@ $< $(STLIB) $(CUDA_LIBS)

$(BUILD)/kvbench-gpu: bench/gpu/kvbench_gpu.cu $(wildcard examples/cuda/*.cuh) include/kvtier.h $(STLIB)
	$(NVCC) $(CUDA_FLAGS) -o $@ $< $(STLIB) $(CUDA_LIBS) -ldl

# Unit tests link the internal archive, so they can reach internal functions
# through lib/*.h, and common/ (what they share with kvbench); helpers shared
# by several tests live in tests/util.[ch] (and the in-process RDMA fabric
# of the CPU tests in tests/fabric.[ch]). Only the tests of kvbench itself
# (BENCH_TESTS) also link kvbench's code (bench/*.h) through libkvbench.a.
# An area whose tests are split into several programs shares their helpers
# through tests/<area>_util.[ch] (TEST_AREA), linked into those programs only:
# the tests of kvbench's commands (test_bench_*.c) through bench_util, those
# of the node store (test_local_*.c) through local_util, those of the peer
# tier over TCP (PEER_TESTS; not the RDMA ones) through peer_util, those of
# the disk tier (test_disk_*.c) through disk_util.
TEST_UTIL := $(wildcard tests/util.c tests/fabric.c tests/faultdev.c)
BENCH_CMD_TESTS := $(patsubst tests/%.c,$(BUILD)/tests/%,$(wildcard tests/test_bench_*.c))
BENCH_TESTS := $(BENCH_CMD_TESTS) $(addprefix $(BUILD)/tests/,test_replay test_trace \
		test_workload test_fuzz_corpus test_peer_rdma_verbs)
$(BENCH_TESTS): TEST_BENCH := -Ibench -Ibench/replay $(BENCHLIB)
$(BENCH_TESTS): $(BENCHLIB) $(KVBENCH)
$(BENCH_CMD_TESTS): TEST_AREA := tests/bench_util.c
$(BENCH_CMD_TESTS): tests/bench_util.c tests/bench_util.h
LOCAL_TESTS := $(patsubst tests/%.c,$(BUILD)/tests/%,$(wildcard tests/test_local_*.c))
$(LOCAL_TESTS): TEST_AREA := tests/local_util.c
$(LOCAL_TESTS): tests/local_util.c tests/local_util.h
PEER_TESTS := $(addprefix $(BUILD)/tests/,test_peer_members test_peer_faults test_peer_server)
$(PEER_TESTS): TEST_AREA := tests/peer_util.c
$(PEER_TESTS): tests/peer_util.c tests/peer_util.h
DISK_TESTS := $(patsubst tests/%.c,$(BUILD)/tests/%,$(wildcard tests/test_disk_*.c))
$(DISK_TESTS): TEST_AREA := tests/disk_util.c
$(DISK_TESTS): tests/disk_util.c tests/disk_util.h
# A program built from several sources in one step records the
# dependencies of its last source alone (-MMD): the shared helpers' headers
# are named here, so editing one rebuilds the tests.
$(TEST_BIN): $(wildcard tests/util.h tests/fabric.h tests/faultdev.h)
$(BUILD)/tests/%: tests/%.c $(TEST_UTIL) $(COMMONLIB) $(INTLIB)
	@mkdir -p $(dir $@)
	$(CC) $(ALLCFLAGS) -Itests -Icommon -o $@ $< $(TEST_AREA) $(TEST_UTIL) $(TEST_BENCH) \
		$(COMMONLIB) $(INTLIB) $(SANLD) $(LIBS) -lcmocka

$(BUILD)/kvtier.pc: pkgconfig/kvtier.pc.in Makefile
	@mkdir -p $(BUILD)
	sed -e 's|@PREFIX@|$(PREFIX)|; s|@LIBDIR@|$(LIBDIR)|; s|@INCLUDEDIR@|$(INCLUDEDIR)|; s|@VERSION@|$(VERSION)|' $< > $@

check: all $(TEST_BIN)
	BUILD=$(BUILD) SAN=$(SAN) sh tests/run.sh $(TEST_BIN)

check-asan:
	$(MAKE) check BUILD=build/asan SAN=address,undefined CFLAGS="-O1 -g"

check-tsan:
	$(MAKE) check BUILD=build/tsan SAN=thread CFLAGS="-O1 -g"

check-all: check check-asan check-tsan

# An outside program built against an installed copy through pkg-config,
# the header as C99 and C++, and the exported symbol list.
check-install: all
	BUILD=$(BUILD) sh tests/install-test.sh

# The RDMA tests against a real kernel verbs stack: tests/rdma/vm.sh boots
# Debian's kernel under QEMU with a soft-RoCE device and runs them there
# (.ci/rdma-deps.sh installs QEMU and the rest). Without QEMU or the kernel
# package it says SKIP, unless KVT_REQUIRE_RDMA=1 (CI), where that fails.
RDMA_TESTS := $(BUILD)/tests/test_rlink_verbs $(BUILD)/tests/test_peer_rdma_verbs \
	$(BUILD)/tests/test_peer_rdma_owner
# Their member set-up and second processes come from tests/rdma_util.[ch].
$(RDMA_TESTS): TEST_AREA := tests/rdma_util.c
$(RDMA_TESTS): tests/rdma_util.c tests/rdma_util.h
check-rdma: all $(RDMA_TESTS)
	@rc=0; tests/rdma/vm.sh --timeout 900 -- sh tests/run.sh $(RDMA_TESTS) || rc=$$?; \
	if [ $$rc -eq 77 ] && [ "$(KVT_REQUIRE_RDMA)" != 1 ]; then \
		echo "SKIP check-rdma: no soft-RoCE VM on this machine"; exit 0; fi; \
	exit $$rc

# The README's two quick-start commands.
deps:
	sh .ci/deps.sh

demo: deps
	$(MAKE) all
	$(KVBENCH)

test: deps
	$(MAKE) check-all check-install

install: all
	install -d $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(BINDIR) \
		$(DESTDIR)$(PKGCONFIGDIR)
	install -m 644 include/kvtier.h $(DESTDIR)$(INCLUDEDIR)/
	install -m 755 $(SHLIB) $(DESTDIR)$(LIBDIR)/
	ln -sf libkvtier.so.$(VERSION) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(LIBDIR)/libkvtier.so
	install -m 644 $(STLIB) $(DESTDIR)$(LIBDIR)/
	# Written at install time: the prefix given here, not the one of `make`.
	sed -e 's|@PREFIX@|$(PREFIX)|; s|@LIBDIR@|$(LIBDIR)|; s|@INCLUDEDIR@|$(INCLUDEDIR)|; s|@VERSION@|$(VERSION)|' \
		pkgconfig/kvtier.pc.in > $(DESTDIR)$(PKGCONFIGDIR)/kvtier.pc
	chmod 644 $(DESTDIR)$(PKGCONFIGDIR)/kvtier.pc
	install -m 755 $(KVBENCH) $(DESTDIR)$(BINDIR)/
	install -m 755 $(BUILD)/examples/kvtierd $(DESTDIR)$(BINDIR)/
	for s in 1 3 5 7; do \
		ls man/*.$$s >/dev/null 2>&1 || continue; \
		install -d $(DESTDIR)$(MANDIR)/man$$s; \
		install -m 644 man/*.$$s $(DESTDIR)$(MANDIR)/man$$s/; \
	done

uninstall:
	rm -f $(DESTDIR)$(INCLUDEDIR)/kvtier.h $(DESTDIR)$(LIBDIR)/libkvtier.* \
		$(DESTDIR)$(PKGCONFIGDIR)/kvtier.pc $(DESTDIR)$(BINDIR)/kvbench \
		$(DESTDIR)$(BINDIR)/kvtierd
	for f in man/*.[1357]; do rm -f $(DESTDIR)$(MANDIR)/man$${f##*.}/$${f##*/}; done
	# Then the directories install made, deepest first, where nothing else
	# is left in them (rmdir refuses a directory that is not empty).
	for d in $(MANDIR)/man1 $(MANDIR)/man3 $(MANDIR)/man5 $(MANDIR)/man7 \
		$(MANDIR) $(PKGCONFIGDIR) $(LIBDIR) $(INCLUDEDIR) $(BINDIR) \
		$(PREFIX)/share $(PREFIX); do \
		rmdir $(DESTDIR)$$d 2>/dev/null || true; \
	done

clean:
	rm -rf build

-include $(LIB_OBJ:.o=.d) $(BENCH_OBJ:.o=.d) $(COMMON_OBJ:.o=.d) $(TEST_BIN:=.d) $(EX_BIN:=.d)

# --- fuzzing ---
# Coverage-guided fuzz targets of tests/fuzz/ (config parser, trace readers,
# disk-tier recovery, peer and local socket frames) under libFuzzer with ASan+UBSan; needs clang.
#   make fuzz                  each target for FUZZ_SECONDS (default 60); a target
#                              that stops on a finding does not keep the others from
#                              running, and make fails at the end naming it
#   make fuzz-build            just build them (build/fuzz/fuzz_*)
#   make fuzz-replay           the seed corpora through tests/fuzz/driver.c,
#                              built with $(CC) (no clang needed); `make check`
#                              replays them too (tests/test_fuzz_corpus.c)
# New inputs go to build/fuzz/corpus/<target>, crashes to
# build/fuzz/crash-<target>-*; minimise one with
#   build/fuzz/fuzz_<target> -minimize_crash=1 -runs=100000 CRASHFILE
FUZZ_CC      ?= clang-14
FUZZ_SECONDS ?= 60
FUZZ_BUILD   ?= build/fuzz
FUZZ_TARGETS := config trace disk_scan peer_wire local_wire
FUZZ_SAN     := address,undefined
FUZZ_CFLAGS  := -std=gnu11 -D_GNU_SOURCE -Iinclude -Ilib -Ibench -Ibench/replay -Icommon -pthread -g -O1 \
		-fno-omit-frame-pointer -fno-sanitize-recover=all -Wall -Wextra
FUZZ_LIB_OBJ   := $(LIB_SRC:%.c=$(FUZZ_BUILD)/%.fo)
FUZZ_BENCH_OBJ := $(filter-out $(FUZZ_BUILD)/bench/kvbench.fo,$(BENCH_SRC:%.c=$(FUZZ_BUILD)/%.fo)) \
		  $(COMMON_SRC:%.c=$(FUZZ_BUILD)/%.fo)
FUZZ_BIN     := $(FUZZ_TARGETS:%=$(FUZZ_BUILD)/fuzz_%)
FUZZ_REPLAY  := $(FUZZ_TARGETS:%=$(FUZZ_BUILD)/replay_%)

.PHONY: fuzz fuzz-build fuzz-replay
$(FUZZ_BUILD)/lib/checksum_avx2.fo: FUZZ_CFLAGS += $(AVX2_FLAGS)
$(FUZZ_BUILD)/%.fo: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link,$(FUZZ_SAN) -c $< -o $@

$(FUZZ_BUILD)/libfuzzkv.a: $(FUZZ_BENCH_OBJ) $(FUZZ_LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(FUZZ_BUILD)/fuzz_%: tests/fuzz/fuzz_%.c $(FUZZ_BUILD)/libfuzzkv.a
	$(FUZZ_CC) $(FUZZ_CFLAGS) -Werror -fsanitize=fuzzer,$(FUZZ_SAN) -o $@ $< \
		$(FUZZ_BUILD)/libfuzzkv.a $(LIBS)

fuzz-build: $(FUZZ_BIN)

fuzz: $(FUZZ_BIN)
	@failed=; for t in $(FUZZ_TARGETS); do \
		mkdir -p $(FUZZ_BUILD)/corpus/$$t; \
		dict=; [ ! -f tests/fuzz/$$t.dict ] || dict=-dict=tests/fuzz/$$t.dict; \
		echo "fuzz_$$t for $(FUZZ_SECONDS)s"; \
		$(FUZZ_BUILD)/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 \
			-artifact_prefix=$(FUZZ_BUILD)/crash-$$t- $$dict \
			$(FUZZ_BUILD)/corpus/$$t tests/fuzz/corpus/$$t || failed="$$failed $$t"; \
	done; \
	if [ -n "$$failed" ]; then echo "fuzz: stopped with a finding:$$failed" \
		"(inputs in $(FUZZ_BUILD)/crash-<target>-*)"; exit 1; fi

# The stand-alone driver, with the compiler and sanitizers of a normal build.
# Only the trace readers are kvbench's code; the others need common/ at most.
$(FUZZ_BUILD)/replay_trace: FUZZ_BENCH := $(BENCHLIB)
$(FUZZ_BUILD)/replay_trace: $(BENCHLIB)
$(FUZZ_BUILD)/replay_%: tests/fuzz/fuzz_%.c tests/fuzz/driver.c $(INTLIB) $(COMMONLIB)
	@mkdir -p $(dir $@)
	$(CC) $(ALLCFLAGS) -Ibench -Ibench/replay -Icommon -o $@ $< tests/fuzz/driver.c \
		$(FUZZ_BENCH) $(COMMONLIB) $(INTLIB) $(SANLD) $(LIBS)

fuzz-replay: $(FUZZ_REPLAY)
	@set -e; for t in $(FUZZ_TARGETS); do \
		$(FUZZ_BUILD)/replay_$$t tests/fuzz/corpus/$$t; \
	done
