# dlock's build and test entry points. `make test` is what CI runs.
GO ?= go

.PHONY: test deps check bench-check bench bench-pair gobench demo timeline-png sim dist apicheck

# The repository's modules (go.work joins them): the library, the dlock
# command, the console, the Prometheus and OpenTelemetry adapters and the SQL tests (internal/sqltest, with
# the database drivers). bench/ is a module apart, with a go.work of its
# own.
PACKAGES = ./... ./cmd/dlock/... ./console/... ./prometheus/... ./dlockotel/... ./internal/sqltest/...

# test installs what the tests need, checks formatting and vet of every
# module, and runs every test of every module with the race detector; beside
# them (they wait on servers far more than they work: the machine is mostly
# idle), the short fault-injection run, which fails if any stale write is
# accepted or a fence regresses; then the console's browser tests on their
# own, the allocation counts, and the simulator.
test: deps check bench-check apicheck
	$(GO) build -o .dlock-torture ./cmd/dlock
	./.dlock-torture torture --quick > .torture.out 2>&1 & torture=$$!; \
	DLOCK_REQUIRE_DATABASES=1 DLOCK_REQUIRE_SHELLS=1 $(GO) test -race -count=1 -timeout 8m -parallel 8 -skip '^TestBrowser' $(PACKAGES); status=$$?; \
	wait $$torture; tstatus=$$?; cat .torture.out; rm -f .dlock-torture .torture.out; \
	[ $$status -eq 0 ] && [ $$tstatus -eq 0 ]  # -parallel: the tests marked parallel wait more than they work
	DLOCK_REQUIRE_BROWSER=1 $(GO) test -race -count=1 -timeout 2m -run '^TestBrowser' ./cmd/dlock/  # alone: Chromium's CPU would stall the timing-sensitive tests beside it
	$(GO) test -count=1 -run 'Allocate|GiveUpFaster' .  # allocation counts, and callers at full speed: without the race detector, which allocates and slows
	./tools/dist_test.sh > .dist_test.out 2>&1 & dist=$$!; GO="$(GO)" ./tools/apicheck_test.sh > .apicheck_test.out 2>&1 & api=$$!; \
	$(GO) test -count=1 -timeout 5m ./sim/... -seeds 300; status=$$?; \
	wait $$dist; dstatus=$$?; wait $$api; astatus=$$?; cat .dist_test.out .apicheck_test.out; rm -f .dist_test.out .apicheck_test.out; \
	[ $$status -eq 0 ] && [ $$dstatus -eq 0 ] && [ $$astatus -eq 0 ]  # the simulator (issue 59: 300 mutex seeds, 100 of each shared kind and 100 of Redlock's listening wait, about 75 s here, and the defects it must find; make sim for more), and beside it, as its clock is simulated, make dist for linux/amd64 twice (the same checksums; the package's contents and binary) and apicheck's self-test

