// Package attack runs Byzantine clients against a byzlog cluster, beside
// the chaos suite: while honest producers write at a fixed rate and
// consumers read (chaos.RunPhase, whose history chaos.Check judges), one
// attacker at a time sends what no honest client would — inputs built to
// crash an app, floods of transactions that can never commit, batches with
// sequence gaps, header bombs, bundles whose last signature is bad, slow
// HTTP clients, a lying node's endless RPC answers. Each row says whether
// any process of the cluster died, how much honest throughput was left
// against a no-attack phase of the same run, and what the checker found.
//
// Every attacker is bounded in count, bytes and time, ends with its
// context, and only ever addresses the loopback cluster it is given. This
// package never starts, stops or edits anything but that cluster.
package attack

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/chain/tlsconf"
	"github.com/byzlog/byzlog/protos/wire"
	"github.com/byzlog/byzlog/services/lab/tamper"
)

// Env is what an attacker may reach: the cluster's front doors on
// loopback, and the chain it signs for.
type Env struct {
	ChainID string
	// Nodes are each validator's own CometBFT RPC ("https://127.0.0.1:p"),
	// reached with RPC (the network's CA; bounded waits, so an attacker
	// always stops with its context).
	Nodes []string
	RPC   *http.Client
	// Data are the same validators' node data services (byzlog-app
	// --data-listen), in the order of Nodes: attackers reach them as
	// anyone on the network may. closeData closes their connections.
	Data      []byzlogv1.NodeDataClient
	closeData func()
	queries   *atomic.Uint64 // Query calls made, which choose their paths in turn
	// Gateways are the gateways' gRPC addresses, GatewayHTTP their HTTP ones.
	Gateways, GatewayHTTP []string
	// TLS is how a client reaches the gateways (the network's CA); nil:
	// plaintext. Attackers speak TLS as any client does: what they send
	// is the attack, not the transport.
	TLS *tls.Config
	// NATSURL is the cluster's NATS; NATSOptions connect to it as a
	// consumer (an identity that may read, not write), with NATSPassword;
	// NATSTLS is its TLS alone (the cluster's CA).
	NATSURL      string
	NATSOptions  []nats.Option
	NATSPassword string
	NATSTLS      []nats.Option
	// Secret is a topic whose config lists one reader, SecretReader (its
	// NATS nkey), whose key nobody here holds; Stranger is a key no topic
	// lists.
	Secret, SecretReader string
	Stranger             ed25519.PrivateKey
	// Foreign is a client TLS configuration that trusts the cluster's CA
	// and presents a certificate of another CA.
	Foreign *tls.Config
	// Topic is the phase's honest topic; Junk (JunkPartitions
	// partitions) the attackers' own, so records an attack gets committed
	// never mix with the history the checker reads.
	Topic          string
	Junk           string
	JunkPartitions uint32
	Limits         *byzlogv1.Limits
	// MaxTxBytes is the largest transaction a node's RPC takes in one
	// JSON-RPC body.
	MaxTxBytes int
	// Tamper is the lying proxy in front of node0's RPC (gateway0's and
	// the indexer's way to node0); nil leaves huge-rpc nothing to do.
	Tamper *tamper.Proxy
	Seed   uint64
}

// Attack is one kind of Byzantine client. Run attacks until ctx ends or
// its bound is reached, counting into t; it returns an error only when it
// could not attack at all.
type Attack struct {
	Name string
	Doc  string
	Run  func(ctx context.Context, env *Env, t *Tally) error
	// Unauthorized: every send is something the attacker has no right to
	// do, so one accepted send misses the row's goal.
	Unauthorized bool
}

// Baseline is the no-attack phase every row is compared with.
var Baseline = Attack{Name: "none", Doc: "no attack: the honest load alone, the baseline of every ratio",
	Run: func(ctx context.Context, _ *Env, _ *Tally) error { <-ctx.Done(); return nil }}

