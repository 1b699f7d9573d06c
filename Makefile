# Builds atoll's C side: the guest programs (wasm32-wasi, with sdk/bin/atoll-cc)
# and the native programs they are compared with.
#
#   make guests   examples/, tests/guests/ and bench/guests/ -> build/wasm/NAME.wasm,
#                 the MPI programs of tests/mpi/ and bench/mpi/ (with sdk/bin/atoll-mpicc),
#                 HPL -> build/wasm/hpl.wasm (from Debian's hpcc source, fetched once)
#                 bzip2 -> build/wasm/bzip2.wasm (Debian's bzip2 source, fetched once)
#                 and QuickJS -> build/wasm/qjs.wasm (Debian's quickjs source, fetched once)
#   make native   build/native/{mergesort,spawn_native,true,ipc_linux,swarm_native,fileio,
#                 place_native,balance,flood,bzip2,qjs} (gcc -O2),
#                 and bench/mpi/NAME.c -> NAME_mpi and HPL -> hpl_mpi (Open MPI's mpicc,
#                 Debian's reference BLAS) when mpicc is installed
#   make all      both (the default)
#   make clean
#
# V=1 shows the commands. Guests take ATOLL_CC/ATOLL_CFLAGS (see sdk/atoll.mk),
# native programs NATIVE_CC/NATIVE_CFLAGS.

.DEFAULT_GOAL := all
.DELETE_ON_ERROR:
.SUFFIXES:
MAKEFLAGS += --no-builtin-rules

include sdk/atoll.mk

BUILD := build
WASM_DIR := $(BUILD)/wasm
NATIVE_DIR := $(BUILD)/native
DEP_DIR := $(BUILD)/deps

