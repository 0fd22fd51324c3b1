//go:build e2e

package e2e

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cmttypes "github.com/cometbft/cometbft/types"

	"github.com/byzlog/byzlog/gateway/client"
	"github.com/byzlog/byzlog/services/internal/localnet"
)

// TestValidatorSetChanges changes the validator set of a running chain by
// admin requests with the admin set's threshold (2 of 3): a fifth validator
// is added (its node is not running, so the four keep a 4/5 majority), the
// chain and the light clients follow the new set, and it is removed again
// with a request signed, cosigned and submitted by three CLI runs. One
// signature is refused, and so is a removal that would leave 3 validators.
func TestValidatorSetChanges(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	bin := binDir(t)
	n, _ := startNetWith(ctx, t, 3500, func(c *localnet.Config) { c.Admins, c.AdminThreshold = 3, 2 })
	cfg := n.Config()
	gw := startGateway(t, n, fmt.Sprintf("127.0.0.1:%d", cfg.BasePort+900))
	keys, err := n.AdminKeys()
	if err != nil {
		t.Fatal(err)
	}
	alone, err := client.NewAdmin(gw.addr, keys[0], trustOf(t, n), tlsOpt(t, n))
	if err != nil {
		t.Fatal(err)
	}
	defer alone.Close()
	adm, err := client.NewAdmin(gw.addr, keys[0], trustOf(t, n), tlsOpt(t, n), client.WithCosigners(keys[1]))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()

	_, genesisSet, err := adm.Validators(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if genesisSet.Size() != 4 {
		t.Fatalf("genesis validators: %d, want 4", genesisSet.Size())
	}
	power := max(genesisSet.TotalVotingPower()/4, 1) // at most a third of the total
	newKey, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}

	if _, err := alone.SetValidator(ctx, newKey, power); err == nil || !strings.Contains(err.Error(), "below_threshold") {
		t.Fatalf("a validator change signed by one admin of a 2-of-3 set = %v, want below_threshold", err)
	}
	h, err := adm.SetValidator(ctx, newKey, power)
	if err != nil {
		t.Fatalf("add a fifth validator: %v", err)
	}
	t.Logf("fifth validator (power %d) added at height %d", power, h)
	waitValidators(ctx, t, adm, h+2, 5)

	// The chain goes on with the fifth validator's node down: records
	// still commit, through receipts verified against the new set.
	createTopicVia(ctx, t, n, gw.addr, "after", 1)

	// Removed again by three CLI runs: sign, cosign, submit.
	req := filepath.Join(t.TempDir(), "remove.json")
	gen, gwFlag, tlsFlag := "--genesis="+n.GenesisPath(), "--gateway="+gw.addr, "--tls-ca="+n.TLS().CA()
	b64 := base64.StdEncoding.EncodeToString(newKey)
	cli := func(args ...string) string {
		t.Helper()
		cctx, ccancel := context.WithTimeout(ctx, 2*time.Minute)
		defer ccancel()
		out, err := exec.CommandContext(cctx, filepath.Join(bin, "byzlog"), args...).CombinedOutput()
		if err != nil {
			t.Fatalf("byzlog %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	out := cli("validator", "remove", b64, "--admin-key", n.AdminKeyPathOf(2), "--sign-only", req, gen, gwFlag, tlsFlag)
	if !strings.Contains(out, "remove validator "+b64) {
		t.Fatalf("validator remove --sign-only said %q, want it to describe the removal", out)
	}
	out = cli("admin", "cosign", req, "--admin-key", n.AdminKeyPathOf(1), gen)
	t.Logf("%s", out)
	out = cli("admin", "submit", req, gen, gwFlag, tlsFlag)
	var removedAt int64
	if _, err := fmt.Sscanf(out, "committed at height %d", &removedAt); err != nil {
		t.Fatalf("admin submit said %q: %v", out, err)
	}
	waitValidators(ctx, t, adm, removedAt+2, 4)
	if out := cli("validator", "list", gen, gwFlag, tlsFlag); !strings.Contains(out, ": 4, total power") || strings.Contains(out, b64) {
		t.Fatalf("validator list after the removal:\n%s\nwant the 4 genesis validators", out)
	}

	// Four is the floor.
	last := genesisSet.Validators[3].PubKey.Bytes()
	_, err = adm.SetValidator(ctx, last, 0)
	if err == nil || !strings.Contains(err.Error(), "would leave 3 validators") {
		t.Fatalf("remove one of 4 validators = %v, want a refusal saying it would leave 3", err)
	}
	createTopicVia(ctx, t, n, gw.addr, "end", 1)
}

// waitValidators waits until the verified validator set at height from on
// has want validators.
func waitValidators(ctx context.Context, t *testing.T, adm *client.Admin, from int64, want int) *cmttypes.ValidatorSet {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		h, vs, err := adm.Validators(ctx)
		if err == nil && h >= from && vs.Size() == want {
			t.Logf("height %d: %d validators, total power %d", h, vs.Size(), vs.TotalVotingPower())
			return vs
		}
		if time.Now().After(deadline) {
			size := -1
			if vs != nil {
				size = vs.Size()
			}
			t.Fatalf("validators at height >= %d: want %d, have %d at height %d (%v)", from, want, size, h, err)
		}
		time.Sleep(300 * time.Millisecond)
	}
}
