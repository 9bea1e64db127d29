# agentfs: `make demo` shows it working on a sample project, `make test`
# runs the whole test suite (root with /dev/fuse: the FUSE tests run;
# CI sets AGENTFS_REQUIRE_FUSE=1 so that they can never silently skip),
# `make bench` compares agentfs with native, overlayfs and fuse-overlayfs.

GO      ?= go
# agentfs is two programs installed side by side: bin/agentfs, the thin
# front users run, and bin/agentfs-core, the full program it runs every
# other command in (package cli says why).
BIN     := bin/agentfs
CORE    := bin/agentfs-core
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
COMMIT  ?= $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS := -X github.com/agentfs/agentfs/cli.Version=$(VERSION) -X github.com/agentfs/agentfs/cli.commit=$(COMMIT)
GOTESTFLAGS ?= -timeout 30m
# BENCHFLAGS are passed to agentfs-bench, e.g. BENCHFLAGS="--quick --only find,grep".
BENCHFLAGS ?=
# BASELINE=REV makes make bench build commit REV too (make baseline)
# and compare this build with it in the same run: make bench BASELINE=HEAD~.
# None by default (it doubles the agentfs runs).
BASELINE ?=
# Its own directory: the front runs the agentfs-core beside it.
BASELINE_BIN := bin/baseline/agentfs

# On CI (CI=true) as root, tests that need FUSE or root must run: they
# fail instead of skipping. A caller can ask for the same by setting
# AGENTFS_REQUIRE_FUSE=1 itself (.ci/run does).
ifeq ($(CI)$(shell id -u),true0)
export AGENTFS_REQUIRE_FUSE ?= 1
endif

# The linter, pinned; make test installs it into bin/tools.
GOLANGCI_LINT_VERSION := v2.15.0
GOLANGCI_LINT := bin/tools/golangci-lint-$(GOLANGCI_LINT_VERSION)

# The S3 server of the remote tests (Versity's gateway, serving a
# directory), pinned; make deps installs it into bin/tools, and the tests
# start it (internal/s3test), which finds it through AGENTFS_VERSITYGW.
VERSITYGW_VERSION := v1.8.0
VERSITYGW := bin/tools/versitygw-$(VERSITYGW_VERSION)
export AGENTFS_VERSITYGW ?= $(CURDIR)/$(VERSITYGW)

# make install puts agentfs and agentfs-core in $(DESTDIR)$(BINDIR), its
# mount helper mount.fuse.agentfs (a link to agentfs-core, which is the
# helper when called by that name) in $(DESTDIR)$(SBINDIR), where mount(8) looks for helpers
# (/sbin only, whatever PREFIX is), and the shell completion scripts
# where bash, zsh and fish find them.
PREFIX  ?= /usr/local
BINDIR  ?= $(PREFIX)/bin
SBINDIR ?= /sbin
DATADIR ?= $(PREFIX)/share

.PHONY: all build generate test unit lint integration demo deps bench bench-deps baseline clean install uninstall

all: build

