module github.com/byzlog/byzlog/abciapp

go 1.26.0

require (
	github.com/byzlog/byzlog/protos v0.0.0
	github.com/cometbft/cometbft v0.40.0
	github.com/klauspost/compress v1.20.3
	github.com/linxGnu/grocksdb v1.8.14
	github.com/rs/zerolog v1.35.1
	golang.org/x/net v0.60.0
	google.golang.org/grpc v1.85.0
	google.golang.org/protobuf v1.36.12
)

require (
	github.com/cloudflare/circl v1.6.3 // indirect
	github.com/cosmos/gogoproto v1.7.2 // indirect
	github.com/decred/dcrd/dcrec/secp256k1/v4 v4.4.1 // indirect
	github.com/go-kit/log v0.2.1 // indirect
	github.com/go-logfmt/logfmt v0.6.1 // indirect
	github.com/golang/protobuf v1.5.4 // indirect
	github.com/google/go-cmp v0.7.0 // indirect
	github.com/mattn/go-colorable v0.1.14 // indirect
	github.com/mattn/go-isatty v0.0.20 // indirect
	github.com/oasisprotocol/curve25519-voi v0.0.0-20230904125328-1f23a7beb09a // indirect
	github.com/petermattis/goid v0.0.0-20250813065127-a731cc31b4fe // indirect
	github.com/pkg/errors v0.9.1 // indirect
	github.com/sasha-s/go-deadlock v0.3.9 // indirect
	github.com/supranational/blst v0.3.16 // indirect
	golang.org/x/crypto v0.57.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/text v0.42.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20261019180522-ce908d29299b // indirect
)

replace (
	github.com/byzlog/byzlog/protos => ../protos
	// CometBFT's build list pulls grocksdb >= v1.8.14, which does not build
	// against Debian's RocksDB 7.8.3; v1.7.15 does.
	github.com/linxGnu/grocksdb => github.com/linxGnu/grocksdb v1.7.15
	// An old genproto in the build list makes googleapis/rpc packages ambiguous.
	google.golang.org/genproto => google.golang.org/genproto v0.0.0-20261026165753-2ffab32bce7e
)
