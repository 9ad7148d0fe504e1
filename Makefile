# dlock's build and test entry points. `make test` is what CI runs.
GO ?= go

.PHONY: test deps check bench gobench demo

# test installs what the tests need, checks formatting and vet, runs every
# test with the race detector, then the short fault-injection run, which
# fails if any stale write is accepted or a fence regresses.
test: deps check
	$(GO) test -race -count=1 -timeout 8m ./...
	$(GO) build -o .dlock-torture ./cmd/dlock && ./.dlock-torture torture --quick; status=$$?; rm -f .dlock-torture; exit $$status

# deps installs redis-server (Debian package) when it is not on PATH.
deps:
	@command -v redis-server >/dev/null 2>&1 || { \
		echo "redis-server not found: installing it with apt-get"; \
		SUDO=$$( [ "$$(id -u)" -eq 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends redis-server; \
	}
	@redis-server --version

check:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	cd bench && $(GO) vet ./...

# bench compares dlock with its peers (the separate bench/ module, which
# starts its own redis-servers) and rewrites BENCHMARKS.md and its chart.
# gobench runs dlock's own Go benchmarks (against the raw floor).
bench: deps
	cd bench && $(GO) run . -out ../BENCHMARKS.md

gobench: deps
	$(GO) test -run '^$$' -bench . -benchtime 2s -count 1 .

# demo reproduces the Redis guidance's experiments (embedded Redis; no setup).
demo:
	$(GO) run ./cmd/dlock demo
