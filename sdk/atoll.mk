# atoll.mk - make rules for building C programs for atoll.
#
#   include path/to/sdk/atoll.mk
#   all: hello.wasm            # built from hello.c by the rule below
#
# Variables (set before or after the include, or on the command line):
#   ATOLL_CC      the clang that atoll-cc runs (default clang-16)
#   ATOLL_CFLAGS  flags for every module (default -O2 -Wall -Wextra)
#   ATOLL_LDLIBS  libraries, e.g. -lm
#   V=1           show the full commands

# Captured now: MAKEFILE_LIST ends with this file only while it is being read.
ATOLL_SDK := $(patsubst %/,%,$(dir $(lastword $(MAKEFILE_LIST))))

ATOLL_CC ?= clang-16
ATOLL_CFLAGS ?= -O2 -Wall -Wextra
ATOLL_LDLIBS ?=
ATOLL_CC_SCRIPT := $(ATOLL_SDK)/bin/atoll-cc

# A change to the wrapper, the header or these rules changes every module.
ATOLL_SDK_DEPS := $(ATOLL_CC_SCRIPT) $(ATOLL_SDK)/include/atoll.h \
	$(ATOLL_SDK)/atoll.mk

ifeq ($(V),1)
atoll_q :=
else
atoll_q := @
endif

# $(call atoll_compile,OUT,SRC[,EXTRA_FLAGS]): compile and link one module.
# ATOLL_CC is passed explicitly so that a CC exported for native builds (as
# `make CC=gcc` does) never reaches atoll-cc.
define atoll_compile
	@$(if $(atoll_q),printf '  WASM    %s\n' '$(1)')
	$(atoll_q)ATOLL_CC='$(ATOLL_CC)' $(ATOLL_CC_SCRIPT) $(ATOLL_CFLAGS) $(3) $(2) -o $(1) $(ATOLL_LDLIBS)
endef

%.wasm: %.c $(ATOLL_SDK_DEPS)
	$(call atoll_compile,$@,$<)