# The binaries are linked statically (CGO_ENABLED=0: os/user and net in
# pure Go): the dynamic loader alone took 0.8 ms of every command's
# start (agentfs-bench --only cli-start).
build:
	CGO_ENABLED=0 $(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/agentfs
	CGO_ENABLED=0 $(GO) build -ldflags "$(LDFLAGS)" -o $(CORE) ./cmd/agentfs-core

# deps installs what the tests and the demo need, when it is missing and
# we are root (Debian/Ubuntu), and the S3 server of the remote tests.
deps: $(VERSITYGW)
	@missing=""; \
	command -v fusermount3 >/dev/null || missing="$$missing fuse3"; \
	command -v setfattr >/dev/null || missing="$$missing attr"; \
	command -v mkfs.xfs >/dev/null || missing="$$missing xfsprogs"; \
	command -v mkfs.ext4 >/dev/null || missing="$$missing e2fsprogs"; \
	command -v git >/dev/null || missing="$$missing git"; \
	command -v dpkg-deb >/dev/null || missing="$$missing dpkg"; \
	command -v setpriv >/dev/null || missing="$$missing util-linux"; \
	command -v gcc >/dev/null || missing="$$missing gcc"; \
	command -v zsh >/dev/null || missing="$$missing zsh"; \
	command -v fish >/dev/null || missing="$$missing fish"; \
	command -v node >/dev/null || missing="$$missing nodejs"; \
	command -v npm >/dev/null || missing="$$missing npm"; \
	[ -e /usr/share/bash-completion/bash_completion ] || missing="$$missing bash-completion"; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			echo "installing:$$missing"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
		else \
			echo "note: missing$$missing (install them for the full test suite)"; \
		fi; \
	fi
	@if [ "$$(id -u)" = 0 ] && [ ! -e /dev/fuse ]; then modprobe fuse 2>/dev/null || true; fi
	@# DuckDB (its npm package), the independent Parquet reader of the
	@# record tests (integration/record_test.go).
	@if [ ! -d integration/duckdb/node_modules/@duckdb/node-api ]; then \
		if command -v npm >/dev/null; then \
			echo "installing: @duckdb/node-api (integration/duckdb)"; \
			(cd integration/duckdb && npm install --no-audit --no-fund --no-package-lock --silent) || echo "note: could not install @duckdb/node-api: the record tests need it"; \
		else \
			echo "note: npm is missing: the record tests need @duckdb/node-api (cd integration/duckdb && npm install)"; \
		fi; \
	fi

# test prints go test's summary: one "ok" (or "FAIL") line per package.
# The first pass runs every test at full strength; the repeats (race
# detector, the other two FUSE transports) run all of them again with
# -short, which scales down the randomized and load tests' rounds.
test: deps build lint
	@echo "go test (AGENTFS_REQUIRE_FUSE=$${AGENTFS_REQUIRE_FUSE:-0})"
	AGENTFS_BIN=$(CURDIR)/$(BIN) $(GO) test -p 1 -count=1 $(GOTESTFLAGS) ./...
	@echo "the other packages again, with the race detector (-short)"
	AGENTFS_BIN=$(CURDIR)/$(BIN) $(GO) test -race -short -p 1 -count=1 $(GOTESTFLAGS) $$($(GO) list ./... | grep -v /integration)
	@echo "integration tests again, without FUSE passthrough (page cache; -short)"
	AGENTFS_TEST_NO_PASSTHROUGH=1 AGENTFS_BIN=$(CURDIR)/$(BIN) $(GO) test -short -p 1 -count=1 $(GOTESTFLAGS) ./integration/...
	@echo "integration tests again, with FUSE requests over /dev/fuse instead of io_uring (-short)"
	AGENTFS_TEST_NO_IO_URING=1 AGENTFS_BIN=$(CURDIR)/$(BIN) $(GO) test -short -p 1 -count=1 $(GOTESTFLAGS) ./integration/...

# lint checks that go.mod and go.sum are tidy, then runs go vet and the
# pinned golangci-lint (.golangci.yml says which linters and why).
lint: $(GOLANGCI_LINT)
	$(GO) mod tidy -diff
	$(GO) vet ./...
	$(GOLANGCI_LINT) run ./...

$(GOLANGCI_LINT):
	GOBIN=$(CURDIR)/bin/tools $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	mv bin/tools/golangci-lint $@

$(VERSITYGW):
	GOBIN=$(CURDIR)/bin/tools $(GO) install github.com/versity/versitygw/cmd/versitygw@$(VERSITYGW_VERSION)
	mv bin/tools/versitygw $@

# generate rebuilds the exec trace's BPF object (exectrace/exectrace_bpfel.*,
# committed) from exectrace/bpf/exectrace.bpf.c: it needs clang, bpftool
# and libbpf-dev, and the running kernel's BTF for vmlinux.h.
generate:
	bpftool btf dump file /sys/kernel/btf/vmlinux format c > exectrace/bpf/vmlinux.h
	cd exectrace && $(GO) generate .

# unit runs the tests of the library packages, which need neither FUSE
# nor root.
unit: $(VERSITYGW)
	$(GO) test -p 1 -count=1 ./internal/testenv ./internal/s3test ./remote ./overlay ./branch ./backstore ./ctl ./workspace ./daemon ./session ./config ./hostpath ./procfs ./procgroup ./activity ./autosnap ./record ./tournament ./mcpserver ./kernelinfo ./cli ./cmd/agentfs ./cmd/agentfs-core

integration: deps build
	AGENTFS_BIN=$(CURDIR)/$(BIN) $(GO) test -p 1 -count=1 $(GOTESTFLAGS) ./integration/...

demo: deps build
	@bash demo/demo.sh $(CURDIR)/$(BIN)

# bench runs every workload on native, overlayfs, fuse-overlayfs and
# agentfs and writes bench/results.{md,json,png} (see bench/README.md).
bench: build bench-deps
	$(GO) build -o bin/agentfs-bench ./cmd/agentfs-bench
	@if [ -n "$(BASELINE)" ]; then $(MAKE) --no-print-directory baseline; fi
	bin/agentfs-bench --agentfs $(BIN) $(if $(BASELINE),--baseline $(BASELINE_BIN)) $(BENCHFLAGS)

# baseline builds the commit BASELINE names (make bench BASELINE=HEAD~,
# BASELINE=main, BASELINE=v0.3) into $(BASELINE_BIN) (and its
# agentfs-core beside it, for a commit that has one), from a temporary
# git worktree removed afterwards, as make build builds: make bench
# then passes it as --baseline, and the first table, the snapshot table
# and the CLI's start show it beside this build, in the same run.
baseline:
	@test -n "$(BASELINE)" || { echo "make baseline: set BASELINE=REV, the commit to compare with (e.g. BASELINE=HEAD~)"; exit 2; }
	@rev=$$(git rev-parse --verify -q "$(BASELINE)^{commit}") || { echo "BASELINE=$(BASELINE): no such commit here (git log shows them; a shallow clone may lack it: git fetch --unshallow)"; exit 2; }; \
	tmp=$$(mktemp -d); \
	trap 'git worktree remove --force "$$tmp/src" >/dev/null 2>&1; rm -rf "$$tmp"; git worktree prune' EXIT; \
	git worktree add -q --detach "$$tmp/src" $$rev && \
	flags="-X main.version=$$(git describe --always $$rev) -X main.commit=$$rev -X github.com/agentfs/agentfs/cli.Version=$$(git describe --always $$rev) -X github.com/agentfs/agentfs/cli.commit=$$rev"; \
	mkdir -p "$(CURDIR)/$(dir $(BASELINE_BIN))" && rm -f "$(CURDIR)/$(BASELINE_BIN)" "$(CURDIR)/$(dir $(BASELINE_BIN))agentfs-core" && \
	(cd "$$tmp/src" && CGO_ENABLED=0 $(GO) build -ldflags "$$flags" -o "$(CURDIR)/$(BASELINE_BIN)" ./cmd/agentfs && \
		if [ -d cmd/agentfs-core ]; then CGO_ENABLED=0 $(GO) build -ldflags "$$flags" -o "$(CURDIR)/$(dir $(BASELINE_BIN))agentfs-core" ./cmd/agentfs-core; fi) && \
	echo "$(BASELINE_BIN): $(BASELINE) ($$rev)"

# bench-deps installs fuse-overlayfs when it is missing and we are root
# (without it the benchmark leaves that column out), python3 (the system
# table's python3 row) likewise, and the S3 server of the remote row.
bench-deps: $(VERSITYGW)
	@if ! command -v python3 >/dev/null; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			echo "installing: python3-minimal"; \
			(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-minimal >/dev/null) \
				|| echo "note: could not install python3; the benchmark leaves its row out"; \
		else \
			echo "note: python3 is missing (apt-get install python3-minimal); the benchmark leaves its row out"; \
		fi; \
	fi
	@if ! command -v fuse-overlayfs >/dev/null; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			echo "installing: fuse-overlayfs"; \
			(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fuse-overlayfs >/dev/null) \
				|| echo "note: could not install fuse-overlayfs; the benchmark leaves it out"; \
		else \
			echo "note: fuse-overlayfs is missing (apt-get install fuse-overlayfs); the benchmark leaves it out"; \
		fi; \
	fi

install: build
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(SBINDIR)
	install -m 0755 $(BIN) $(DESTDIR)$(BINDIR)/agentfs
	install -m 0755 $(CORE) $(DESTDIR)$(BINDIR)/agentfs-core
	ln -sf $(BINDIR)/agentfs-core $(DESTDIR)$(SBINDIR)/mount.fuse.agentfs
	install -d $(DESTDIR)$(DATADIR)/bash-completion/completions $(DESTDIR)$(DATADIR)/zsh/site-functions $(DESTDIR)$(DATADIR)/fish/vendor_completions.d
	$(BIN) completion bash > $(DESTDIR)$(DATADIR)/bash-completion/completions/agentfs
	$(BIN) completion zsh > $(DESTDIR)$(DATADIR)/zsh/site-functions/_agentfs
	$(BIN) completion fish > $(DESTDIR)$(DATADIR)/fish/vendor_completions.d/agentfs.fish
	@echo "installed $(DESTDIR)$(BINDIR)/agentfs, $(DESTDIR)$(BINDIR)/agentfs-core and $(DESTDIR)$(SBINDIR)/mount.fuse.agentfs (help: agentfs help mount, mount.fuse.agentfs --help)"

uninstall:
	rm -f $(DESTDIR)$(BINDIR)/agentfs $(DESTDIR)$(BINDIR)/agentfs-core $(DESTDIR)$(SBINDIR)/mount.fuse.agentfs
	rm -f $(DESTDIR)$(DATADIR)/bash-completion/completions/agentfs $(DESTDIR)$(DATADIR)/zsh/site-functions/_agentfs $(DESTDIR)$(DATADIR)/fish/vendor_completions.d/agentfs.fish

clean:
	rm -rf bin
