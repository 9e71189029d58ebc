# latchkey — common tasks. `make test` needs no server: tests that need a
# real Redis/PostgreSQL/MariaDB skip with a reason. `make ci` is what CI
# runs: the same tests with LATCHKEY_REQUIRE_SERVERS=1 (a missing server
# fails), vet, a gofmt check and a short benchmark smoke run.

GO        ?= go
# Every module of the repository (see README, "Modules"): the root holds core,
# cronlock and httpidem; heavy adapters have modules of their own so that a
# program importing core does not see their dependencies, and so do tests
# that need SQL drivers (httpidem/sqltest) or a browser driver
# (admin/browsertest), and each backend under backends/.
MODULES   := . ./backends/sqllock ./backends/etcdlock ./backends/zklock ./backends/memcachelock ./backends/adaptertest ./dbguard ./echomw ./grpcmw ./temporallock ./otel ./examples ./bench ./httpidem/sqltest ./admin/browsertest
PKGS      := ./...
TESTFLAGS ?= -race -count=1 -timeout 15m

.PHONY: all demo test test-zk-belief ci browser servers soak fuzz test-temporal vet fmt-check readme-check lean-check lint bench bench-smoke bench-report tidy

all: vet test

## demo: run the examples on embedded defaults (miniredis, SQLite); the
## admin page example serves until interrupted, so it gets -for 5s here
demo:
	@for d in $$(cd examples && ls -d */ | grep -v '^internal/'); do \
		args=; [ "$$d" = admin/ ] && args="-for 5s"; \
		echo "==> examples/$$d $$args"; (cd examples && $(GO) run ./$$d $$args) || exit 1; echo; \
	done

## test: all tests under the race detector (-short: the fault-injection
## suite is left to `make ci`); server tests skip when a server is absent
test:
	@for m in $(MODULES); do (cd $$m && echo "==> go test $$m" && $(GO) test -short $(TESTFLAGS) $(PKGS)) || exit 1; done

## ci: vet, gofmt, every test (fault injection included) with every server
## required, benchmark smoke run
ci: vet fmt-check readme-check lean-check servers
	@for m in $(MODULES); do (cd $$m && echo "==> go test $$m (servers required)" && \
		LATCHKEY_REQUIRE_SERVERS=1 $(GO) test $(TESTFLAGS) $(PKGS)) || exit 1; done
	$(MAKE) test-zk-belief
	$(MAKE) test-temporal
	$(MAKE) bench-smoke

## servers: what the tests start on their own and a fresh machine lacks,
## installed from Debian's packages with one apt-get run, only what is
## missing: Chromium for the admin page's browser test, etcd-server,
## zookeeper and memcached for the backends' tests. `make test` without
## them skips those tests, saying why.
servers:
	@missing=; \
	command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
		command -v google-chrome >/dev/null 2>&1 || [ -n "$$LATCHKEY_CHROMIUM" ] || missing="$$missing chromium"; \
	command -v etcd >/dev/null 2>&1 || missing="$$missing etcd-server"; \
	[ -e /usr/share/java/zookeeper.jar ] || [ -n "$$ZOOKEEPER_CLASSPATH" ] || missing="$$missing zookeeper"; \
	command -v memcached >/dev/null 2>&1 || missing="$$missing memcached"; \
	[ -z "$$missing" ] && exit 0; \
	sudo=; [ "$$(id -u)" = 0 ] || sudo=sudo; \
	echo "==> installing$$missing (apt-get)"; \
	$$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq $$missing >/dev/null

## browser: only Chromium (see servers)
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
		command -v google-chrome >/dev/null 2>&1 || [ -n "$$LATCHKEY_CHROMIUM" ] || \
		{ sudo=; [ "$$(id -u)" = 0 ] || sudo=sudo; $$sudo apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq chromium >/dev/null; }

## soak: the belief checkers for minutes per run instead of make ci's
## seconds: core's on Redis (core/belief_test.go), and each backend's
## (core/locktest/belief, with that backend's faults); LATCHKEY_SEED=<n>
## replays a printed seed
SOAK ?= 3m
BELIEF_MODULES := ./backends/sqllock ./backends/etcdlock ./backends/zklock ./backends/memcachelock
soak:
	LATCHKEY_REQUIRE_SERVERS=1 LATCHKEY_BELIEF_DURATION=$(SOAK) $(GO) test -race -count=1 -timeout 60m -run 'TestBelief' -v ./core
	@for m in $(BELIEF_MODULES); do race=-race; [ $$m = ./backends/zklock ] && race=; \
		(cd $$m && echo "==> belief soak $$m $$race" && \
		LATCHKEY_REQUIRE_SERVERS=1 LATCHKEY_BELIEF_DURATION=$(SOAK) $(GO) test $$race -count=1 -timeout 60m -run 'TestBelief' -v .) || exit 1; done

