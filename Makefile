# toolgate — see README.md. `make help` lists the targets.
SHELL := bash
GO ?= go
BIN := bin
RUN_DIR := .run
HTTP ?= 127.0.0.1:8080
NATS_LISTEN ?= 127.0.0.1:4222
TEST_TIMEOUT ?= 14m

.PHONY: help build run test test-deps test-short lint vet fmt bench soak clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

build: ## build the binaries into ./bin
	$(GO) build -o $(BIN)/ ./cmd/...

run: build ## the whole system on an embedded NATS server, with the seed demo (Ctrl-C stops it)
	@scripts/run.sh

test: vet test-deps ## vet, gofmt check and every test with the race detector
	@test -z "$$(gofmt -l . | tee /dev/stderr)" || { echo "gofmt: the files above need formatting"; exit 1; }
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./...
	cd examples/go-sdk && $(GO) vet ./... && $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./...

test-deps: ## install what the tests need (chromium for the inbox browser test, npm MCP servers, the AG-UI client, the AI SDK, python3 and nats.js for the examples)
	@scripts/ensure-chromium.sh
	@scripts/ensure-mcp.sh
	@scripts/ensure-agui.sh
	@scripts/ensure-aisdk.sh
	@scripts/ensure-examples.sh

vet: ## go vet
	$(GO) vet ./...

fmt: ## gofmt the tree
	gofmt -w .

lint: vet ## vet + gofmt check
	@test -z "$$(gofmt -l . | tee /dev/stderr)"

bench: ## toolgate vs raw JetStream into bench/ (QUICK=1: subset, about 6 min with the replica and cold-resume cases, into bench/quick; NOTE="..." explains regressions; ARGS="..." more flags)
	$(if $(QUICK),,$(GO) test -run '^$$' -bench . -benchmem ./...)
	$(GO) run ./cmd/bench $(if $(QUICK),-quick) $(if $(NOTE),-note "$$NOTE") $(ARGS)

soak: ## faults against the whole system, then the invariants (CONVERSATIONS=200 CALLS=10 SEED=1 DURATION=2m)
	$(GO) run ./cmd/soak -conversations $(or $(CONVERSATIONS),200) -calls $(or $(CALLS),10) -seed $(or $(SEED),1) -duration $(or $(DURATION),2m)

clean: ## remove build output and local state
	rm -rf $(BIN) $(RUN_DIR) data sandbox
