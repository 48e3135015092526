# The two commands a newcomer needs: `make run` (the daemon on embedded defaults) and `make test` (all tests).
GO        ?= go
PEERS_DIR := testdata/peers
PEERS     := $(PEERS_DIR)/node_modules/.installed
PKGS      := ./cmd/aggregator ./actors ./http/mcpserver ./...
FUZZTIME  ?= 30s
BENCHTIME ?= 1x

.PHONY: run build test bench compare lint fuzz proto peers pg promtool etcd haproxy chromium jaeger ui-vendor clean

## run: start the daemon on :8081 with the embedded store in ./data
run:
	$(GO) run ./cmd/aggregator serve

## build: compile bin/aggregator
build:
	$(GO) build -o bin/aggregator ./cmd/aggregator

## test: every test, with the race detector, against real MCP peers and PostgreSQL. Three test binaries at once
## (TEST_P): the longest packages spend much of their time waiting on daemons, clusters and timers, and two at once
## left a 2-core machine about half idle (README, "Tests"). A package's own limit is 25 minutes: the longest,
## cmd/aggregator, took about 10 before its long daemon tests overlapped (t.Parallel; about 6 since). The three longest
## packages come first in PKGS: `go test` builds and starts packages in the order given, so the critical path starts
## first instead of after the short packages.
TEST_P    ?= 3
test: $(PEERS) pg promtool etcd haproxy chromium jaeger
	$(GO) test -race -count=1 -p $(TEST_P) -timeout 25m $(PKGS)

## bench: Go benchmarks and the load runs recorded in BENCHMARKS.md
bench: $(PEERS) pg etcd
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) -timeout 30m $(PKGS)

## compare: the side-by-side benchmark of BENCHMARKS.md: one echo backend reached directly, through this daemon
## (REST and /mcp), through mcp-hub (npm) and through ToolHive's vmcp (go install), and through two proxies that know
## nothing of MCP (the floors: HAProxy, Go's net/http ReverseProxy), in interleaved rounds; prints one table. Peers
## are installed into COMPARE_SCRATCH (default $$TMPDIR/mcp-aggregator-compare, kept as a cache).
## Knobs (unset: the program's defaults, see `go run ./cmd/peer-compare -h`): COMPARE_ROUNDS (3),
## COMPARE_DURATION (5s of 32 callers per path and round), COMPARE_CALLS (1000 one-caller calls), COMPARE_SKIP
## (any of mcp-hub,vmcp,haproxy,go-proxy,fasthttp-proxy), MCP_HUB_VERSION, VMCP_VERSION, COMPARE_SPLIT=1 (or true: the load
## generator and backend on half the CPUs, the daemon and every peer on the other half). Not part of `make test`.
compare: haproxy
	$(GO) run ./cmd/peer-compare $(if $(COMPARE_SCRATCH),-scratch $(COMPARE_SCRATCH)) \
	  $(if $(COMPARE_ROUNDS),-rounds $(COMPARE_ROUNDS)) $(if $(COMPARE_DURATION),-duration $(COMPARE_DURATION)) \
	  $(if $(COMPARE_CALLS),-calls $(COMPARE_CALLS)) $(if $(COMPARE_SKIP),-skip $(COMPARE_SKIP)) \
	  $(if $(MCP_HUB_VERSION),-mcp-hub-version $(MCP_HUB_VERSION)) $(if $(VMCP_VERSION),-vmcp-version $(VMCP_VERSION)) \
	  $(if $(filter 1 true yes,$(COMPARE_SPLIT)),-split)

## lint: gofmt and go vet must be silent
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

