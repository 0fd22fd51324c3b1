//go:build linux && cgo

package main

import (
	"runtime"
	"sync"
	"testing"
)

// TestMallocArenasCapped: threads that each malloc share the 2 arenas
// capped as the binary loaded, instead of getting one each (glibc would
// make up to 8 per core).
func TestMallocArenasCapped(t *testing.T) {
	if mallocEnvChose() {
		// The environment set the limit: the constructor must have left it alone.
		if got := mallocArenaCap(); got != 0 {
			t.Fatalf("MALLOC_ARENA_MAX or glibc.malloc.arena_max is set, yet the constructor capped the arenas at %d", got)
		}
		return
	}
	if got := mallocArenaCap(); got != 2 {
		t.Fatalf("arena cap set at load = %d, want 2", got)
	}
	const threads = 24
	var ready, done sync.WaitGroup
	release := make(chan struct{})
	for range threads {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			runtime.LockOSThread() // held to the end: the thread exits with the goroutine
			mallocOnThisThread()
			ready.Done()
			<-release // every thread alive at once, each holding its arena
		}()
	}
	ready.Wait()
	n := mallocArenas()
	close(release)
	done.Wait()
	if n < 1 || n > 2 {
		t.Errorf("%d threads that malloc made %d arenas, want at most 2", threads, n)
	}
}
