SHELL := /bin/bash

# mod_mruby / ngx_mruby
#
#   make            build build/mod_mruby.so and build/ngx_http_mruby_module.so
#   make test       install what is needed, build, run every test
#   make test-asan  the tests again with both modules under AddressSanitizer
#   make fuzz       the libFuzzer targets of test/fuzz, FUZZ_TIME s each
#   make test-faults  the faults-under-load tests at full length (30 s of
#                   load each, 10^6 requests to a raising script): ~30 min
#   make run        install, build, start Apache (:8080) and nginx (:8081)
#   make bench      install, build, benchmark; results in docs/benchmarks.md
#   make bench-watch  the file watch with up to 100,000 stat scripts
#   make bench-first-pass  the first request of 100,000 stat scripts
#   make install    install the Apache module for a2enmod and the nginx one
#   make deb        Debian packages of both (dpkg-buildpackage) in build/deb/
#   make test-deb   build, lintian, install, serve, upgrade, purge them (root)
#   make test-dist DIST=bookworm|trixie|forky
#                   make test in a fresh debootstrap root of that suite (root)

BUILD      := build
CC         := gcc
MRBC       := mrbc
APXS       := apxs
NGINX_SRC  := /usr/share/nginx/src

# The -D flags Debian's mruby was built with, which set the layout of
# mrb_state and the object structs (3.1.0: RATIONAL, COMPLEX; 3.3.0 adds
# BIGINT and DEBUG_HOOK; 4.0.0 SET); src/core/mrb_mruby_version.h checks
# them.
MRUBY_DEFS := $(filter -D%,$(shell mruby-config --cflags 2>/dev/null))
MRUBY_LIB  := /usr/lib/libmruby.a
comma      := ,
# mruby's entry points back into its VM, wrapped to check the machine stack
# of a run on a coroutine first (src/core/mrb_stack_check.c): the list is
# src/core/mrb_stack_check.wrap
WRAP_LIST  := src/core/mrb_stack_check.wrap
MRB_WRAP   := $(addprefix -Wl$(comma)--wrap=,$(shell grep -v '^\#' $(WRAP_LIST)))
LIBS       := $(MRB_WRAP) $(MRUBY_LIB) -lhiredis -lonig -lssl -lcrypto -lboost_context -lm -lpthread

# -Werror=vla: no array on the machine stack sized by input (mrb_stack.h)
WARN       := -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers \
              -Werror=vla
OPT        ?= -O2 -g
SANITIZE   ?=
LDFLAGS    ?=
# mruby 4.0's mruby.h includes mruby/presym/id.h, the enum of the symbols
# built into the library, which mruby's build makes with the library and
# Debian's libmruby-dev does not install: scripts/presym-id.c writes it
# from the library itself, into $(BUILD)/include.  Empty on 3.x.
PRESYM_ID  := $(if $(shell grep -s 'include <mruby/presym/id.h>' /usr/include/mruby/presym.h),$(if $(wildcard /usr/include/mruby/presym/id.h),,$(BUILD)/include/mruby/presym/id.h))
MRUBY_INC  := $(if $(PRESYM_ID),-I$(CURDIR)/$(BUILD)/include)

CFLAGS_CORE = $(OPT) $(SANITIZE) -fPIC -std=gnu11 $(WARN) $(MRUBY_DEFS) \
              $(MRUBY_INC) -Isrc/core -I$(BUILD)
CFLAGS_ALL  = $(CFLAGS_CORE) -Isrc/lib

