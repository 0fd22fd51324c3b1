package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sync"
	"time"
)

// ProfileTarget is a process serving /debug/pprof/ (its --pprof-listen).
type ProfileTarget struct {
	Name string // file name stem: <Name>.cpu.pprof, <Name>.heap.pprof
	Addr string // host:port
}

// CollectProfiles takes a CPU profile of length d from every target at
// once, and of this process (the load generator: producers and consumer,
// load-generator.cpu.pprof), then a heap profile of each target, and
// writes them to dir. Read them with `go tool pprof -top DIR/NAME.cpu.pprof`.
func CollectProfiles(ctx context.Context, dir string, targets []ProfileTarget, d time.Duration) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	secs := max(1, int(d/time.Second))
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := profileSelf(ctx, filepath.Join(dir, "load-generator.cpu.pprof"), d); err != nil {
			mu.Lock()
			errs = append(errs, fmt.Errorf("load generator cpu profile: %w", err))
			mu.Unlock()
		}
	}()
	for _, t := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, p := range []struct{ kind, path string }{
				{"cpu", fmt.Sprintf("/debug/pprof/profile?seconds=%d", secs)},
				{"heap", "/debug/pprof/heap"},
			} {
				if err := fetchProfile(ctx, "http://"+t.Addr+p.path, filepath.Join(dir, t.Name+"."+p.kind+".pprof"), d+30*time.Second); err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("%s %s profile: %w", t.Name, p.kind, err))
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// profileSelf writes a CPU profile of this process over d to path.
func profileSelf(ctx context.Context, path string, d time.Duration) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return err
	}
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
	pprof.StopCPUProfile()
	return f.Close()
}

func fetchProfile(ctx context.Context, url, path string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s: %s: %s", url, resp.Status, b)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
