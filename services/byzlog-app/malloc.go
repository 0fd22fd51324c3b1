//go:build linux && cgo

package main

/*
#define _GNU_SOURCE
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// byzlogArenaMax is the cap set before main (0: none: the environment chose,
// or mallopt refused).
static int byzlogArenaMax;

// byzlogLimitArenas runs as the binary loads, before the Go runtime or
// RocksDB starts a thread: glibc fixes its arena limit the first time a
// thread needs an arena past the eighth, and gives each new thread that
// mallocs an arena of its own until then, so a cap set from Go (after the
// runtime's threads are up) came too late to matter. MALLOC_ARENA_MAX or
// GLIBC_TUNABLES in the environment win.
__attribute__((constructor)) static void byzlogLimitArenas(void) {
	if (getenv("MALLOC_ARENA_MAX") != NULL || getenv("GLIBC_TUNABLES") != NULL) {
		return;
	}
	if (mallopt(M_ARENA_MAX, 2) == 1) {
		byzlogArenaMax = 2;
	}
}

static int byzlogArenaCap(void) { return byzlogArenaMax; }

// byzlogArenas counts the arenas glibc has made (malloc_info's heaps).
static int byzlogArenas(void) {
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	if (f == NULL) {
		return -1;
	}
	malloc_info(0, f);
	fclose(f);
	int n = 0;
	for (char *p = buf; (p = strstr(p, "<heap nr=")) != NULL; p++) {
		n++;
	}
	free(buf);
	return n;
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
// MALLOC_ARENA_MAX or GLIBC_TUNABLES say otherwise.

// mallocArenaCap is the cap set as the binary loaded, 0 for none.
func mallocArenaCap() int { return int(C.byzlogArenaCap()) }

// mallocArenas is how many arenas glibc has made so far (-1: unknown).
func mallocArenas() int { return int(C.byzlogArenas()) }

// mallocOnThisThread mallocs once on the calling OS thread.
func mallocOnThisThread() { C.byzlogTouch() }