CORE_SRC   := $(wildcard src/core/*.c)
LIB_SRC    := $(wildcard src/lib/*.c)
APACHE_SRC := $(wildcard src/apache/*.c)
MRBLIB_RB  := $(sort $(wildcard mrblib/*.rb))
LIB_RB     := $(sort $(wildcard src/lib/*.rb))
# the compiled Ruby of the core (mrblib) and of the library (src/lib)
RB_C       := $(BUILD)/mrblib.c $(BUILD)/mrblib_lib.c
CORE_H     := $(wildcard src/core/*.h src/lib/*.h) $(PRESYM_ID)

APACHE_CFLAGS = $(shell $(APXS) -q CFLAGS) $(shell $(APXS) -q EXTRA_CPPFLAGS) \
                -I$(shell $(APXS) -q INCLUDEDIR) \
                $(shell pkg-config --cflags apr-1 apr-util-1 2>/dev/null)

APACHE_OBJ := $(patsubst %.c,$(BUILD)/apache/%.o,$(CORE_SRC) $(LIB_SRC) $(APACHE_SRC)) \
              $(BUILD)/apache/mrblib.o $(BUILD)/apache/mrblib_lib.o

# The names `make install` tells to link into /etc/nginx/modules-enabled:
# nginx includes that directory in name order, and the stream module must
# load after Debian's 50-mod-stream.conf (ngx_stream_module), which a name
# such as 50-mod-stream-mruby.conf would precede.
NGINX_HTTP_ENABLED   := 50-mod-http-mruby.conf
NGINX_STREAM_ENABLED := 60-mod-stream-mruby.conf

VENV       := build/venv
PYTHON     := $(VENV)/bin/python

.PHONY: all deps apache nginx test test-unit test-unit-core test-unit-asan test-asan test-faults test-deb test-dist fuzz run bench bench-watch bench-first-pass bench-releases bench-releases-wall install deb clean venv

all: apache nginx

deps:
	@sh scripts/install-deps.sh

apache: $(BUILD)/mod_mruby.so
nginx: $(BUILD)/ngx_http_mruby_module.so

# mrblib: the Ruby part of the API, compiled to bytecode in a C array,
# which the core loads; mrblib_lib: the library's (src/lib/*.rb), which
# the library loads (mrb_lib_part).
$(BUILD)/mrblib.c: $(MRBLIB_RB) Makefile | $(BUILD)
	$(MRBC) -B mrb_mrblib_irep -o $@ $(MRBLIB_RB)

$(BUILD)/mrblib_lib.c: $(LIB_RB) Makefile | $(BUILD)
	$(MRBC) -B mrb_lib_irep -o $@ $(LIB_RB)

$(BUILD):
	mkdir -p $(BUILD)

$(BUILD)/include/mruby/presym/id.h: scripts/presym-id.c $(MRUBY_LIB)
	@mkdir -p $(dir $@)
	$(CC) -std=gnu11 $(WARN) $(MRUBY_DEFS) -DMRB_PRESYM_SCANNING \
	  -o $(BUILD)/presym-id scripts/presym-id.c $(MRUBY_LIB) -lm
	$(BUILD)/presym-id > $@.tmp && mv $@.tmp $@

$(BUILD)/apache/%.o: %.c $(CORE_H) $(wildcard src/apache/*.h) | $(RB_C)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(APACHE_CFLAGS) -Isrc/apache -c $< -o $@

$(BUILD)/apache/mrblib.o $(BUILD)/apache/mrblib_lib.o: $(BUILD)/apache/%.o: $(BUILD)/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -c $< -o $@

# --exclude-libs: libmruby.a's ~600 symbols stay internal to the module.
# Apache loads modules RTLD_GLOBAL, so exported they could bind to another
# module's mruby; hidden, mruby's calls to itself skip the PLT and the
# module loads without binding them (1.9 M fewer instructions at startup).
# The version script does the same for our own names: only mruby_module
# is exported (test/test_build.py checks both modules' lists).
APACHE_MAP := src/apache/mod_mruby.map

$(BUILD)/mod_mruby.so: $(APACHE_OBJ) $(APACHE_MAP) $(WRAP_LIST)
	$(CC) -shared $(SANITIZE) $(LDFLAGS) -Wl,--exclude-libs,ALL \
	  -Wl,--version-script=$(APACHE_MAP) -o $@ $(APACHE_OBJ) $(LIBS)

# nginx: its own build system, from Debian's nginx-dev sources, with the
# flags Debian's nginx was configured with so that load_module accepts it.
NGINX_BUILD := $(BUILD)/nginx
NGINX_DEPS  := $(CORE_SRC) $(LIB_SRC) $(CORE_H) $(wildcard src/nginx/*) $(RB_C)

# src/core, src/lib: the nginx config lists their files when it runs, so a
# file added or removed there (the folder's mtime) configures again.
$(NGINX_BUILD)/Makefile: src/nginx/config $(WRAP_LIST) src/core src/lib $(NGINX_SRC)/conf_flags | $(RB_C) $(PRESYM_ID)
	rm -rf $(NGINX_BUILD) && mkdir -p $(NGINX_BUILD)
	cp -r $(NGINX_SRC)/. $(NGINX_BUILD)/
	cd $(NGINX_BUILD) && . ./conf_flags && \
	  NGX_MRUBY_BUILD=$(CURDIR)/$(BUILD) \
	  ./configure "$${NGX_CONF_FLAGS[@]}" --with-stream=dynamic \
	    --with-cc-opt="$(OPT) $(SANITIZE) -fPIC $(MRUBY_DEFS) $(MRUBY_INC) -I$(CURDIR)/src/core -I$(CURDIR)/src/lib -I$(CURDIR)/$(BUILD)" \
	    --with-ld-opt="$(SANITIZE) $(LDFLAGS)" \
	    --add-dynamic-module=$(CURDIR)/src/nginx >configure.log 2>&1 \
	  || { tail -30 configure.log; exit 1; }
	# Nginx.configure returns these arguments: with the checkout's path as
	# ".", the same commit built in two directories gives the same module.
	sed -i '/^#define NGX_CONFIGURE /s|$(CURDIR)|.|g' $(NGINX_BUILD)/objs/ngx_auto_config.h

$(BUILD)/ngx_http_mruby_module.so: $(NGINX_BUILD)/Makefile $(NGINX_DEPS)
	$(MAKE) -C $(NGINX_BUILD) -f objs/Makefile objs/ngx_http_mruby_module.so \
	  objs/ngx_stream_mruby_module.so >$(NGINX_BUILD)/make.log 2>&1 \
	  || { grep -E -A3 'error:|\*\*\*' $(NGINX_BUILD)/make.log | head -60; exit 1; }
	cp $(NGINX_BUILD)/objs/ngx_http_mruby_module.so $@
	@if [ -f $(NGINX_BUILD)/objs/ngx_stream_mruby_module.so ]; then \
	  cp $(NGINX_BUILD)/objs/ngx_stream_mruby_module.so $(BUILD)/; fi

venv: $(VENV)/.done
$(VENV)/.done: test/requirements.txt
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q -r test/requirements.txt
	touch $@

test: deps
	$(MAKE) all venv
	$(MAKE) test-unit
	$(MAKE) test-unit-core
	$(MAKE) test-unit-asan
	$(MAKE) fuzz FUZZ_TIME=3
	$(PYTHON) -m pytest -q -p no:cacheprovider test/selftest
	$(PYTHON) -m pytest -q -p no:cacheprovider --ignore=test/selftest test
	$(MAKE) test-deb

# the Fiber paper's experiments (bench/coro.py runs it)
$(BUILD)/coro_bench: bench/coro_bench.c $(CORE_SRC) $(LIB_SRC) $(RB_C) $(CORE_H)
	$(CC) $(CFLAGS_ALL) -o $@ bench/coro_bench.c $(CORE_SRC) $(LIB_SRC) $(RB_C) $(LIBS)

test-unit: $(BUILD)/test_core
	$(BUILD)/test_core

# make test runs them too, with 5 s of load and 20,000 requests each
test-faults: deps
	$(MAKE) all venv
	MRUBY_FAULT_SECONDS=30 MRUBY_FAULT_REQUESTS=1000000 \
	  $(PYTHON) -m pytest -q -s -p no:cacheprovider test/shared/test_faults.py

# test/unit/unit_intern.c counts the lookups of a name in mruby's symbol
# tables through the intern functions mruby's parser and loader call;
# test/unit/unit_oom.c fails mruby 4.0's allocations through
# mrb_basic_alloc_func (3.x has none: the wrap is then unused);
# test/unit/unit_secret.c looks into what free, realloc and
# redisFreeCommand are given for a password.
UNIT_WRAP  := $(addprefix -Wl$(comma)--wrap=,mrb_intern mrb_intern_static \
              mrb_intern_cstr mrb_basic_alloc_func free realloc \
              redisFreeCommand)

$(BUILD)/test_core: $(wildcard test/unit/*.c) $(CORE_SRC) $(LIB_SRC) $(RB_C) $(CORE_H) $(WRAP_LIST)
	$(CC) $(CFLAGS_ALL) -o $@ $(wildcard test/unit/*.c) $(CORE_SRC) $(LIB_SRC) $(RB_C) $(LIBS) $(UNIT_WRAP)

# The core without src/lib (not on the include path, not linked): it
# must build, and the unit tests that are not the library's (those that
# include neither mrb_lib.h nor lib_eval.h) pass.  The core reaches the
# library only through the parts an adapter hands it (mrb_part.h).
CORE_TESTS := $(shell grep -L 'mrb_lib\.h\|lib_eval\.h' test/unit/*.c)

test-unit-core: $(BUILD)/test_core_alone
	$(BUILD)/test_core_alone

$(BUILD)/test_core_alone: $(CORE_TESTS) $(CORE_SRC) $(BUILD)/mrblib.c $(wildcard src/core/*.h) $(PRESYM_ID) $(WRAP_LIST)
	$(CC) $(CFLAGS_CORE) -o $@ $(CORE_TESTS) $(CORE_SRC) $(BUILD)/mrblib.c $(LIBS) $(UNIT_WRAP)

# Fuzzing: each test/fuzz/fuzz_NAME.c is a libFuzzer target (clang, with
# AddressSanitizer) linked with the core built the same way.  `make fuzz`
# runs each for FUZZ_TIME seconds (0: no limit) or FUZZ_RUNS inputs (-1: no
# limit), growing its corpus in build/fuzz/corpus/NAME; a crash stops make
# and leaves the input in build/fuzz/.
FUZZ_CC      := clang
FUZZ_BUILD   := $(BUILD)/fuzz
FUZZ_TIME    ?= 10
FUZZ_RUNS    ?= -1
# mruby's GC frees objects after the input that made them, so libFuzzer's
# leak check would run LeakSanitizer on every input (400 inputs/s instead of
# 190,000); a target checks its own arena, and ASan still sees bad accesses.
FUZZ_FLAGS   ?= -detect_leaks=0
FUZZ_CFLAGS  := -g -O1 -fno-omit-frame-pointer -std=gnu11 $(MRUBY_DEFS) $(MRUBY_INC) \
                -fsanitize=fuzzer-no-link,address -Isrc/core -Isrc/lib -I$(BUILD)
FUZZ_TARGETS := $(patsubst test/fuzz/%.c,$(FUZZ_BUILD)/%,$(wildcard test/fuzz/fuzz_*.c))
FUZZ_OBJ     := $(patsubst %.c,$(FUZZ_BUILD)/%.o,$(CORE_SRC) $(LIB_SRC)) \
                $(FUZZ_BUILD)/mrblib.o $(FUZZ_BUILD)/mrblib_lib.o

# kept between runs, though only a pattern rule names them
.SECONDARY: $(FUZZ_OBJ)

$(FUZZ_BUILD)/src/%.o: src/%.c $(CORE_H) | $(RB_C)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -c $< -o $@

$(FUZZ_BUILD)/mrblib.o $(FUZZ_BUILD)/mrblib_lib.o: $(FUZZ_BUILD)/%.o: $(BUILD)/%.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -c $< -o $@

$(FUZZ_BUILD)/fuzz_%: test/fuzz/fuzz_%.c $(wildcard test/fuzz/*.h) $(FUZZ_OBJ)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $< $(FUZZ_OBJ) $(LIBS)

fuzz: $(FUZZ_TARGETS)
	@for t in $(FUZZ_TARGETS); do \
	  n=$$(basename $$t); mkdir -p $(FUZZ_BUILD)/corpus/$$n; \
	  $$t $(FUZZ_FLAGS) -max_total_time=$(FUZZ_TIME) -runs=$(FUZZ_RUNS) \
	    -artifact_prefix=$(FUZZ_BUILD)/$$n- $(FUZZ_BUILD)/corpus/$$n \
	    >$(FUZZ_BUILD)/$$n.log 2>&1 \
	  || { tail -40 $(FUZZ_BUILD)/$$n.log; echo "$$n: FAILED"; exit 1; }; \
	  echo "$$n: $$(grep -o 'Done [0-9]* runs in [0-9]* second(s)' \
	    $(FUZZ_BUILD)/$$n.log | tail -1), no crash"; \
	done

# The core's unit tests again under AddressSanitizer (make test runs this;
# make test-asan runs every test so).
test-unit-asan:
	$(MAKE) BUILD=build/asan OPT="-O1 -g -fno-omit-frame-pointer" \
	  SANITIZE="-fsanitize=address" test-unit

test-asan: deps
	$(MAKE) venv
	$(MAKE) BUILD=build/asan OPT="-O1 -g -fno-omit-frame-pointer" \
	  SANITIZE="-fsanitize=address" all test-unit
	MRUBY_BUILD=build/asan MRUBY_ASAN=1 $(PYTHON) -m pytest -q -p no:cacheprovider --ignore=test/selftest test

# RUN_ARGS: options of examples/run.py (ports, --only name,name).
run: deps
	$(MAKE) all venv
	$(PYTHON) examples/run.py $(RUN_ARGS)

bench: deps
	$(MAKE) all venv
	$(PYTHON) bench/run.py
	$(MAKE) $(BUILD)/coro_bench $(BUILD)/test_core
	$(PYTHON) bench/coro.py --rounds 5

# the file watch with 1,000 to 100,000 stat scripts (bench/watch_scale.py)
bench-watch: deps
	$(MAKE) all venv
	WATCH_SCALES=$${WATCH_SCALES:-1000,10000,100000} $(PYTHON) bench/watch_scale.py

# the first request of each of 10,000 and 100,000 stat scripts: the
# workers' CPU (bench/first_pass.py)
bench-first-pass: deps
	$(MAKE) all venv
	$(PYTHON) bench/first_pass.py

# the figures that compare Debian suites (bench/releases.py): callgrind's
# counts, then make bench's apache and nginx ratios (3 rounds unless
# BENCH_ROUNDS says otherwise); in a suite's fresh root:
# make test-dist DIST=trixie TARGET="deps bench-releases"
bench-releases: deps
	$(MAKE) all venv
	$(PYTHON) bench/releases.py instructions

bench-releases-wall: deps
	$(MAKE) all venv
	BENCH_ROUNDS=$${BENCH_ROUNDS:-3} $(PYTHON) bench/releases.py wall

install: all
	install -m 644 $(BUILD)/mod_mruby.so $(shell $(APXS) -q LIBEXECDIR)/mod_mruby.so
	install -m 644 src/apache/mruby.load /etc/apache2/mods-available/mruby.load
	install -m 644 src/apache/mruby.conf /etc/apache2/mods-available/mruby.conf
	install -m 644 $(BUILD)/ngx_http_mruby_module.so /usr/lib/nginx/modules/
	install -m 644 src/nginx/mod-http-mruby.conf /usr/share/nginx/modules-available/mod-http-mruby.conf
	install -m 644 $(BUILD)/ngx_stream_mruby_module.so /usr/lib/nginx/modules/
	install -m 644 src/nginx/mod-stream-mruby.conf /usr/share/nginx/modules-available/mod-stream-mruby.conf
	@echo "Apache: a2enmod mruby."
	@echo "nginx: ln -s /usr/share/nginx/modules-available/mod-http-mruby.conf /etc/nginx/modules-enabled/$(NGINX_HTTP_ENABLED)"
	@echo "nginx stream (after Debian's 50-mod-stream.conf): ln -s /usr/share/nginx/modules-available/mod-stream-mruby.conf /etc/nginx/modules-enabled/$(NGINX_STREAM_ENABLED)"

# The packages build from a copy of this tree (dpkg-buildpackage puts them
# next to the tree it builds), through `make all` with Debian's flags.
deb:
	sh scripts/build-deb.sh $(BUILD)/deb

# As root: on this machine's Apache and nginx, restored afterwards.
test-deb:
	bash scripts/test-deb.sh

# As root: make test on a fresh machine of that Debian suite, a chroot
# built with debootstrap (cached in /var/cache/mruby-test-dist).
# TARGET: what to make there instead of test (e.g. "deps deb").
DIST   ?=
TARGET ?= test
test-dist:
	bash scripts/test-dist.sh $(DIST) $(TARGET)

clean:
	rm -rf $(BUILD)
