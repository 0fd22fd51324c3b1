package localnet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/pflag"
)

// What byzlog's commands share to run a local network: finding the binaries
// beside the running one, opening a network with the shape the flags ask
// for, and starting it with its services until the indexer is ready.

// OpenChecked opens (or prepares to create) the validator network in cfg.Dir
// with the binaries next to the running one.
func OpenChecked(f *pflag.FlagSet, cfg Config) (*Net, error) {
	bin := BinDir()
	cfg.CometBFT, cfg.App = FindBinary(bin, "cometbft"), FindBinary(bin, "byzlog-app")
	n, err := Open(cfg)
	if err != nil {
		return nil, err
	}
	if n.Existing() {
		if err := CheckShape(f, cfg, n.Config()); err != nil {
			return nil, err
		}
	}
	return n, nil
}

// StartAll brings the validators and the services up and waits until
// the indexer (if it runs) is ready; on failure it stops what it started.
func StartAll(ctx context.Context, n *Net, svc Services, progress io.Writer) error {
	if err := n.Up(ctx, progress); err != nil {
		if errors.Is(err, ErrRunning) {
			return fmt.Errorf("%w\n(is another `byzlog run` using %s? stop it with Ctrl-C there, or run `byzlog localnet down --dir %s`)", err, n.Config().Dir, n.Config().Dir)
		}
		return err
	}
	if err := n.StartServices(ctx, svc, progress); err != nil {
		_ = n.Down(io.Discard)
		return err
	}
	if svc.GatewaysOnly {
		return nil
	}
	line := StatusLine(progress)
	start := time.Now()
	for {
		ready, text := IndexerReady(ctx, svc)
		if ready {
			line("indexer ready: "+text, true)
			return nil
		}
		if time.Since(start) > 2*time.Minute || ctx.Err() != nil {
			line("", true)
			_ = n.Down(progress)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("the indexer was not ready within 2 minutes (%s); see %s/indexer/indexer.log", text, n.Config().Dir)
		}
		line(fmt.Sprintf("waiting for the indexer to catch up: %s (%s)", text, time.Since(start).Round(time.Second)), false)
		select {
		case <-time.After(250 * time.Millisecond):
		case <-ctx.Done():
		}
	}
}

// AddServiceTLSFlags adds how the localnet's gateways speak to clients.
func AddServiceTLSFlags(f *pflag.FlagSet, svc *Services) {
	f.BoolVar(&svc.Insecure, "insecure", false, "plaintext everywhere: the gateways, the nodes' RPC and NATS (default: TLS with certificates of the network's CA, DIR/tls/ca.pem; a network keeps the choice it was created with)")
	f.BoolVar(&svc.MutualTLS, "mutual-tls", false, "make the gateways require a client certificate of the network's CA (DIR/tls/client.pem)")
}

// IndexerReady asks the indexer's /readyz.
func IndexerReady(ctx context.Context, svc Services) (bool, string) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+svc.IndexerAddr()+"/readyz", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
	return resp.StatusCode == http.StatusOK, strings.TrimSpace(string(b))
}

// CheckShape refuses flags that would change an existing network's shape.
func CheckShape(f *pflag.FlagSet, want, have Config) error {
	mismatch := func(flag string, w, h any) error {
		return fmt.Errorf("--%s %v: the network in %s was created with %v; remove the directory to start afresh", flag, w, have.Dir, h)
	}
	switch {
	case f.Changed("validators") && want.Validators != have.Validators:
		return mismatch("validators", want.Validators, have.Validators)
	case f.Changed("base-port") && want.BasePort != have.BasePort:
		return mismatch("base-port", want.BasePort, have.BasePort)
	case f.Changed("transport") && want.Transport != have.Transport:
		return mismatch("transport", want.Transport, have.Transport)
	case f.Changed("snapshot-interval") && want.SnapshotInterval != have.SnapshotInterval:
		return mismatch("snapshot-interval", want.SnapshotInterval, have.SnapshotInterval)
	case f.Changed("retain-blocks") && want.RetainBlocks != have.RetainBlocks:
		return mismatch("retain-blocks", want.RetainBlocks, have.RetainBlocks)
	case f.Changed("admins") && want.Admins != have.Admins:
		return mismatch("admins", want.Admins, have.Admins)
	case f.Changed("admin-threshold") && want.AdminThreshold != have.AdminThreshold:
		return mismatch("admin-threshold", want.AdminThreshold, have.AdminThreshold)
	case f.Changed("timeout-commit") && want.TimeoutCommit != have.TimeoutCommit:
		return mismatch("timeout-commit", time.Duration(want.TimeoutCommit), time.Duration(have.TimeoutCommit))
	}
	return nil
}

// BinDir is the folder of the running binary (byzlog or byzlog-lab): `make build` puts
// cometbft and byzlog-app beside it.
func BinDir() string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	return filepath.Dir(exe)
}

// FindBinary is name in dir when it is there, else the one on PATH, else
// name itself (so an error names what is missing).
func FindBinary(dir, name string) string {
	if dir != "" {
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	return name
}