// Attacks lists every attack, in the order `byzlog-lab attack` runs them.
var Attacks = []Attack{
	{Name: "crash-input", Doc: "broadcast_tx_sync to every node a correctly signed batch for topic \"\\x01\"×59+\"a\"×6 (its rejection message, cut at 256 bytes, once split a UTF-8 \"…\" and the app panicked), then a malformed corpus: random bytes, truncated and bit-flipped transactions, valid envelopes around garbage bodies, topic names that break messages, to every node's RPC and its app's data service (Submit, and Query of every path with the corpus as data)",
		Run: crashInput},
	{Name: "mempool-flood", Doc: "fresh keys send transactions that can never commit: bundles of 64 batches with sequences 1..64 ahead, offset commits with nonces 1..64 ahead and ~4 KiB of metadata per offset (as many offsets as an RPC body holds), topic creations from non-admins with future nonces; up to 3 MiB/s over all nodes",
		Run: mempoolFlood},
	{Name: "gap-batches", Doc: "64 concurrent producers (fresh keys) send batches at sequence 5 when their next is 0 through both gateways' gRPC Produce, over and over",
		Run: gapBatches},
	{Name: "double-bundle", Doc: "the same signed batch twice at once: through a gateway, and in a bundle of its own with another batch, broadcast_tx_sync to a node (what an SDK's failover does); over and over with fresh keys",
		Run: doubleBundle},
	{Name: "header-bomb", Doc: "valid batches of records each carrying max_headers empty headers, as many records as a transaction's bytes take (each header counted as the chain counts it decoded), zstd-compressed (kilobytes on the wire, far more decoded): bundles of ten broadcast to the nodes, single batches through the gateways",
		Run: headerBomb},
	{Name: "bad-last-signature", Doc: "bundles of max_bundle_batches batches, every signature valid but the last one's, broadcast_tx_sync to the nodes at up to 3 MiB/s",
		Run: badLastSig},
	{Name: "padded-offsets", Doc: "offset commits from fresh keys (valid nonces) with 4 KiB of metadata on each of as many offsets as an RPC body holds, broadcast_tx_sync at up to 3 MiB/s",
		Run: paddedOffsetsAttack},
	{Name: "slow-http", Doc: "200 connections to the gateways' HTTP face that send their headers or their body one byte per second, while a probe times GET /v1/topics",
		Run: slowHTTP},
	{Name: "nats-intruder", Doc: "a NATS client with consumer credentials tries, in turn, what only the indexer may: publish a forged record with a huge Byzlog-Offset into byzlog.<topic>.0, publish a record where the indexer expects its next one, delete and purge the topic's stream, create a byzlog stream, write the indexer's cursor, open the cursor bucket",
		Run: natsIntruder, Unauthorized: true},
	{Name: "forbidden-reader", Doc: "reads a topic whose config lists one reader (a key nobody here holds): as the consumer user, makes a consumer of its stream, gets its first message, subscribes to its subjects, to every subject and to its reader's inbox, lists the consumers of the phase's topic (where groups' durables are); connects as a key no topic lists",
		Run: forbiddenReader, Unauthorized: true},
	{Name: "foreign-ca", Doc: "calls every gateway's gRPC face with a client certificate of another CA, with none and in plaintext, its HTTP face with the foreign certificate, and NATS in plaintext with the consumer's password",
		Run: foreignCA, Unauthorized: true},
	{Name: "refused-records", Doc: "fresh keys send batches the chain refuses for what their records hold, which the mempool (it keeps no records) cannot see: records without a key to a compacted topic, and records stamped in 1970 to a CreateTime topic bounded to a minute; through both gateways' gRPC Produce, over and over (every proposal carrying one was refused until 2026-12-07, which halted the chain)",
		Run: refusedRecords, Unauthorized: true},
	{Name: "huge-rpc", Doc: "the RPC proxy in front of node0 (gateway0's first node, the indexer's primary) answers every request with a 200 MiB body, generated as it is sent",
		Run: hugeRPC},
}

// Lookup finds attacks by name ("all" is every one).
func Lookup(names []string) ([]Attack, error) {
	var out []Attack
	for _, name := range names {
		if name == "all" {
			out = append(out, Attacks...)
			continue
		}
		found := false
		for _, a := range Attacks {
			if a.Name == name {
				out, found = append(out, a), true
			}
		}
		if !found {
			var known []string
			for _, a := range Attacks {
				known = append(known, a.Name)
			}
			return nil, fmt.Errorf("unknown attack %q: choose from all, %s", name, strings.Join(known, ", "))
		}
	}
	return out, nil
}

