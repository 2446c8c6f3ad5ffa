# The project's commands. Each target is what the README and .ci/run say;
# a fresh machine with Go 1.26, gcc and Python's moto needs nothing else.

GO ?= go
BIN ?= bin/chargerecovery

.PHONY: all build lambda demo test sim bench bench-check check image clean

all: build

## build: the static binary (no cgo), ./bin/chargerecovery
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w' -o $(BIN) ./cmd/chargerecovery

## lambda: the charge consumer as an AWS Lambda function (provided.al2023,
## deploy/aws/lambda.yaml): bin/lambda/bootstrap, zipped as bin/lambda/function.zip
lambda:
	GOOS=linux GOARCH=amd64 CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w' -tags lambda.norpc -o bin/lambda/bootstrap ./cmd/chargerecovery-lambda
	cd bin/lambda && rm -f function.zip && zip -q function.zip bootstrap

## demo: the exactly-once proof on a fresh SQLite file (hermetic: its own
## file, bank simulator on a free loopback port, removed afterwards)
demo:
	$(GO) run ./cmd/chargerecovery demo

## test: the README's test command (starts and stops its own moto server)
test:
	scripts/with-moto.sh $(GO) test -race -count=1 -timeout 25m ./...

## sim: the whole-protocol simulator over SEEDS seeds from FIRST (the in-memory
## store; a fifth as many on SQLite); a failure prints its seed and trace
SEEDS ?= 20000
FIRST ?= 1
sim:
	$(GO) test -count=1 -timeout 120m ./app/protosim -run 'TestSimulate$$' -sim.seeds=$(SEEDS) -sim.first=$(FIRST) -v

## bench: month-end load on the embedded backend, with its queue-only baseline
bench:
	$(GO) run ./cmd/chargerecovery bench --charges 100000 --baseline

## bench-check: fail if the guard's cost (against the queue-only baseline,
## same run, median of 3) regresses past its backend's limit (embedded 2.0x)
bench-check:
	scripts/bench-check.sh

## check: what CI checks before the tests (format, vet, alert rules)
check:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	  if [ -n "$$unformatted" ]; then echo "gofmt would change:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	promtool check rules deploy/prometheus/alerts.yml
	promtool test rules deploy/prometheus/alerts_test.yml

## image: build the image from this binary and run the demo in it
## (buildah + podman; the Dockerfile does the same with a Go build stage)
image:
	scripts/image-test.sh

clean:
	rm -rf bin