# deps installs what the tests need when it is missing: redis-server, a C
# compiler (the race detector needs cgo), and the PostgreSQL and MariaDB
# servers the SQL guard's tests start (they run as their own processes on
# loopback; the packages' own services are not used), from Debian's
# packages, Debian's chromium for the console's browser tests, and zsh and fish
# for the completion tests (bash is there); then it checks that redis-server is new enough (the README's
# minimum, 6.2) and fails early, with a clear message, when it is not.
deps:
	@missing=""; \
	command -v redis-server >/dev/null 2>&1 || missing="$$missing redis-server"; \
	command -v gcc >/dev/null 2>&1 || missing="$$missing gcc libc6-dev"; \
	{ command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; } || missing="$$missing postgresql"; \
	{ command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ]; } || missing="$$missing mariadb-server"; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	command -v zsh >/dev/null 2>&1 || missing="$$missing zsh"; \
	command -v fish >/dev/null 2>&1 || missing="$$missing fish"; \
	if [ -n "$$missing" ]; then \
		echo "installing with apt-get:$$missing"; \
		SUDO=$$( [ "$$(id -u)" -eq 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $$missing; \
	fi
	@v=$$($${REDIS_SERVER:-redis-server} --version | sed -n 's/.* v=\([0-9][0-9.]*\).*/\1/p'); \
	major=$${v%%.*}; minor=$$(echo $$v | cut -d. -f2); \
	if [ -z "$$v" ] || [ "$$major" -lt 6 ] || { [ "$$major" -eq 6 ] && [ "$$minor" -lt 2 ]; }; then \
		echo "redis-server $$v is too old: dlock needs Redis 6.2 or later (7.0 for a cluster's sharded pub/sub)."; \
		echo "Install a newer one (e.g. Debian 12's, or redis.io's packages) or set REDIS_SERVER to its path."; \
		exit 1; \
	fi; \
	echo "redis-server $$v, $$(gcc --version | head -1)"

# check is gofmt of every Go file and vet of the library, the command, the
# adapter and their tests; bench-check vets the bench/ module (which pulls
# in the peers' modules) and builds docs/migrating.md's programs there.
check:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet $(PACKAGES) ./sim/...

bench-check:
	cd bench && $(GO) vet ./... && $(GO) test -count=1 -run 'TestTheMigrationGuidesProgramsBuild|TestTheREADMETable' .  # the migration guide's programs, the peers' too

# bench compares dlock with its peers (the separate bench/ module, which
# starts its own redis-servers) and rewrites BENCHMARKS.md, its chart and
# the README's table, each with the date and commit it measured.
# gobench runs dlock's own Go benchmarks (against the raw floor).
bench: deps bench-check
	cd bench && $(GO) run . -out ../BENCHMARKS.md -readme ../README.md

# bench-pair runs the bench with a second dlock beside this tree's: the
# commit BASE, renamed to the module github.com/dlock-go/dlockbase in a
# temporary copy, as "dlock (base)" in every scenario, interleaved with the
# others on the same servers. ONLY picks scenarios (bench's -only), LIBS
# libraries by name prefix, comma-separated (bench's -libs; LIBS=dlock runs
# the two dlocks alone), ROUNDS the interleaved rounds; with ONLY or LIBS the
# report is only printed, else it goes to PAIR_OUT, never to BENCHMARKS.md.
BASE ?= HEAD
ONLY ?=
LIBS ?=
ROUNDS ?= 3
PAIR_OUT ?= $(CURDIR)/.bench-pair/BENCHMARKS.md
bench-pair: deps bench-check
	@base=$$(mktemp -d); trap 'rm -rf $$base' EXIT; \
	git archive $(BASE) | tar -x -C $$base && \
	find $$base -name '*.go' -o -name go.mod | xargs sed -i 's#github.com/dlock-go/dlock\b#github.com/dlock-go/dlockbase#g' && \
	printf 'go 1.26.0\n\nuse (\n\t%s\n\t%s\n)\n' $(CURDIR)/bench $$base > $$base/pair.work && \
	mkdir -p $(dir $(PAIR_OUT)) && \
	cd bench && GOWORK=$$base/pair.work $(GO) run -tags dlockbase . -out $(PAIR_OUT) $(if $(ROUNDS),-rounds $(ROUNDS)) $(if $(ONLY),-only "$(ONLY)") $(if $(LIBS),-libs "$(LIBS)")

gobench: deps
	$(GO) test -run '^$$' -bench . -benchtime 2s -count 1 .

# sim runs the wait protocol's deterministic simulator (sim/, issue 59) over
# SEEDS seeds, a third as many of each shared kind and of Redlock's
# listening wait; a failing seed prints the command that replays it with
# its event log (-seed S -v, or -redlock-seed S -v).
SEEDS ?= 1000
sim:
	$(GO) test -count=1 -timeout 60m -run 'TestSeeds$$|TestSeedsOfSharedHolds|TestRedlockSeeds$$' -v ./sim/ -seeds $(SEEDS)

# demo reproduces the Redis guidance's experiments (embedded Redis; no setup).
demo:
	$(GO) run ./cmd/dlock demo

# timeline-png renders a torture timeline as a person sees it: a short
# client-pause run with --report, the SVG drawn by headless Chromium
# (Debian's chromium, installed when missing) into a PNG, and a test that
# the picture shows the hold bars and the fault's band.
TIMELINE_DIR ?= .timeline
timeline-png: deps
	@command -v chromium >/dev/null 2>&1 || { \
		SUDO=$$( [ "$$(id -u)" -eq 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends chromium; }
	$(GO) run ./cmd/dlock torture --quick --scenario client-pause --report $(TIMELINE_DIR)
	profile=$$(mktemp -d); chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
		--disable-background-networking --disable-component-update --disable-sync --user-data-dir=$$profile \
		--hide-scrollbars --window-size=1110,180 --screenshot=$(CURDIR)/$(TIMELINE_DIR)/client-pause-single.png \
		file://$(CURDIR)/$(TIMELINE_DIR)/client-pause-single.svg; status=$$?; rm -rf $$profile; exit $$status
	DLOCK_TIMELINE_PNG=$(CURDIR)/$(TIMELINE_DIR)/client-pause-single.png $(GO) test -count=1 -run TestTheRenderedTimelineShowsBarsAndTheFault -v ./internal/torture/

# dist builds the release: the command for linux and darwin on amd64 and
# arm64 and for windows on amd64 (CGO off, -trimpath, no build ID, the
# version stamped: git describe), a Debian package of each linux build
# (nFPM, from tools/: the binary, the manual page made by the binary
# itself, and its bash, zsh and fish completions), and SHA256SUMS. Every
# file's time is the commit's, so two builds of one commit are the same
# bytes (docs/versioning.md).
VERSION ?= $(shell git describe --tags --match 'v[0-9]*' --dirty 2>/dev/null || echo v0.0.0-$$(git rev-parse --short HEAD)$$(git diff --quiet HEAD || echo -dirty))
# The Debian version: after a tag, v0.1.0-3-gabc1234 sorts above 0.1.0 as
# 0.1.0+3.gabc1234 (a hyphen would make it a pre-release, below it).
DEB_VERSION = $(shell echo $(VERSION) | sed 's/^v//; s/-\([0-9]*\)-g/+\1.g/; s/-dirty$$/+dirty/; s/^\(0\.0\.0\)-/\1+/')
# The commit and its date, stamped too: a build in a git worktree (whose .git
# is a file) has no VCS information from Go.
COMMIT = $(shell git rev-parse HEAD)
COMMIT_DATE = $(shell TZ=UTC git log -1 --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ)
DIST ?= dist
PLATFORMS = linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64
DIST_FLAGS = -trimpath -buildvcs=true -ldflags "-s -w -buildid= -X main.version=$(VERSION) -X main.commit=$(COMMIT) -X main.date=$(COMMIT_DATE)"
dist:
	rm -rf $(DIST) && mkdir -p $(DIST)/.pkg
	@set -e; for p in $(PLATFORMS); do \
		os=$${p%/*}; arch=$${p#*/}; ext=; [ $$os = windows ] && ext=.exe; \
		echo "build $(DIST)/dlock_$(VERSION)_$${os}_$$arch$$ext"; \
		CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build $(DIST_FLAGS) -o $(DIST)/dlock_$(VERSION)_$${os}_$$arch$$ext ./cmd/dlock; \
	done
	CGO_ENABLED=0 $(GO) build $(DIST_FLAGS) -o $(DIST)/.pkg/dlock ./cmd/dlock
	$(DIST)/.pkg/dlock manpage | gzip -9n > $(DIST)/.pkg/dlock.1.gz
	for sh in bash zsh fish; do $(DIST)/.pkg/dlock completion $$sh > $(DIST)/.pkg/dlock.$$sh; done
	cp LICENSE $(DIST)/.pkg/copyright
	@set -e; epoch=$$(git log -1 --format=%ct); for p in $(filter linux/%,$(PLATFORMS)); do arch=$${p#*/}; \
		cp $(DIST)/dlock_$(VERSION)_linux_$$arch $(DIST)/.pkg/dlock-linux-$$arch; \
		echo "package $(DIST)/dlock_$(VERSION)_$$arch.deb"; \
		GOWORK=off VERSION=$(DEB_VERSION) ARCH=$$arch PKG=$(abspath $(DIST))/.pkg SOURCE_DATE_EPOCH=$$epoch \
			$(GO) -C tools tool nfpm package --config $(CURDIR)/packaging/nfpm.yaml --packager deb \
			--target $(abspath $(DIST))/dlock_$(VERSION)_$$arch.deb > /dev/null; \
	done
	rm -rf $(DIST)/.pkg
	cd $(DIST) && sha256sum dlock_* > SHA256SUMS && cat SHA256SUMS

# apicheck compares every module's exported API (the library, the console
# and the two adapters) with the last release's: its tag, else the commit
# its CHANGELOG section names (tools/apicheck.sh, golang.org/x/exp's
# apidiff from tools/). It fails on an incompatible change that
# CHANGELOG.md's Unreleased section does not name under Breaking.
# tools/apicheck_test.sh (make test runs it) shows it failing on an
# exported function removed in a copy of the tree, and passing once the
# CHANGELOG lists it.
apicheck:
	GO="$(GO)" ./tools/apicheck.sh