// flood runs workers that each build a transaction and broadcast it to
// the nodes targets names, paced by p, until ctx ends or max sends are
// counted. A worker's random source is its own.
func flood(ctx context.Context, env *Env, t *Tally, p *pacer, workers, max int, build func(rng *rand.Rand, i int) ([]byte, error), targets func(i int) []string) error {
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(env.Seed, uint64(w)))
			for i := w; ctx.Err() == nil && t.Sent() < max; i += workers {
				tx, err := build(rng, i)
				if err != nil {
					errs <- err
					return
				}
				for _, rpc := range targets(i) {
					if !p.wait(ctx, len(tx)) {
						return
					}
					refusal, err := env.submit(ctx, rpc, tx)
					if ctx.Err() != nil {
						t.count(len(tx), "", errAttackEnded)
						return
					}
					t.count(len(tx), refusal, err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs // nil when no worker failed
}

func (env *Env) roundRobin(i int) []string { return []string{env.Nodes[i%len(env.Nodes)]} }

// dataPrefix marks a flood target that is a node's data service (Env.Data,
// by index), not its RPC.
const dataPrefix = "data:"

// everyPath sends what it is given to every node's RPC and data service
// in turn: broadcast_tx_sync, then Submit and Query.
func (env *Env) everyPath(i int) []string {
	n := len(env.Nodes) * (1 + 2*min(len(env.Data), 1))
	k := i % n
	if k < len(env.Nodes) {
		return []string{env.Nodes[k]}
	}
	return []string{fmt.Sprintf("%s%d", dataPrefix, k-len(env.Nodes))}
}

// submit sends tx to target: a node's RPC (broadcast_tx_sync), or a data
// service (dataPrefix and an index: Submit for the first len(Data), then
// Query with tx as its data, of each query path in turn).
func (env *Env) submit(ctx context.Context, target string, tx []byte) (refusal string, err error) {
	k, ok := strings.CutPrefix(target, dataPrefix)
	if !ok {
		return broadcastTxSync(ctx, env.RPC, target, tx)
	}
	i, err := strconv.Atoi(k)
	if err != nil || len(env.Data) == 0 {
		return "", fmt.Errorf("data target %q: no such data service", target)
	}
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if i < len(env.Data) {
		r, err := env.Data[i].Submit(cctx, &byzlogv1.NodeSubmitRequest{Tx: tx})
		if err != nil {
			return "", fmt.Errorf("data service Submit: %w", err)
		}
		if r.Code != 0 {
			return fmt.Sprintf("code %d: %s", r.Code, r.Log), nil
		}
		return "", nil
	}
	var turn uint64
	if env.queries != nil {
		turn = env.queries.Add(1)
	}
	path := wire.QueryPaths[turn%uint64(len(wire.QueryPaths))]
	r, err := env.Data[i%len(env.Data)].Query(cctx, &byzlogv1.NodeQueryRequest{Path: path, Data: tx})
	if err != nil {
		return "", fmt.Errorf("data service Query %s: %w", path, err)
	}
	if r.Code != 0 {
		return fmt.Sprintf("code %d: %s", r.Code, r.Log), nil
	}
	// Answered, which takes nothing in: not counted as accepted.
	return "answered query " + path + " (a read: nothing taken in)", nil
}

func crashInput(ctx context.Context, env *Env, t *Tally) error {
	rng := rand.New(rand.NewPCG(env.Seed, 1))
	corpus, err := fuzzTxs(rng, env.ChainID, env.Junk)
	if err != nil {
		return err
	}
	p := newPacer(1 << 20)
	return flood(ctx, env, t, p, 1, 20_000, func(rng *rand.Rand, i int) ([]byte, error) {
		if i%(len(corpus)+1) == 0 {
			return crashBundle(rng, env.ChainID) // a fresh key each time: never a cached tx
		}
		return corpus[i%(len(corpus)+1)-1], nil
	}, func(i int) []string {
		if i%(len(corpus)+1) == 0 {
			return env.Nodes // the crash input goes to every node
		}
		// Shifted by the round: every entry reaches every path in turn,
		// whatever the corpus's length.
		return env.everyPath(i + i/(len(corpus)+1))
	})
}

func mempoolFlood(ctx context.Context, env *Env, t *Tally) error {
	n := offsetsFitting(env.MaxTxBytes, 4096, len(env.Junk), int(env.Limits.MaxCommitOffsets))
	n = min(n, int(env.JunkPartitions))
	return flood(ctx, env, t, newPacer(3<<20), 8, 5000, func(rng *rand.Rand, i int) ([]byte, error) {
		switch i % 4 {
		case 0, 1:
			return futureBundle(rng, env.ChainID, env.Junk, env.JunkPartitions, 64)
		case 2:
			return futureAdmin(rng, env.ChainID)
		default:
			return paddedOffsets(rng, env.ChainID, env.Junk, n, 4096, 1+rng.Uint64N(64))
		}
	}, env.roundRobin)
}

func badLastSig(ctx context.Context, env *Env, t *Tally) error {
	rng := rand.New(rand.NewPCG(env.Seed, 2))
	valid, err := validBatches(rng, env.ChainID, env.Junk, env.JunkPartitions, int(env.Limits.MaxBundleBatches)-1)
	if err != nil {
		return err
	}
	return flood(ctx, env, t, newPacer(3<<20), 2, 2000, func(rng *rand.Rand, _ int) ([]byte, error) {
		return badLastSignature(rng, env.ChainID, env.Junk, valid)
	}, env.roundRobin)
}

func paddedOffsetsAttack(ctx context.Context, env *Env, t *Tally) error {
	n := offsetsFitting(env.MaxTxBytes, 4096, len(env.Junk), int(env.Limits.MaxCommitOffsets))
	n = min(n, int(env.JunkPartitions))
	return flood(ctx, env, t, newPacer(3<<20), 2, 500, func(rng *rand.Rand, _ int) ([]byte, error) {
		return paddedOffsets(rng, env.ChainID, env.Junk, n, 4096, 0)
	}, env.roundRobin)
}

// gateways dials every gateway's gRPC face.
func gateways(env *Env) ([]byzlogv1.GatewayClient, func(), error) {
	var conns []*grpc.ClientConn
	closeAll := func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}
	var out []byzlogv1.GatewayClient
	for _, addr := range env.Gateways {
		c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(tlsconf.Transport(env.TLS, env.TLS == nil)),
			grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(64<<20)))
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("gateway %s: %w", addr, err)
		}
		conns = append(conns, c)
		out = append(out, byzlogv1.NewGatewayClient(c))
	}
	if len(out) == 0 {
		return nil, nil, errors.New("the cluster has no gateway to attack")
	}
	return out, closeAll, nil
}

