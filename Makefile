# baton's everyday commands. `make help` lists them.
GO        ?= go
PKGS      ?= ./...
FUZZTIME  ?= 5s
BENCHTIME ?= 2s
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: help build test race lint bench fuzz

help: ## list the targets
	@grep -E '^[a-z]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-8s %s\n", $$1, $$2}'

build: ## build the baton binary
	$(GO) build -o baton ./cmd/baton

test: ## run the test suite as CI does (race detector on)
	$(GO) test -race $(PKGS)

race: test ## same as test: the standard run is with -race

lint: ## gofmt, go vet and staticcheck
	@out="$$(gofmt -l .)"; if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) run $(STATICCHECK) $(PKGS)

bench: ## run every benchmark once
	$(GO) test -run '^$$' -bench . -benchtime $(BENCHTIME) $(PKGS)

fuzz: ## run each fuzz target for FUZZTIME
	./.ci/fuzz $(FUZZTIME)
