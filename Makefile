# Magnetar build entry points. `make test` is what CI runs (.ci/run).
GO      ?= go
PKGS    ?= ./...
TESTFLAGS ?= -race -timeout 15m

.PHONY: build test vet generate bench bench-ledger bench-geo bench-noisy bench-secure fuzz clean compat compat-clustered

build:
	$(GO) build -o bin/magnetar ./cmd/magnetar

vet:
	$(GO) vet $(PKGS)

# vet, then every test with the race detector, except e2e: its servers are
# separate `magnetar` processes (not instrumented anyway), and the Apache
# Pulsar Go client it drives (v0.19.0) has a known data race on producer
# reconnect that the failover scenarios trigger in the test process. The
# tests built only without the race detector (//go:build !race: for the same
# client race, and streambench's page-fault counts, which the detector's
# shadow memory adds to) run on their own line.
# The Terraform provider's package runs on a line of its own with TF_ACC=1:
# its acceptance tests drive a real Terraform CLI (terraform, else tofu;
# .ci/run installs OpenTofu when neither is on PATH) against a control plane
# and region agent they start, with one real cluster (under a minute).
RACE_PKGS = $(shell $(GO) list $(PKGS) | grep -v -e '/e2e$$' -e '/terraform$$')
test: vet
	$(GO) test $(TESTFLAGS) $(RACE_PKGS)
	TF_ACC=1 $(GO) test $(TESTFLAGS) ./terraform/
	$(GO) test -timeout 5m -run 'TestUnloadReconnects|TestTerminatedTopicRefusesProducers|TestCollectKeepingPages|TestPrefaultHeap|TestDeduplicationChunkedAcrossUnload' ./dataplane/admin/ ./dataplane/broker/ ./bench/streambench/
	$(GO) test -timeout 15m ./e2e/

# All generated code: go generate runs api/generate.sh (protoc + pinned protoc-gen-go,
# protoc-gen-go-grpc, protoc-gen-grpc-gateway and protoc-gen-openapiv2, built into
# bin/tools at the versions go.mod names) for every .proto under api/, and the CLI
# reference in docs/cli (cmd/magnetar's hidden docs command).
generate:
	GO=$(GO) $(GO) generate ./...

# The streaming benchmark side by side with NATS JetStream and Redis streams
# (bench/streambench: every workload W1-W7, 5 interleaved rounds, machine
# limits; under 15 min on 2 cores).
bench: build
	$(GO) run ./bench/streambench -markdown $${BENCH_MD:-/dev/null}

# The ledger-append benchmark next to the machine's fsync'd-append limit
# (bench/ledgerbench; the storage issue's table).
bench-ledger:
	$(GO) run ./bench/ledgerbench -dir $${BENCH_DIR:-$$(mktemp -d)}

# Geo-replication delay and throughput between two standalones, the link
# through a TCP proxy with and without added delay (bench/georepbench).
bench-geo:
	$(GO) run ./bench/georepbench -markdown $${BENCH_MD:-/dev/null}

# Noisy neighbour on one broker: tenant B's publish latency alone and while
# tenant A floods under a namespace publish rate, under a resource group and
# without a quota (bench/noisybench).
bench-noisy:
	$(GO) run ./bench/noisybench -markdown $${BENCH_MD:-/dev/null}

# W1 and W2 over plain text against TLS alone and TLS + token authentication +
# authorization, in one run (streambench's systems magnetar-tls and
# magnetar-secure), with the loopback TLS copy that is its floor.
bench-secure:
	$(GO) run ./bench/streambench -systems magnetar,magnetar-tls,magnetar-secure -workloads W1,W2 -rounds 9 -markdown $${BENCH_MD:-/dev/null}

# Magnetar's functions worker beside Apache Pulsar 4.2.4's in-broker worker,
# same machine, same run (bench/functionsbench): create → running, throughput,
# latency, memory and CPU of a Java function on both, Magnetar's Python
# function and 200 idle Python instances on one worker. Pulsar's jars come
# from Maven Central (bench/internal/pulsarpeer/setup.sh, once); the Java
# instance from dataplane/functions/javainstance/setup.sh.
.PHONY: bench-functions
bench-functions:
	$(GO) run ./bench/functionsbench -markdown $${BENCH_MD:-/dev/null}

# The Apache Pulsar Go client's integration tests against a fresh
# `magnetar standalone`: one at a time, and each group in one process in
# upstream's order (COMPAT_MODE=each|group|both); writes docs/compatibility.md.
# COMPAT_RUN=regex, COMPAT_GROUPS=M1,M2, COMPAT_TIMEOUT=60s: see compat/README.md.
compat:
	GO=$(GO) ./compat/run.sh

# The upstream client's multi-broker suites (build tag clustered) against a
# real cluster: etcd, three bookies, two brokers (needs broker-1 -> 127.0.0.1).
compat-clustered:
	GO=$(GO) ./compat/clustered.sh

clean:
	rm -rf bin
