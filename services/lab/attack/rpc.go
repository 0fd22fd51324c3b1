package attack

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Tally counts what one attack sent and what the cluster made of it. It is
// safe for the attack's goroutines to share.
type Tally struct {
	mu       sync.Mutex
	sent     int
	bytes    int64
	accepted int
	refused  map[string]int
	errs     map[string]int
	notes    []string
}

func newTally() *Tally { return &Tally{refused: map[string]int{}, errs: map[string]int{}} }

// Stats is a Tally's final count.
type Stats struct {
	// Sent counts transactions, requests or connections; Bytes what they
	// carried.
	Sent  int   `json:"sent"`
	Bytes int64 `json:"bytes"`
	// Accepted is what the cluster took in (CheckTx code 0, a receipt).
	Accepted int `json:"accepted"`
	// Refused counts answers that said no, by their kind; Errors failures
	// to get an answer (refused connections, timeouts), by theirs.
	Refused map[string]int `json:"refused,omitempty"`
	Errors  map[string]int `json:"errors,omitempty"`
	Notes   []string       `json:"notes,omitempty"`
}

func (t *Tally) stats() Stats {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := Stats{Sent: t.sent, Bytes: t.bytes, Accepted: t.accepted, Refused: map[string]int{}, Errors: map[string]int{}, Notes: append([]string(nil), t.notes...)}
	for k, v := range t.refused {
		s.Refused[k] = v
	}
	for k, v := range t.errs {
		s.Errors[k] = v
	}
	return s
}

// count records one send of n bytes and its answer: accepted, refused
// (refusal says how) or failed (err).
func (t *Tally) count(n int, refusal string, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sent++
	t.bytes += int64(n)
	switch {
	case err != nil:
		t.errs[kind(err.Error())]++
	case refusal != "":
		t.refused[kind(refusal)]++
	default:
		t.accepted++
	}
}

func (t *Tally) note(format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.notes = append(t.notes, fmt.Sprintf(format, args...))
}

// Sent is how many sends the tally holds so far.
func (t *Tally) Sent() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.sent
}

// numbers are what kind blanks out: hex keys and hashes, and decimals.
var numbers = regexp.MustCompile(`[0-9a-fA-F]{8,}|[0-9]+`)

// kind shortens a message to what tells it apart from others: numbers and
// hex become '#', and at most 90 bytes are kept.
func kind(msg string) string {
	s := numbers.ReplaceAllString(msg, "#")
	if len(s) > 90 {
		s = s[:90]
		for len(s) > 0 && !utf8.ValidString(s) {
			s = s[:len(s)-1]
		}
	}
	return strings.TrimSpace(s)
}

// errAttackEnded is what a send still unanswered when its attack ended
// counts as.
var errAttackEnded = errors.New("no answer before the attack ended")

// summary is the tally's refusals and errors, most frequent first, for a
// table's notes.
func (s Stats) summary() string {
	type kv struct {
		k string
		n int
	}
	var all []kv
	for k, n := range s.Refused {
		all = append(all, kv{"refused: " + k, n})
	}
	for k, n := range s.Errors {
		all = append(all, kv{"error: " + k, n})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].n > all[j].n || (all[i].n == all[j].n && all[i].k < all[j].k) })
	var parts []string
	for i, e := range all {
		if i == 4 {
			parts = append(parts, fmt.Sprintf("%d more kinds", len(all)-4))
			break
		}
		parts = append(parts, fmt.Sprintf("%d× %s", e.n, e.k))
	}
	return strings.Join(parts, "; ")
}

// pacer spaces sends so that they carry at most rate bytes per second in
// all, shared by an attack's goroutines.
type pacer struct {
	mu   sync.Mutex
	rate float64
	next time.Time
}

func newPacer(bytesPerSecond int) *pacer { return &pacer{rate: float64(bytesPerSecond)} }

// wait reserves n bytes and sleeps until they may go; false when ctx ended.
func (p *pacer) wait(ctx context.Context, n int) bool {
	p.mu.Lock()
	now := time.Now()
	if p.next.Before(now) {
		p.next = now
	}
	at := p.next
	p.next = p.next.Add(time.Duration(float64(n) / p.rate * float64(time.Second)))
	p.mu.Unlock()
	select {
	case <-time.After(time.Until(at)):
		return true
	case <-ctx.Done():
		return false
	}
}

// broadcastTxSync submits tx with client to a node's CometBFT RPC URL
// and returns the refusal ("" when CheckTx passed: code 0), or an error when
// no answer came (the node is down, or answered a JSON-RPC error such as
// "tx already exists in cache").
func broadcastTxSync(ctx context.Context, client *http.Client, rpc string, tx []byte) (refusal string, err error) {
	req, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "broadcast_tx_sync", "params": map[string]any{"tx": tx}})
	if err != nil {
		return "", err
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, rpc, bytes.NewReader(req))
	if err != nil {
		return "", err
	}
	hreq.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(hreq)
	if err != nil {
		return "", fmt.Errorf("broadcast_tx_sync: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", fmt.Errorf("broadcast_tx_sync: read the answer: %w", err)
	}
	return parseBroadcast(body)
}

// parseBroadcast reads a broadcast_tx_sync answer.
func parseBroadcast(body []byte) (refusal string, err error) {
	var msg struct {
		Result *struct {
			Code uint32 `json:"code"`
			Log  string `json:"log"`
		} `json:"result"`
		Error *struct {
			Message string `json:"message"`
			Data    string `json:"data"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &msg); err != nil {
		return "", fmt.Errorf("broadcast_tx_sync: the answer is no JSON-RPC response: %w", err)
	}
	switch {
	case msg.Error != nil:
		return "", fmt.Errorf("broadcast_tx_sync: %s: %s", msg.Error.Message, msg.Error.Data)
	case msg.Result == nil:
		return "", fmt.Errorf("broadcast_tx_sync: the answer has neither result nor error")
	case msg.Result.Code != 0:
		return fmt.Sprintf("code %d: %s", msg.Result.Code, msg.Result.Log), nil
	}
	return "", nil
}