// produce sends one batch through a gateway and counts the answer: a
// receipt is accepted, a status that says what is wrong a refusal, no
// answer in time (or none at all) an error.
func produce(ctx context.Context, gw byzlogv1.GatewayClient, t *Tally, b *byzlogv1.SignedBatch, ack byzlogv1.Ack, timeout time.Duration) {
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := gw.Produce(cctx, &byzlogv1.ProduceRequest{Batch: b, Ack: ack})
	n := len(b.Body)
	if ctx.Err() != nil {
		t.count(n, "", errAttackEnded)
		return
	}
	switch st := status.Convert(err); {
	case err == nil && resp.GetErrorCode() != 0:
		t.count(n, fmt.Sprintf("%s: %s", codes.Code(resp.GetErrorCode()), resp.GetErrorMessage()), nil)
	case err == nil:
		t.count(n, "", nil)
	case st.Code() == codes.DeadlineExceeded || st.Code() == codes.Unavailable || st.Code() == codes.Canceled:
		t.count(n, "", fmt.Errorf("%s: %s", st.Code(), st.Message()))
	default:
		t.count(n, fmt.Sprintf("%s: %s", st.Code(), st.Message()), nil)
	}
}

func refusedRecords(ctx context.Context, env *Env, t *Tally) error {
	return produceEach(ctx, env, t, 16, func(rng *rand.Rand, i int) (*byzlogv1.SignedBatch, error) {
		topic, rec := CompactedTopic, record(rng, 100)
		rec.Key = nil
		if i%2 == 1 {
			topic, rec.Key, rec.CreateTimeUnixNano = BoundedTopic, []byte("k"), 1
		}
		return freshSigner(rng, env.ChainID).Batch(topic, rng.Uint32N(4), 0, byzlogv1.Codec_CODEC_NONE, []*byzlogv1.Record{rec})
	})
}

func gapBatches(ctx context.Context, env *Env, t *Tally) error {
	return produceEach(ctx, env, t, 64, func(rng *rand.Rand, _ int) (*byzlogv1.SignedBatch, error) {
		return freshSigner(rng, env.ChainID).Batch(env.Junk, rng.Uint32N(env.JunkPartitions), 5, byzlogv1.Codec_CODEC_NONE, []*byzlogv1.Record{record(rng, 100)})
	})
}

