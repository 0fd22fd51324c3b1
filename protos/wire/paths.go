package wire

// Query paths: the ABCI query path selects, the data is the request message
// (see byzlog/v1/state.proto), the value the response message.
const (
	PathState    = "/state"
	PathTopics   = "/topics"
	PathTopic    = "/topic"
	PathRecords  = "/records"
	PathGroup    = "/group"
	PathGroups   = "/groups"
	PathProducer = "/producer"
	PathNonce    = "/nonce"
	PathProof    = "/proof"
	PathDigest   = "/digest"
	// PathAdmins answers the AdminSet; PathValidators the ValidatorSet.
	PathAdmins     = "/admins"
	PathValidators = "/validators"
	// PathIndexers answers the IndexerSet: the registered indexers and how
	// far each has published.
	PathIndexers = "/indexers"
	// PathPruning is answered by each node for itself, not from the
	// replicated state: the RetainHeight it gives CometBFT and what holds
	// it back (byzlogv1.Pruning).
	PathPruning = "/pruning"
	// PathRules answers the Rules: the rules version in force and the
	// upgrade scheduled.
	PathRules = "/rules"
	// PathTx is answered by each node for itself, from the blocks it
	// committed since it started: where the transaction whose SHA-256 is
	// the request data committed last, as ResponseQuery.Height and .Index,
	// or CodeNotFound. byzlog's nodes run without CometBFT's transaction
	// index (tx_index.indexer = "null"); a gateway checks every answer
	// against a block f+1 nodes confirm.
	PathTx = "/tx"
	// PathBundles is answered by each node for itself: the bundles a
	// block references (byzlogv1.BundlesRequest, byzlogv1.Bundles), from
	// its mempool, its proposals and its bundle store.
	PathBundles = "/bundles"
	// PathTxns answers Kafka transactional ids and their state
	// (byzlogv1.TxnsRequest, byzlogv1.TxnList; rules version 8 on).
	PathTxns = "/txns"
	// PathLatest answers the latest record of a key in a compacted
	// partition with proofs (byzlogv1.LatestRequest, byzlogv1.LatestProof),
	// and PathProducerProof a producer's sequence state with its proof
	// (byzlogv1.ProducerRequest, byzlogv1.StateProof); rules version 10 on.
	PathLatest        = "/latest"
	PathProducerProof = "/producer-proof"
)

// QueryPaths lists the paths a validator answers, for error messages.
var QueryPaths = []string{PathState, PathTopics, PathTopic, PathRecords, PathGroup, PathGroups, PathProducer, PathNonce, PathProof, PathDigest, PathAdmins, PathValidators, PathIndexers, PathPruning, PathRules, PathTx, PathBundles, PathTxns, PathLatest, PathProducerProof}

// Bundles query bounds: the hashes one request names, and the bytes of
// bundles one answer carries (the rest come back empty, to ask again).
const (
	MaxBundlesPerQuery = 256
	MaxBundlesBytes    = 3 << 20
	// MinReaderResponseBytes is the least a reader of blocks may bound a
	// node's RPC answer to: a /bundles answer of MaxBundlesBytes is ~4 MiB
	// in JSON-RPC (base64), and a 4 MiB block's answer as much.
	MinReaderResponseBytes = 8 << 20
)

// Records query bounds.
const (
	DefaultQueryRecords = 1000
	DefaultQueryBytes   = 1 << 20
	MaxQueryBytes       = 3 << 20 // under the 4 MiB gRPC cap, with room for framing
)
