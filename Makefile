# Magnetar build entry points. `make test` is what CI runs (.ci/run).
GO      ?= go
PKGS    ?= ./...
TESTFLAGS ?= -race -timeout 15m

.PHONY: build test vet generate bench fuzz clean

build:
	$(GO) build -o bin/magnetar ./cmd/magnetar

vet:
	$(GO) vet $(PKGS)

# vet, then every test with the race detector.
test: vet
	$(GO) test $(TESTFLAGS) $(PKGS)

# All generated code: go generate runs api/generate.sh (protoc + protoc-gen-go
# pinned to go.mod's google.golang.org/protobuf) for every .proto under api/.
generate:
	GO=$(GO) $(GO) generate ./...

# Ledger append benchmark side by side with the machine's fsync'd-append limit.
bench: build
	$(GO) run ./bench/ledgerbench -dir $${BENCH_DIR:-$$(mktemp -d)}

clean:
	rm -rf bin
