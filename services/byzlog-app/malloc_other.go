//go:build !linux || !cgo

package main

// mallocArenaCap is 0: the arena cap is glibc's (malloc.go).
func mallocArenaCap() int { return 0 }
