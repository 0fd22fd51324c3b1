module example.com/byzlog-sdk-example

go 1.26.0

require (
	github.com/byzlog/byzlog/gateway v0.0.0
	github.com/byzlog/byzlog/indexer v0.0.0
	github.com/nats-io/nats.go v1.53.1
)

require (
	github.com/byzlog/byzlog/protos v0.0.0 // indirect
	github.com/cloudflare/circl v1.6.3 // indirect
	github.com/cometbft/cometbft v0.40.0 // indirect
	github.com/cosmos/gogoproto v1.7.2 // indirect
	github.com/davecgh/go-spew v1.1.2-0.20180830191138-d8f796af33cc // indirect
	github.com/decred/dcrd/dcrec/secp256k1/v4 v4.4.1 // indirect
	github.com/go-kit/log v0.2.1 // indirect
	github.com/go-logfmt/logfmt v0.6.1 // indirect
	github.com/golang/protobuf v1.5.4 // indirect
	github.com/google/go-cmp v0.7.0 // indirect
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/nats-io/nkeys v0.4.16 // indirect
	github.com/nats-io/nuid v1.0.1 // indirect
	github.com/oasisprotocol/curve25519-voi v0.0.0-20230904125328-1f23a7beb09a // indirect
	github.com/petermattis/goid v0.0.0-20250813065127-a731cc31b4fe // indirect
	github.com/pkg/errors v0.9.1 // indirect
	github.com/pmezard/go-difflib v1.0.1-0.20181226105442-5d4384ee4fb2 // indirect
	github.com/sasha-s/go-deadlock v0.3.9 // indirect
	github.com/stretchr/testify v1.11.1 // indirect
	github.com/supranational/blst v0.3.16 // indirect
	golang.org/x/crypto v0.58.0 // indirect
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.43.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20261019180522-ce908d29299b // indirect
	google.golang.org/grpc v1.85.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
	gopkg.in/check.v1 v1.0.0-20201130134442-10cb98267c6c // indirect
	gopkg.in/yaml.v3 v3.0.1 // indirect
)

// The SDKs are not published yet: build against this checkout. A user's
// module does the same with their own path to it, or drops these lines once
// the modules are tagged.
replace (
	github.com/byzlog/byzlog/gateway => ../../gateway
	github.com/byzlog/byzlog/indexer => ../../indexer
	github.com/byzlog/byzlog/protos => ../../protos
)
