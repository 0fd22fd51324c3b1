package kafka

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/byzlog/byzlog/gateway/pipeline"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// Offsets are the chain's: OffsetCommit becomes a CommitOffsets
// transaction signed with the connection's key (a group belongs to the key
// that first committed for it), and OffsetFetch reads the group's
// committed offsets as f+1 nodes agree on them. Kafka lets a commit move
// an offset back, so every commit is sent as a rewind.

// coordinator is the broker for a group: the first live one in a ring that
// starts at the group name's hash, so every gateway sends a group's clients
// to the same one while it lives, and to the next when it dies.
// self is this gateway as a broker.
func (s *Server) self() Broker {
	for _, b := range s.brokers {
		if b.NodeID == s.cfg.NodeID {
			return b
		}
	}
	return s.brokers[0]
}

func (s *Server) coordinator(ctx context.Context, group string) Broker {
	h := fnv.New32a()
	h.Write([]byte(group))
	start := int(h.Sum32() % uint32(len(s.brokers)))
	for i := range s.brokers {
		b := s.brokers[(start+i)%len(s.brokers)]
		if b.NodeID == s.cfg.NodeID || s.peers.alive(ctx, b) {
			return b
		}
	}
	for _, b := range s.brokers {
		if b.NodeID == s.cfg.NodeID {
			return b
		}
	}
	return s.brokers[0]
}

// peers tracks which other gateways' Kafka faces answer, probing each at
// most once per peerProbeEvery.
type peers struct {
	mu   sync.Mutex
	seen map[int32]peerSeen
}

type peerSeen struct {
	at    time.Time
	alive bool
}

const peerProbeEvery = time.Second

func (p *peers) alive(ctx context.Context, b Broker) bool {
	p.mu.Lock()
	s, ok := p.seen[b.NodeID]
	p.mu.Unlock()
	if ok && time.Since(s.at) < peerProbeEvery {
		return s.alive
	}
	d := net.Dialer{Timeout: 500 * time.Millisecond}
	c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port))))
	if err == nil {
		c.Close()
	}
	p.mu.Lock()
	p.seen[b.NodeID] = peerSeen{at: time.Now(), alive: err == nil}
	p.mu.Unlock()
	return err == nil
}

func (c *conn) findCoordinator(ctx context.Context, r *kmsg.FindCoordinatorRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.FindCoordinatorResponse)
	if r.CoordinatorType == 1 {
		// Transactions: the chain coordinates them, so every gateway
		// answers every transactional id (txn.go).
		b := c.s.self()
		resp.NodeID, resp.Host, resp.Port = b.NodeID, b.Host, b.Port
		return resp
	}
	if r.CoordinatorType != 0 {
		resp.ErrorCode = kerr.InvalidRequest.Code
		resp.ErrorMessage = kmsg.StringPtr(fmt.Sprintf("coordinator type %d: byzlog knows groups (0) and transactions (1)", r.CoordinatorType))
		return resp
	}
	b := c.s.coordinator(ctx, r.CoordinatorKey)
	resp.NodeID, resp.Host, resp.Port = b.NodeID, b.Host, b.Port
	return resp
}

// coordinates says whether this gateway coordinates group.
func (c *conn) coordinates(ctx context.Context, group string) bool {
	return c.s.coordinator(ctx, group).NodeID == c.s.cfg.NodeID
}

// maxOffsetMetadata is the chain's bound on a committed offset's metadata,
// and Kafka's offset.metadata.max.bytes default: a partition's commit with
// more is answered OFFSET_METADATA_TOO_LARGE and left out, as Kafka does.
const maxOffsetMetadata = 4096

// offsetCommit starts a commit: it returns once the commit holds its
// nonce and a node's mempool has it (or it failed), so the connection's
// next commit takes a later nonce and the chain applies them in the order
// the client sent them; the answerer waits for the block.
func (c *conn) offsetCommit(ctx context.Context, r *kmsg.OffsetCommitRequest) answerer {
	resp := r.ResponseKind().(*kmsg.OffsetCommitResponse)
	code := func() *kerr.Error {
		if !c.coordinates(ctx, r.Group) {
			return kerr.NotCoordinator
		}
		if r.Generation >= 0 {
			return c.s.groups.memberOf(r.Group, r.MemberID, r.Generation, r.InstanceID)
		}
		return nil
	}()
	offsets, unknown, tooLarge := c.committable(ctx, r)
	result := make(chan error, 1)
	if code == nil && len(offsets) > 0 {
		inMempool := make(chan struct{})
		var once sync.Once
		c.commits.Add(1)
		go func() {
			defer c.commits.Done()
			result <- c.s.commitOffsets(ctx, c.principal.Key, r.Group, offsets, func() { once.Do(func() { close(inMempool) }) })
		}()
		select {
		case <-inMempool:
		case err := <-result:
			result <- err
		}
	} else {
		result <- nil
	}
	return func(ctx context.Context) (kmsg.Response, error) {
		var err error
		select {
		case err = <-result:
		case <-ctx.Done():
			err = ctx.Err()
		}
		if err != nil && code == nil {
			c.log.Info().Err(err).Str("group", r.Group).Msg("kafka offset commit failed")
			code = commitError(err)
		}
		answerCommit(resp, r, code, unknown, tooLarge)
		return resp, nil
	}
}