// produceEach runs workers that each send the batches batch makes (i
// counts a worker's sends, from its number up, by workers) through the
// gateways in turn, waiting for their commit, until ctx ends or 20,000
// sends are counted.
func produceEach(ctx context.Context, env *Env, t *Tally, workers int, batch func(rng *rand.Rand, i int) (*byzlogv1.SignedBatch, error)) error {
	gws, closeAll, err := gateways(env)
	if err != nil {
		return err
	}
	defer closeAll()
	const max = 20_000
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(env.Seed, uint64(w)))
			for i := w; ctx.Err() == nil && t.Sent() < max; i += workers {
				b, err := batch(rng, i)
				if err != nil {
					t.count(0, "", err)
					return
				}
				produce(ctx, gws[i%len(gws)], t, b, byzlogv1.Ack_ACK_COMMIT, 30*time.Second)
			}
		}()
	}
	wg.Wait()
	return nil
}

func doubleBundle(ctx context.Context, env *Env, t *Tally) error {
	gws, closeAll, err := gateways(env)
	if err != nil {
		return err
	}
	defer closeAll()
	const workers, max = 8, 20_000
	rounds := newPacer(40)               // rounds per second over all workers
	inFlight := make(chan struct{}, 256) // gateway copies awaiting their answer
	var wg, copies sync.WaitGroup
	defer copies.Wait()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(env.Seed, uint64(w)))
			for i := w; ctx.Err() == nil && t.Sent() < max; i += workers {
				if !rounds.wait(ctx, 1) {
					return
				}
				p := rng.Uint32N(env.JunkPartitions)
				b, err := freshSigner(rng, env.ChainID).Batch(env.Junk, p, 0, byzlogv1.Codec_CODEC_NONE, []*byzlogv1.Record{record(rng, 100)})
				if err != nil {
					t.count(0, "", err)
					return
				}
				other, err := freshSigner(rng, env.ChainID).Batch(env.Junk, p, 0, byzlogv1.Codec_CODEC_NONE, []*byzlogv1.Record{record(rng, 100)})
				if err != nil {
					t.count(0, "", err)
					return
				}
				tx, err := wire.BundleTx(other, b)
				if err != nil {
					t.count(0, "", err)
					return
				}
				select {
				case inFlight <- struct{}{}:
				case <-ctx.Done():
					return
				}
				copies.Add(1)
				go func() {
					defer copies.Done()
					defer func() { <-inFlight }()
					produce(ctx, gws[i%len(gws)], t, b, byzlogv1.Ack_ACK_COMMIT, 30*time.Second)
				}()
				refusal, err := broadcastTxSync(ctx, env.RPC, env.Nodes[i%len(env.Nodes)], tx)
				if ctx.Err() != nil {
					err = errAttackEnded
				}
				t.count(len(tx), refusal, err)
			}
		}()
	}
	wg.Wait()
	return nil
}