## test-zk-belief: zklock's belief checker without -race: its faults make
## go-zookeeper v1.0.4 race on its own state when a session reconnects with
## watches set (backends/zklock/belief_race_test.go)
test-zk-belief:
	cd backends/zklock && LATCHKEY_REQUIRE_SERVERS=1 $(GO) test -count=1 -timeout 10m -run '^TestBelief$$' .

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
	@for m in $(MODULES); do (cd $$m && echo "==> staticcheck $$m" && $(GO) run $(STATICCHECK) ./...) || exit 1; done

## bench: core micro-benchmarks, then the peer matrix (BENCH_MATRIX sizes,
## BENCH_ROUNDS rounds) on private redis-servers: 5, for the Redlock rows;
## needs redis-server. Its report ends with one verdict line per target:
## MET, NOT MET or NOT MEASURED, the figure and the bar
BENCH_DRIVERS ?= raw,redislock,redsync,latchkey,redsync5,latchkey-redlock5
BENCH_MATRIX  ?= full
BENCH_ROUNDS  ?= 3
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./core
	cd bench && $(GO) run . -matrix $(BENCH_MATRIX) -rounds $(BENCH_ROUNDS) -spawn 1 -drivers $(BENCH_DRIVERS)

## bench-report: the SVG charts in bench/results/ again, from the saved runs
## that bench/README.md shows (BENCH_RESULTS); no server needed
BENCH_RESULTS ?= results/final-20261128b.jsonl results/final-20261128.jsonl results/final-20261122.jsonl results/redlock-20261122.jsonl \
	results/primitives-20261125-after.jsonl results/backends-20261126.jsonl \
	results/scale-20261128.jsonl
bench-report:
	cd bench && $(GO) run ./cmd/charts $(BENCH_RESULTS)

## bench-smoke: every benchmark once, briefly, so they keep compiling and running
bench-smoke:
	@for m in $(MODULES); do (cd $$m && $(GO) test -run '^$$' -bench . -benchtime 100x -benchmem ./...) || exit 1; done

## lean-check: a program that imports only core sees go-redis's own module
## graph plus at most LEAN_EXTRA small modules (latchkey included) in
## `go list -m all`, and never an adapter's dependencies
LEAN_EXTRA ?= 6
lean-check:
	@rm -rf .lean-check && mkdir -p .lean-check/core .lean-check/redis && \
	printf 'module leancheck\n\ngo 1.26.0\n\nrequire github.com/latchkey/latchkey v0.2.0\n\nreplace github.com/latchkey/latchkey => ../../\n' > .lean-check/core/go.mod && \
	printf 'package main\n\nimport _ "github.com/latchkey/latchkey/core"\n\nfunc main() {}\n' > .lean-check/core/main.go && \
	printf 'module leanbase\n\ngo 1.26.0\n\nrequire github.com/redis/go-redis/v9 %s\n' $$($(GO) list -m -f '{{.Version}}' github.com/redis/go-redis/v9) > .lean-check/redis/go.mod && \
	printf 'package main\n\nimport _ "github.com/redis/go-redis/v9"\n\nfunc main() {}\n' > .lean-check/redis/main.go && \
	(cd .lean-check/core && $(GO) mod tidy && $(GO) build -o /dev/null . && $(GO) list -m all | tail -n +2 | cut -d' ' -f1 | sort > ../core.txt) && \
	(cd .lean-check/redis && $(GO) mod tidy && $(GO) list -m all | tail -n +2 | cut -d' ' -f1 | sort > ../redis.txt) && \
	extra=$$(comm -23 .lean-check/core.txt .lean-check/redis.txt) && n=$$(echo "$$extra" | wc -l) && \
	echo "a core-only program: $$(wc -l < .lean-check/core.txt) modules; go-redis alone: $$(wc -l < .lean-check/redis.txt); beyond go-redis's ($$n):" && \
	echo "$$extra" | sed 's/^/  /' && \
	if echo "$$extra" | grep -Eq 'temporal|labstack|opentelemetry|sqlite|pgx|mysql|toxiproxy|grpc|etcd|zookeeper|gomemcache'; then echo "lean-check: an adapter's dependency leaked into the root module"; exit 1; fi && \
	if [ $$n -gt $(LEAN_EXTRA) ]; then echo "lean-check: $$n modules beyond go-redis's, over $(LEAN_EXTRA)"; exit 1; fi && \
	rm -rf .lean-check

tidy:
	@for m in $(MODULES) ./temporallock/integration; do (cd $$m && $(GO) mod tidy -e) || exit 1; done