GUEST_DIRS := examples tests/guests bench/guests
GUEST_SRCS := $(foreach d,$(GUEST_DIRS),$(wildcard $(d)/*.c))
GUEST_NAMES := $(notdir $(GUEST_SRCS:.c=))
GUESTS := $(addprefix $(WASM_DIR)/,$(addsuffix .wasm,$(GUEST_NAMES)))

# MPI programs link the guest MPI library, which atoll-mpicc builds into
# sdk/lib/ from sdk/mpi/ (the tests of its insides include sdk/mpi/impl.h).
MPI_SRCS := $(wildcard tests/mpi/*.c bench/mpi/*.c)
MPI_NAMES := $(notdir $(MPI_SRCS:.c=))
MPI_GUESTS := $(addprefix $(WASM_DIR)/,$(addsuffix .wasm,$(MPI_NAMES)))
MPI_LIB := sdk/lib/libatollmpi.a
# What atoll-mpicc itself checks before it rebuilds the library.
MPI_LIB_DEPS := $(wildcard sdk/mpi/*.c sdk/mpi/*.h) sdk/include/mpi.h sdk/include/atoll.h \
	sdk/bin/atoll-cc sdk/bin/atoll-mpicc

# build/wasm is flat, so two sources with one name would overwrite each other.
GUEST_DUPLICATES := $(shell printf '%s\n' $(GUEST_NAMES) $(MPI_NAMES) | sort | uniq -d)
ifneq ($(GUEST_DUPLICATES),)
$(error guest names must be unique across $(GUEST_DIRS): $(GUEST_DUPLICATES))
endif

NATIVE_CC ?= gcc
NATIVE_CFLAGS ?= -O2 -std=c11 -Wall -Wextra
NATIVE := $(NATIVE_DIR)/mergesort $(NATIVE_DIR)/spawn_native $(NATIVE_DIR)/true \
          $(NATIVE_DIR)/ipc_linux $(NATIVE_DIR)/swarm_native $(NATIVE_DIR)/fileio \
          $(NATIVE_DIR)/place_native $(NATIVE_DIR)/balance $(NATIVE_DIR)/flood \
          $(NATIVE_DIR)/threadbench $(NATIVE_DIR)/bzip2 $(NATIVE_DIR)/qjs
# The MPI benchmarks' native side, with Open MPI (scripts/setup.sh installs it).
MPICC ?= mpicc
ifneq ($(shell command -v $(MPICC) 2>/dev/null),)
NATIVE += $(patsubst bench/mpi/%.c,$(NATIVE_DIR)/%_mpi,$(wildcard bench/mpi/*.c)) \
          $(NATIVE_DIR)/hpl_mpi
endif

# HPL, as HPCC 1.5.0 carries it: the orig tarball of Debian's hpcc source
# package, checked against its hash, with bench/hpl/hpl.c as the program
# (MPI_Init, HPCC's HPL_main, MPI_Finalize). The guest gets bench/hpl/cblas.c
# (the reference BLAS loops, in C) and wasm SIMD, as gcc -O2 gets SSE2 on
# x86-64; the native build links Debian's reference BLAS (libblas-dev).
HPCC_TARBALL := hpcc_1.5.0.orig.tar.gz
HPCC_URL := http://deb.debian.org/debian/pool/main/h/hpcc/$(HPCC_TARBALL)
HPCC_SHA256 := 0a6fef7ab9f3347e549fed65ebb98234feea9ee18aea0c8f59baefbe3cf7ffb8
HPCC_DIR := $(BUILD)/hpcc-1.5.0
HPCC_UNPACKED := $(HPCC_DIR)/.unpacked
# Globs the recipes expand, once the sources are there.
HPL_SOURCES := $(HPCC_DIR)/hpl/src/*/*.c $(HPCC_DIR)/hpl/testing/*/*.c bench/hpl/hpl.c
HPL_CFLAGS := -w -DHPL_CALL_CBLAS -I $(HPCC_DIR)/hpl/include -I $(HPCC_DIR)/include

# bzip2 1.0.8, unmodified, as Debian ships it: a large real C program for
# comparing prepared wasm with native code (`atoll bench compress`). WASI
# has no fchmod/fchown (bzip2 copies a file's mode and owner to its output)
# and emulates signals and process clocks.
BZIP2_TARBALL := bzip2_1.0.8.orig.tar.gz
BZIP2_URL := http://deb.debian.org/debian/pool/main/b/bzip2/$(BZIP2_TARBALL)
BZIP2_SHA256 := ab5a03176ee106d3f0fa90e381da478ddae405918153cca248e682cd0c4a2269
BZIP2_DIR := $(BUILD)/bzip2-1.0.8
BZIP2_UNPACKED := $(BZIP2_DIR)/.unpacked
BZIP2_SOURCES := $(addprefix $(BZIP2_DIR)/,blocksort.c huffman.c crctable.c randtable.c \
	compress.c decompress.c bzlib.c bzip2.c)
BZIP2_WASI_FLAGS := -w -D_WASI_EMULATED_SIGNAL -D_WASI_EMULATED_PROCESS_CLOCKS \
	-D'fchmod(fd,mode)=0' -D'fchown(fd,uid,gid)=0'

# QuickJS 2025-04-26, unmodified, as Debian ships it, with bench/qjs/qjs.c as
# its main (the engine and `print`): atoll's largest real program, about
# 800 KiB of wasm: an interpreter against its native build (`atoll bench js`)
# and a large module's first run (`atoll bench prepare`).
# Its C stack is 1 MiB (bench/qjs/qjs.c says why the engine uses less);
# wasi-libc declares malloc_usable_size in <malloc.h>, which QuickJS
# includes only on Linux; bench/qjs/include stands in for <setjmp.h>.
QJS_TARBALL := quickjs_2025.04.26.orig.tar.xz
QJS_URL := http://deb.debian.org/debian/pool/main/q/quickjs/$(QJS_TARBALL)
QJS_SHA256 := ec81da5b3249ed648dbc7df4a1654988910e66a118d9b71cb63534216efcfbbe
QJS_DIR := $(BUILD)/quickjs-2025.04.26
QJS_UNPACKED := $(QJS_DIR)/.unpacked
QJS_SOURCES := bench/qjs/qjs.c $(addprefix $(QJS_DIR)/,quickjs.c libregexp.c libunicode.c \
	cutils.c dtoa.c)
QJS_FLAGS := -w -DCONFIG_VERSION='"2025-04-26"' -I $(QJS_DIR)
QJS_STACK := -Wl,-z,stack-size=1048576

.PHONY: all guests native clean
all: guests native
guests: $(GUESTS) $(MPI_GUESTS) $(WASM_DIR)/hpl.wasm $(WASM_DIR)/bzip2.wasm $(WASM_DIR)/qjs.wasm
native: $(NATIVE)

# One rule per source directory; make picks the one whose source exists.
# clang writes the headers each module really includes to a .d file. Every
# guest is linked with -pthread: only those that use threads pull in the
# thread library (atoll-cc builds it from sdk/thread/).
THREAD_LIB_SRCS := $(wildcard sdk/thread/*)
define guest_rule
$(WASM_DIR)/%.wasm: $(1)/%.c $$(ATOLL_SDK_DEPS) $$(THREAD_LIB_SRCS) Makefile | $(WASM_DIR) $(DEP_DIR)
	$$(call atoll_compile,$$@,$$<,-pthread -MMD -MP -MF $(DEP_DIR)/$$*.d -MT $$@)
endef
$(foreach d,$(GUEST_DIRS),$(eval $(call guest_rule,$(d))))

$(MPI_LIB): $(MPI_LIB_DEPS)
	@$(if $(atoll_q),printf '  AR      %s\n' '$@')
	$(atoll_q)ATOLL_CC='$(ATOLL_CC)' sdk/bin/atoll-mpicc --build-library

define mpi_rule
$(WASM_DIR)/%.wasm: $(1)/%.c $(MPI_LIB) Makefile | $(WASM_DIR) $(DEP_DIR)
	@$$(if $$(atoll_q),printf '  MPI     %s\n' '$$@')
	$$(atoll_q)ATOLL_CC='$$(ATOLL_CC)' sdk/bin/atoll-mpicc $$(ATOLL_CFLAGS) -I sdk/mpi \
		-MMD -MP -MF $$(DEP_DIR)/$$*.d -MT $$@ $$< -o $$@
endef
$(foreach d,tests/mpi bench/mpi,$(eval $(call mpi_rule,$(d))))

-include $(wildcard $(DEP_DIR)/*.d)

# $(call fetch_debian_source,URL,TARBALL,SHA256,DIR): the orig tarball of a
# Debian source package, checked against its hash, unpacked into DIR.
define fetch_debian_source
	@$(if $(atoll_q),printf '  FETCH   %s\n' '$(1)')
	$(atoll_q)curl -fsSL --retry 3 -o $(BUILD)/$(2).part '$(1)'
	$(atoll_q)echo '$(3)  $(BUILD)/$(2).part' | sha256sum -c --quiet
	$(atoll_q)rm -rf $(4) && tar -xf $(BUILD)/$(2).part -C $(BUILD)
	$(atoll_q)rm $(BUILD)/$(2).part && touch $(4)/.unpacked
endef

$(HPCC_UNPACKED):
	$(call fetch_debian_source,$(HPCC_URL),$(HPCC_TARBALL),$(HPCC_SHA256),$(HPCC_DIR))

$(BZIP2_UNPACKED):
	$(call fetch_debian_source,$(BZIP2_URL),$(BZIP2_TARBALL),$(BZIP2_SHA256),$(BZIP2_DIR))

$(QJS_UNPACKED):
	$(call fetch_debian_source,$(QJS_URL),$(QJS_TARBALL),$(QJS_SHA256),$(QJS_DIR))

$(WASM_DIR)/qjs.wasm: $(QJS_UNPACKED) bench/qjs/qjs.c bench/qjs/include/setjmp.h $(ATOLL_SDK_DEPS) \
		Makefile | $(WASM_DIR)
	$(call atoll_compile,$@,$(QJS_SOURCES),$(QJS_FLAGS) -pthread -include malloc.h \
		-I bench/qjs/include -lm $(QJS_STACK))

$(NATIVE_DIR)/qjs: $(QJS_UNPACKED) bench/qjs/qjs.c Makefile | $(NATIVE_DIR)
	$(call native_compile,$@,$(QJS_SOURCES),-lm -pthread,$(NATIVE_CC) $(QJS_FLAGS) -D_GNU_SOURCE)

$(WASM_DIR)/bzip2.wasm: $(BZIP2_UNPACKED) $(ATOLL_SDK_DEPS) Makefile | $(WASM_DIR)
	$(call atoll_compile,$@,$(BZIP2_SOURCES),$(BZIP2_WASI_FLAGS) -lwasi-emulated-signal \
		-lwasi-emulated-process-clocks)

$(NATIVE_DIR)/bzip2: $(BZIP2_UNPACKED) Makefile | $(NATIVE_DIR)
	$(call native_compile,$@,$(BZIP2_SOURCES),,$(NATIVE_CC) -w -D_GNU_SOURCE -D_FILE_OFFSET_BITS=64)

$(WASM_DIR)/hpl.wasm: $(HPCC_UNPACKED) bench/hpl/hpl.c bench/hpl/cblas.c $(MPI_LIB) Makefile \
		| $(WASM_DIR)
	@$(if $(atoll_q),printf '  MPI     %s\n' '$@')
	$(atoll_q)ATOLL_CC='$(ATOLL_CC)' sdk/bin/atoll-mpicc $(HPL_CFLAGS) -msimd128 -DHPL_USE_CLOCK \
		-D_WASI_EMULATED_PROCESS_CLOCKS $(HPL_SOURCES) bench/hpl/cblas.c \
		-lwasi-emulated-process-clocks -lm -o $@

# $(call native_compile,OUT,SRC,LIBS[,COMPILER])
define native_compile
	@$(if $(atoll_q),printf '  NATIVE  %s\n' '$(1)')
	$(atoll_q)$(or $(4),$(NATIVE_CC)) $(NATIVE_CFLAGS) $(2) -o $(1) $(3)
endef

$(NATIVE_DIR)/mergesort: examples/mergesort.c Makefile | $(NATIVE_DIR)
	$(call native_compile,$@,$<)

$(NATIVE_DIR)/spawn_native: bench/native/spawn_native.c Makefile | $(NATIVE_DIR)
	$(call native_compile,$@,$<,-pthread)

$(NATIVE_DIR)/true: bench/native/true.c Makefile | $(NATIVE_DIR)
	$(call native_compile,$@,$<)

$(NATIVE_DIR)/ipc_linux: bench/native/ipc_linux.c Makefile | $(NATIVE_DIR)
	$(call native_compile,$@,$<,-pthread -lrt)

$(NATIVE_DIR)/swarm_native: bench/native/swarm_native.c Makefile | $(NATIVE_DIR)
	$(call native_compile,$@,$<)

$(NATIVE_DIR)/place_native: bench/native/place_native.c Makefile | $(NATIVE_DIR)
	$(call native_compile,$@,$<)

$(NATIVE_DIR)/fileio: bench/guests/fileio.c Makefile | $(NATIVE_DIR)
	$(call native_compile,$@,$<)

$(NATIVE_DIR)/balance: bench/guests/balance.c Makefile | $(NATIVE_DIR)
	$(call native_compile,$@,$<)

$(NATIVE_DIR)/threadbench: bench/guests/threadbench.c Makefile | $(NATIVE_DIR)
	$(call native_compile,$@,$<,-pthread,$(NATIVE_CC) -D_GNU_SOURCE)

$(NATIVE_DIR)/flood: bench/guests/flood.c Makefile | $(NATIVE_DIR)
	$(call native_compile,$@,$<)

$(NATIVE_DIR)/%_mpi: bench/mpi/%.c $(wildcard bench/mpi/*.h) Makefile | $(NATIVE_DIR)
	$(call native_compile,$@,$<,-lm,$(MPICC))

# Open MPI 4 hides MPI-1's Type_struct and Address, which HPL calls, unless asked.
$(NATIVE_DIR)/hpl_mpi: $(HPCC_UNPACKED) bench/hpl/hpl.c Makefile | $(NATIVE_DIR)
	@$(if $(atoll_q),printf '  NATIVE  %s\n' '$@')
	$(atoll_q)$(MPICC) -O2 $(HPL_CFLAGS) -DOMPI_OMIT_MPI1_COMPAT_DECLS=0 $(HPL_SOURCES) -o $@ \
		-lblas -lm

$(WASM_DIR) $(NATIVE_DIR) $(DEP_DIR):
	@mkdir -p $@

clean:
	rm -rf $(WASM_DIR) $(NATIVE_DIR) $(DEP_DIR)