func headerBomb(ctx context.Context, env *Env, t *Tally) error {
	l := env.Limits
	records, headers := bombShape(l)
	// Bundles of ten, nine past a transaction's budgets: the nodes decode
	// the first and scan the second before refusing the bundle. Single
	// batches through the gateways commit.
	batches := 10
	gws, closeAll, err := gateways(env)
	if err != nil {
		return err
	}
	defer closeAll()
	var wg sync.WaitGroup
	wg.Add(2)
	errs := make(chan error, 2)
	go func() { // bundles of bombs, straight to the nodes: one every 2 s, at most 20
		defer wg.Done()
		errs <- flood(ctx, env, t, newPacer(1<<20), 1, 20, func(rng *rand.Rand, _ int) ([]byte, error) {
			return headerBombTx(rng, env.ChainID, env.Junk, batches, records, headers)
		}, env.roundRobin)
	}()
	go func() { // single bombs through the gateways: 2 a second, at most 100
		defer wg.Done()
		rng := rand.New(rand.NewPCG(env.Seed, 99))
		p := newPacer(2)
		bomb, err := bombBatch(rng, env.ChainID, env.Junk, records, headers)
		if err != nil {
			errs <- err
			return
		}
		for i := 0; i < 100 && p.wait(ctx, 1); i++ {
			produce(ctx, gws[i%len(gws)], t, resign(rng, bomb), byzlogv1.Ack_ACK_MEMPOOL, 10*time.Second)
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func slowHTTP(ctx context.Context, env *Env, t *Tally) error {
	if len(env.GatewayHTTP) == 0 {
		return errors.New("the cluster has no gateway HTTP face to attack")
	}
	const conns, maxOpens = 200, 2000
	var opens sync.Mutex
	opened := 0
	var wg sync.WaitGroup
	for c := 0; c < conns; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			addr := env.GatewayHTTP[c%len(env.GatewayHTTP)]
			for ctx.Err() == nil {
				opens.Lock()
				if opened >= maxOpens {
					opens.Unlock()
					return
				}
				opened++
				opens.Unlock()
				held, refusal, err := slowConn(ctx, addr, env.TLS, c%2 == 0)
				if ctx.Err() != nil && err == nil && refusal == "" {
					t.count(held, "", nil) // held open until the attack's end
					return
				}
				t.count(held, refusal, err)
				sleep(ctx, time.Second)
			}
		}()
	}
	probeHTTP(ctx, env.GatewayHTTP, env.TLS, t)
	wg.Wait()
	return nil
}

// slowConn opens one connection to addr and sends a request one byte per
// second: its headers (headers true) or, after whole headers, its body. It
// returns the bytes it got out, and how it ended: a refusal when the
// gateway closed it, an error when it could not connect. With c it
// completes a TLS handshake first.
func slowConn(ctx context.Context, addr string, c *tls.Config, headers bool) (int, string, error) {
	d := net.Dialer{Timeout: 5 * time.Second}
	var conn net.Conn
	var err error
	if c != nil {
		conn, err = (&tls.Dialer{NetDialer: &d, Config: c}).DialContext(ctx, "tcp", addr)
	} else {
		conn, err = d.DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return 0, "", err
	}
	defer conn.Close()
	closed := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, conn); close(closed) }()
	start := time.Now()
	head := "POST /v1/produce HTTP/1.1\r\nHost: " + addr + "\r\nContent-Type: application/json\r\n"
	if !headers {
		head += "Content-Length: 4000000\r\n\r\n{"
	} else {
		head += "X-Slow: "
	}
	n, err := io.WriteString(conn, head)
	if err != nil {
		return n, "closed at once", nil
	}
	for {
		select {
		case <-ctx.Done():
			return n, "", nil
		case <-closed:
			return n, fmt.Sprintf("closed by the gateway after %s", roundTo(time.Since(start))), nil
		case <-time.After(time.Second):
		}
		k, err := conn.Write([]byte{'a'})
		n += k
		if err != nil {
			return n, fmt.Sprintf("closed by the gateway after %s", roundTo(time.Since(start))), nil
		}
	}
}

// roundTo is a duration in coarse steps, so refusals group by it.
func roundTo(d time.Duration) time.Duration {
	switch {
	case d < 10*time.Second:
		return d.Round(time.Second)
	default:
		return d.Round(10 * time.Second)
	}
}

// probeHTTP times an honest GET /v1/topics on each gateway every second
// until ctx ends, and notes the slowest answers and failures.
func probeHTTP(ctx context.Context, addrs []string, c *tls.Config, t *Tally) {
	client := &http.Client{Timeout: 5 * time.Second}
	scheme := "http://"
	if c != nil {
		client.Transport, scheme = &http.Transport{TLSClientConfig: c}, "https://"
	}
	var waits []time.Duration
	failed := 0
	for i := 0; ctx.Err() == nil; i++ {
		start := time.Now()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+addrs[i%len(addrs)]+"/v1/topics", nil)
		if err != nil {
			return
		}
		resp, err := client.Do(req)
		if ctx.Err() != nil {
			break
		}
		if err != nil || resp.StatusCode != 200 {
			failed++
		} else {
			waits = append(waits, time.Since(start))
		}
		if resp != nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
		}
		sleep(ctx, time.Second)
	}
	var slowest time.Duration
	for _, w := range waits {
		slowest = max(slowest, w)
	}
	t.note("honest HTTP probe (GET /v1/topics): %d answered, slowest %s, %d failed", len(waits), slowest.Round(time.Millisecond), failed)
}

func hugeRPC(ctx context.Context, env *Env, t *Tally) error {
	if env.Tamper == nil {
		return errors.New("huge-rpc: the cluster has no tampering proxy in front of node0")
	}
	before := env.Tamper.Count(tamper.Huge)
	env.Tamper.SetMode(tamper.Huge)
	<-ctx.Done()
	env.Tamper.SetMode("")
	hits := env.Tamper.Count(tamper.Huge) - before
	t.mu.Lock()
	t.sent += hits
	t.bytes += int64(hits) * tamper.HugeBytes
	t.mu.Unlock()
	t.note("node0's proxy answered %d requests with %d MiB each", hits, tamper.HugeBytes>>20)
	return nil
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
}
