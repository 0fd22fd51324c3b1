//go:build linux && cgo

package main

/*
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

// byzlogArenaMax is the cap set before main (0: none: the environment
// chose, or this is not glibc).
static int byzlogArenaMax;

// byzlogEnvChose reports whether the environment sets the arena limit:
// MALLOC_ARENA_MAX, or glibc.malloc.arena_max among GLIBC_TUNABLES (which
// may carry unrelated tunables).
static int byzlogEnvChose(void) {
	const char *max = getenv("MALLOC_ARENA_MAX");
	const char *tunables = getenv("GLIBC_TUNABLES");
	return (max != NULL && max[0] != 0) || (tunables != NULL && strstr(tunables, "glibc.malloc.arena_max") != NULL);
}

// byzlogLimitArenas runs as the binary loads, before the Go runtime, gRPC
// or RocksDB starts a thread. glibc gives each new thread that mallocs an
// arena of its own, up to 8 per core, and keeps the ones made: the cap has
// to be in place before those threads start.
__attribute__((constructor)) static void byzlogLimitArenas(void) {
#ifdef __GLIBC__
	if (!byzlogEnvChose() && mallopt(M_ARENA_MAX, 2) == 1) {
		byzlogArenaMax = 2;
	}
#endif
}

static int byzlogArenaCap(void) { return byzlogArenaMax; }

// byzlogArenas counts the arenas glibc has made (malloc_info's heaps), -1
// when it cannot tell.
static int byzlogArenas(void) {
#ifdef __GLIBC__
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	if (f == NULL) {
		return -1;
	}
	int bad = malloc_info(0, f) != 0;
	bad |= fclose(f) != 0;
	if (bad || buf == NULL) {
		free(buf);
		return -1;
	}
	int n = 0;
	for (char *p = buf; (p = strstr(p, "<heap nr=")) != NULL; p++) {
		n++;
	}
	free(buf);
	return n;
#else
	return -1;
#endif
}

// byzlogTouch mallocs and frees on the calling thread, which gives the
// thread an arena if it had none.
static void byzlogTouch(void) {
	void *volatile p = malloc(4096);
	free(p);
}
*/
import "C"

// glibc gives each thread that mallocs an arena of its own, up to 8 per
// core, and RocksDB's allocations from its many threads (memtables, table
// readers, compactions) leave partly used arenas behind: in a 10-minute
// soak at 23,000 records/s each app's RSS crept from ~400 to ~580 MiB, the
// growth in those arenas and not in the Go heap (docs/benchmarks.md). So
// byzlog-app caps them at 2 (glibc's M_ARENA_MAX) as it loads, unless
// MALLOC_ARENA_MAX or glibc.malloc.arena_max in GLIBC_TUNABLES say
// otherwise. The same cap set from Go, after the runtime, gRPC and RocksDB
// had started their threads, left the RSS as it was in a soak.

// mallocArenaCap is the cap set as the binary loaded, 0 for none.
func mallocArenaCap() int { return int(C.byzlogArenaCap()) }

// mallocArenas is how many arenas glibc has made so far (-1: unknown).
func mallocArenas() int { return int(C.byzlogArenas()) }

// mallocEnvChose reports whether MALLOC_ARENA_MAX or GLIBC_TUNABLES set
// the arena limit, so the cap was left to them.
func mallocEnvChose() bool { return C.byzlogEnvChose() != 0 }

// mallocOnThisThread mallocs once on the calling OS thread.
func mallocOnThisThread() { C.byzlogTouch() }
