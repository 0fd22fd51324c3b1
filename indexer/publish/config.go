package publish

import (
	"time"

	"github.com/byzlog/byzlog/abciapp/core"
	"github.com/byzlog/byzlog/indexer/layout"
)

// Config is what publishing needs; the indexer's Config fills it (its
// fields of the same names say what each means).
type Config struct {
	ChainID           string
	ID                string
	Replicas          int
	MaxPending        int
	RecordsPerMessage int
	PublishAckTimeout time.Duration
	MaxHeldBytes      int
	GenesisTopics     []core.TopicChange
	Authz             *Authz
}

// Default is the defaults: id "indexer", 1 replica, 8192 pending
// publishes, up to layout.DefaultRunRecords records a message, 30 s for a
// publish's acknowledgement, 256 MiB of records held back behind open
// transactions.
func Default() Config {
	return Config{ID: "indexer", Replicas: 1, MaxPending: 8192, RecordsPerMessage: layout.DefaultRunRecords, PublishAckTimeout: 30 * time.Second,
		MaxHeldBytes: 256 << 20}
}