// committable sorts a commit's partitions into the offsets to commit and
// those answered at once, keyed "topic/partition": unknown to the chain, or
// with metadata over maxOffsetMetadata. Partitions the chain does not have
// are answered at once, as Kafka does, and left out of the commit: a commit
// the chain would refuse could hold the key's next nonce until it timed
// out.
func (c *conn) committable(ctx context.Context, r *kmsg.OffsetCommitRequest) (offsets []*byzlogv1.PartitionOffset, unknown, tooLarge map[string]bool) {
	unknown, tooLarge = map[string]bool{}, map[string]bool{}
	for _, t := range r.Topics {
		n, _ := c.s.topics.partitions(ctx, t.Topic)
		for _, p := range t.Partitions {
			meta := ""
			if p.Metadata != nil {
				meta = *p.Metadata
			}
			switch {
			case p.Partition < 0 || uint32(p.Partition) >= n:
				unknown[fmt.Sprintf("%s/%d", t.Topic, p.Partition)] = true
			case len(meta) > maxOffsetMetadata:
				tooLarge[fmt.Sprintf("%s/%d", t.Topic, p.Partition)] = true
			case p.Offset >= 0:
				offsets = append(offsets, &byzlogv1.PartitionOffset{Topic: t.Topic, Partition: uint32(p.Partition), Offset: uint64(p.Offset), Metadata: meta})
			}
		}
	}
	return offsets, unknown, tooLarge
}