## fuzz: run each fuzz target for FUZZTIME (make test runs only their seed corpora)
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzRegistration$$' -fuzztime $(FUZZTIME) ./http/internal/validate
	$(GO) test -run '^$$' -fuzz '^FuzzCall$$' -fuzztime $(FUZZTIME) ./http/internal/validate
	$(GO) test -run '^$$' -fuzz '^FuzzImport$$' -fuzztime $(FUZZTIME) ./http/internal/validate
	$(GO) test -run '^$$' -fuzz '^FuzzCuration$$' -fuzztime $(FUZZTIME) ./http/internal/validate
	$(GO) test -run '^$$' -fuzz '^FuzzFilter$$' -fuzztime $(FUZZTIME) ./actors/curation
	$(GO) test -run '^$$' -fuzz '^FuzzValidate$$' -fuzztime $(FUZZTIME) ./internal/connconfig
	$(GO) test -run '^$$' -fuzz '^FuzzEndpoints$$' -fuzztime $(FUZZTIME) ./http/api
	$(GO) test -run '^$$' -fuzz '^FuzzWords$$' -fuzztime $(FUZZTIME) ./search/internal/analysis
	$(GO) test -run '^$$' -fuzz '^FuzzGuard$$' -fuzztime $(FUZZTIME) ./actors/msglimit
	$(GO) test -run '^$$' -fuzz '^FuzzParseHostIP$$' -fuzztime $(FUZZTIME) ./actors/backend
	$(GO) test -run '^$$' -fuzz '^FuzzRewrittenURI$$' -fuzztime $(FUZZTIME) ./actors/routing
	$(GO) test -run '^$$' -fuzz '^FuzzVerify$$' -fuzztime $(FUZZTIME) ./http/auth/oauth
	$(GO) test -run '^$$' -fuzz '^FuzzBearerToken$$' -fuzztime $(FUZZTIME) ./http/auth

## proto: regenerate proto/aggregatorpb from proto/*.proto (Debian protobuf-compiler + protoc-gen-go)
proto:
	@command -v protoc >/dev/null || (apt-get update -qq && apt-get install -y -qq protobuf-compiler)
	$(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
	PATH="$$($(GO) env GOPATH)/bin:$$PATH" protoc --go_out=. --go_opt=module=github.com/mcpgw/aggregator proto/*.proto

## ui-vendor: refresh the console's vendored Preact and htm from npm (committed; see http/ui/static/vendor/VERSIONS)
PREACT_VERSION ?= 11.2.0
HTM_VERSION    ?= 3.1.1
ui-vendor:
	PREACT_VERSION=$(PREACT_VERSION) HTM_VERSION=$(HTM_VERSION) http/ui/vendor.sh

## peers: install the npm MCP servers and clients the tests run, from the committed package-lock.json
peers: $(PEERS)
$(PEERS): $(PEERS_DIR)/package-lock.json
	npm ci --prefix $(PEERS_DIR) --no-audit --no-fund --loglevel=error
	touch $@

## promtool: Debian's prometheus package provides promtool, which checks and unit-tests the alert rules
promtool:
	@command -v promtool >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null)

## etcd: Debian's etcd-server, for the cluster tests (each starts its own etcd on loopback; none runs as a service)
etcd:
	@command -v etcd >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends etcd-server >/dev/null && (systemctl stop etcd 2>/dev/null || pkill -x etcd || true))

## haproxy: Debian's haproxy (2.6), the balancer of deploy/haproxy.cfg, which the owner routing test runs in front of
## three nodes (it starts its own on loopback; none runs as a service)
haproxy:
	@command -v haproxy >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends haproxy >/dev/null && (systemctl stop haproxy 2>/dev/null || service haproxy stop >/dev/null 2>&1 || true))

## jaeger: Jaeger all-in-one (v2), which the tracing tests export to and read traces back from, built from the module
## proxy's source into $(go env GOPATH)/bin (`go install ...@version` refuses the module: its go.mod has replace
## directives). A prerequisite of `make test`, built once per machine: about 7 CPU-minutes (4-5 minutes on 2 idle
## cores), then found in GOPATH/bin. Run it next to `make run` to see traces (README).
JAEGER_VERSION ?= v1.76.0
jaeger:
	@command -v jaeger >/dev/null || test -x "$$($(GO) env GOPATH)/bin/jaeger" || ( \
	  dir=$$(cd "$${TMPDIR:-/tmp}" && $(GO) mod download -json github.com/jaegertracing/jaeger@$(JAEGER_VERSION) | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$$/\1/p') && \
	  test -n "$$dir" && cd "$$dir" && $(GO) build -o "$$($(GO) env GOPATH)/bin/jaeger" ./cmd/jaeger)

## chromium: Debian's chromium, which the console's browser test drives headless through playwright-core
chromium:
	@command -v chromium >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null)

## pg: make sure the local PostgreSQL answers (tests create and drop their own databases)
pg:
	@pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null || \
	  (command -v pg_ctlcluster >/dev/null && pg_ctlcluster --skip-systemctl-redirect $$(ls /etc/postgresql) main start) || \
	  echo "PostgreSQL is not reachable: its tests will skip (and fail under CI=true)"

clean:
	rm -rf bin
