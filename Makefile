# latchkey — common tasks. `make test` needs no server: tests that need a
# real Redis/PostgreSQL/MariaDB skip with a reason. `make ci` is what CI
# runs: the same tests with LATCHKEY_REQUIRE_SERVERS=1 (a missing server
# fails), vet, a gofmt check and a short benchmark smoke run.

GO        ?= go
MODULES   := . ./bench
PKGS      := ./...
TESTFLAGS ?= -race -count=1 -timeout 15m

.PHONY: all demo test ci soak fuzz test-temporal vet fmt-check readme-check lint bench bench-smoke tidy

all: vet test

## demo: run the examples on embedded defaults (miniredis, SQLite)
demo:
	@for d in $$(ls -d examples/*/); do \
		echo "==> $$d"; $(GO) run ./$$d || exit 1; echo; \
	done

## test: all tests under the race detector (-short: the fault-injection
## suite is left to `make ci`); server tests skip when a server is absent
test:
	@for m in $(MODULES); do (cd $$m && echo "==> go test $$m" && $(GO) test -short $(TESTFLAGS) $(PKGS)) || exit 1; done

## ci: vet, gofmt, every test (fault injection included) with every server
## required, benchmark smoke run
ci: vet fmt-check readme-check
	@for m in $(MODULES); do (cd $$m && echo "==> go test $$m (servers required)" && \
		LATCHKEY_REQUIRE_SERVERS=1 $(GO) test $(TESTFLAGS) $(PKGS)) || exit 1; done
	$(MAKE) test-temporal
	$(MAKE) bench-smoke

## soak: the belief checker (core/belief_test.go) for minutes per topology
## instead of make ci's 10 s; LATCHKEY_SEED=<n> replays a printed seed
SOAK ?= 3m
soak:
	LATCHKEY_REQUIRE_SERVERS=1 LATCHKEY_BELIEF_DURATION=$(SOAK) $(GO) test -race -count=1 -timeout 60m -run 'TestBelief' -v ./core

## fuzz: each fuzz target for FUZZTIME (the seed corpora run in every go test)
FUZZTIME ?= 60s
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzKeyNames$$' -fuzztime $(FUZZTIME) ./core
	$(GO) test -run '^$$' -fuzz '^FuzzParseKey$$' -fuzztime $(FUZZTIME) ./httpidem

## test-temporal: temporallock against a real Temporal server run in-process
## (its own module: the server is a large dependency tree; no -race, whose
## build of that tree alone takes minutes on two cores)
test-temporal:
	cd temporallock/integration && $(GO) vet . && LATCHKEY_REQUIRE_SERVERS=1 $(GO) test -count=1 -timeout 10m .

vet:
	@for m in $(MODULES); do (cd $$m && $(GO) build $(PKGS) && $(GO) vet $(PKGS)) || exit 1; done

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

## readme-check: the README quick start (its first go block) compiles
readme-check:
	@rm -rf .readme-check && mkdir -p .readme-check && \
	awk '/^```go$$/{f=1;next} /^```$$/{if(f)exit} f' README.md > .readme-check/main.go && \
	$(GO) build -o /dev/null ./.readme-check && rm -rf .readme-check && echo "README quick start compiles"

## lint: vet, gofmt and staticcheck (pinned; fetched through the module proxy)
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
lint: vet fmt-check
	$(GO) run $(STATICCHECK) ./...

## bench: core micro-benchmarks and the peer comparison (needs Redis)
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./core
	cd bench && $(GO) run . -matrix -rounds 3

## bench-smoke: every benchmark once, briefly, so they keep compiling and running
bench-smoke:
	$(GO) test -run '^$$' -bench . -benchtime 100x -benchmem ./...
	cd bench && $(GO) test -run '^$$' -bench . -benchtime 100x ./...

tidy:
	@for m in $(MODULES) ./temporallock/integration; do (cd $$m && $(GO) mod tidy -e) || exit 1; done