// answerCommit fills resp with an error code for each partition of r: code
// for all when the commit failed as a whole, else the partition's own
// (unknown, or metadata too large), none for a committed one.
func answerCommit(resp *kmsg.OffsetCommitResponse, r *kmsg.OffsetCommitRequest, code *kerr.Error, unknown, tooLarge map[string]bool) {
	for _, t := range r.Topics {
		rt := kmsg.NewOffsetCommitResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetCommitResponseTopicPartition()
			rp.Partition = p.Partition
			switch {
			case code != nil:
				rp.ErrorCode = code.Code
			case unknown[fmt.Sprintf("%s/%d", t.Topic, p.Partition)]:
				rp.ErrorCode = kerr.UnknownTopicOrPartition.Code
			case tooLarge[fmt.Sprintf("%s/%d", t.Topic, p.Partition)]:
				rp.ErrorCode = kerr.OffsetMetadataTooLarge.Code
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
}

// commitError is the OffsetCommit error of a failed commit: the specific
// ones for what the client must change, else retriable ones librdkafka,
// franz-go and the Java client retry after looking up the coordinator:
// COORDINATOR_NOT_AVAILABLE when the chain refused it (nothing written),
// REQUEST_TIMED_OUT when the outcome is open.
func commitError(err error) *kerr.Error {
	var re *pipeline.RejectedError
	if errors.As(err, &re) {
		switch re.Code {
		case wire.CodeNotGroupOwner:
			return kerr.GroupAuthorizationFailed
		case wire.CodeBadGroup:
			return kerr.InvalidGroupID
		case wire.CodeUnknownTopic, wire.CodeUnknownPartition:
			return kerr.UnknownTopicOrPartition
		}
		return kerr.CoordinatorNotAvailable
	}
	return kerr.RequestTimedOut
}

func (c *conn) offsetFetch(ctx context.Context, r *kmsg.OffsetFetchRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.OffsetFetchResponse)
	if !c.coordinates(ctx, r.Group) {
		resp.ErrorCode = kerr.NotCoordinator.Code
		return resp
	}
	// KIP-447: a transactional consumer asks for stable offsets, and a
	// partition whose offsets an open transaction holds is answered
	// UNSTABLE_OFFSET_COMMIT (retriable) until the transaction ends, so
	// that it does not start from the offsets before it and process the
	// same input twice. They are read before the committed offsets: a
	// transaction that ends between the two reads is taken as still open
	// (the client asks again), never its offsets before it as stable.
	var unstable map[string]bool
	if r.RequireStable {
		var err error
		if unstable, err = c.pendingTxnOffsets(ctx, r.Group); err != nil {
			c.log.Info().Err(err).Str("group", r.Group).Msg("OffsetFetch: the open transactions' offsets could not be read")
			resp.ErrorCode = kerr.CoordinatorLoadInProgress.Code // retriable
			return resp
		}
	}
	committed := map[string]*byzlogv1.PartitionOffset{}
	g, err := c.s.b.Groups.Group(ctx, r.Group)
	var re *pipeline.RejectedError
	switch {
	case errors.As(err, &re) && re.Code == wire.CodeNotFound:
	case err != nil:
		resp.ErrorCode = kerr.CoordinatorLoadInProgress.Code // retriable
		return resp
	default:
		for _, o := range g.Offsets {
			committed[fmt.Sprintf("%s/%d", o.Topic, o.Partition)] = o
		}
	}
	topics := r.Topics
	if topics == nil && g != nil { // all the group's partitions
		byTopic := map[string][]int32{}
		for _, o := range g.Offsets {
			byTopic[o.Topic] = append(byTopic[o.Topic], int32(o.Partition))
		}
		for t, ps := range byTopic {
			topics = append(topics, kmsg.OffsetFetchRequestTopic{Topic: t, Partitions: ps})
		}
	}
	for _, t := range topics {
		rt := kmsg.NewOffsetFetchResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetFetchResponseTopicPartition()
			rp.Partition, rp.Offset, rp.Metadata = p, -1, kmsg.StringPtr("")
			if o := committed[fmt.Sprintf("%s/%d", t.Topic, p)]; o != nil {
				rp.Offset, rp.Metadata = int64(o.Offset), kmsg.StringPtr(o.Metadata)
			}
			if unstable[fmt.Sprintf("%s/%d", t.Topic, p)] {
				rp.ErrorCode = kerr.UnstableOffsetCommit.Code
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// nonces hands out each key's admin and offset-commit nonces, a counter a
// key. A request holds its key's counter from taking the nonce until a
// node's mempool has taken the transaction (or it failed), not until it
// commits: the chain lets nonces run ahead in the mempool, so a key's
// commits follow each other into blocks instead of one a block.
type nonces struct {
	b Groups

	mu   sync.Mutex
	keys map[string]*counter
}

// use runs submit with key's next nonce; submit calls accepted once the
// transaction is in a mempool, which lets the next request of the key go.
// A nonce a node refuses before its mempool takes it, as used or pending
// (another gateway signs for the same key: a Kafka user's group commits
// and transaction steps go to whichever gateways coordinate them), is
// read again and tried again, up to nonceRetries times a nonceRetryWait
// apart, with the counter still held: the key's later requests on this
// gateway wait, so they still reach the chain in the order they came.
func (q *nonces) use(ctx context.Context, key ed25519.PublicKey, submit func(nonce uint64, accepted func()) error) error {
	q.mu.Lock()
	s := q.keys[string(key)]
	if s == nil {
		s = newCounter()
		q.keys[string(key)] = s
	}
	q.mu.Unlock()
	read := func(ctx context.Context) (uint64, error) { return q.b.Nonce(ctx, key) }
	nonce, release, answered, err := s.take(ctx, read)
	if err != nil {
		return err
	}
	var once sync.Once
	inMempool := false
	accepted := func() { once.Do(func() { inMempool = true; release(true, false) }) }
	err = submit(nonce, accepted)
	for retry := 0; retry < nonceRetries && err != nil && !inMempool && nonceTaken(err); retry++ {
		select {
		case <-time.After(nonceRetryWait):
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		next, ok, rerr := s.reread(ctx, read)
		if rerr != nil || !ok {
			break
		}
		nonce = next
		err = submit(nonce, accepted)
	}
	once.Do(func() { // not accepted: the counter is still held
		if err == nil { // committed without a word from the mempool
			release(true, false)
			inMempool = true
		} else {
			release(false, true)
		}
	})
	if inMempool {
		answered(err == nil)
	}
	return err
}

// nonceRetries and nonceRetryWait bound how long a request tries nonces
// another signer of its key took (a block is 300 ms to 1 s: a pending one
// commits within a few).
const (
	nonceRetries   = 10
	nonceRetryWait = 200 * time.Millisecond
)

// nonceTaken reports whether err is a node refusing a transaction's nonce
// as another transaction's: used, or pending in its mempool.
func nonceTaken(err error) bool {
	var re *pipeline.RejectedError
	return errors.As(err, &re) && (re.Code == wire.CodeBadNonce || re.Code == wire.CodePending)
}

// commitOffsets commits a group's offsets signed with key; inMempool is
// called once a node's mempool has the commit.
func (s *Server) commitOffsets(ctx context.Context, key ed25519.PrivateKey, group string, offsets []*byzlogv1.PartitionOffset, inMempool func()) error {
	return s.offsetsTx(ctx, key, inMempool, func(signer *wire.Signer, nonce uint64) (*byzlogv1.CommitOffsets, error) {
		return signer.CommitOffsets(nonce, group, true, offsets...)
	})
}

// offsetsTx signs a group's offsets transaction with key and its next
// nonce (sign), submits it and waits for its commit; inMempool (may be nil)
// is called once a node's mempool has it.
func (s *Server) offsetsTx(ctx context.Context, key ed25519.PrivateKey, inMempool func(), sign func(*wire.Signer, uint64) (*byzlogv1.CommitOffsets, error)) error {
	signer := wire.NewSigner(key, s.b.ChainID())
	return s.nonces.use(ctx, signer.PublicKey(), func(nonce uint64, accepted func()) error {
		tx, err := sign(signer, nonce)
		if err != nil {
			return fmt.Errorf("sign offsets: %w", err)
		}
		_, err = s.b.Groups.CommitOffsets(ctx, tx, func() {
			accepted()
			if inMempool != nil {
				inMempool()
			}
		})
		return err
	})
}
