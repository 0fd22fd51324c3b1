package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ProcessStat is one process of the cluster over a run.
type ProcessStat struct {
	Name string `json:"name"`
	PID  int    `json:"pid"`
	// CPUSeconds is user+system CPU time spent during the run.
	CPUSeconds float64 `json:"cpu_seconds"`
	// PeakRSS is the process's peak resident set (VmHWM) at the end of the
	// run, in bytes: a peak over its whole life, not only the run.
	PeakRSS int64 `json:"peak_rss_bytes"`
	// RSS is its resident set at the end of the run, in bytes.
	RSS int64 `json:"rss_bytes"`
	// StartRSS is its resident set when the watch began, in bytes: with
	// RSS, whether memory grew over the run.
	StartRSS int64 `json:"start_rss_bytes"`
}

// Process names a process to watch.
type Process struct {
	Name string
	PID  int
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat's CPU times: 100 on
// every Linux architecture Go supports.
const clockTicks = 100

// cpuSeconds reads a process's user+system CPU time.
func cpuSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the parenthesised command: state is field 3, utime 14,
	// stime 15 (1-based, counting pid and comm).
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command field", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	u, err1 := strconv.ParseUint(f[11], 10, 64)
	s, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: bad utime/stime", pid)
	}
	return float64(u+s) / clockTicks, nil
}

// memory reads VmHWM and VmRSS, in bytes.
func memory(pid int) (peak, rss int64, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || (k != "VmHWM" && k != "VmRSS") {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			continue
		}
		if k == "VmHWM" {
			peak = kb << 10
		} else {
			rss = kb << 10
		}
	}
	return peak, rss, sc.Err()
}

// Watch snapshots the CPU time of ps now; the function it returns gives
// each one's CPU time since and its memory, skipping processes that went
// away.
func Watch(ps []Process) func() []ProcessStat {
	start := make(map[int]float64, len(ps))
	startRSS := make(map[int]int64, len(ps))
	for _, p := range ps {
		if c, err := cpuSeconds(p.PID); err == nil {
			start[p.PID] = c
		}
		if _, rss, err := memory(p.PID); err == nil {
			startRSS[p.PID] = rss
		}
	}
	return func() []ProcessStat {
		var out []ProcessStat
		for _, p := range ps {
			c0, ok := start[p.PID]
			c1, err := cpuSeconds(p.PID)
			if !ok || err != nil {
				continue
			}
			peak, rss, err := memory(p.PID)
			if err != nil {
				continue
			}
			out = append(out, ProcessStat{Name: p.Name, PID: p.PID, CPUSeconds: c1 - c0, PeakRSS: peak, RSS: rss, StartRSS: startRSS[p.PID]})
		}
		return out
	}
}

// RSSOf returns a function reading the resident set of each of ps now, by
// name, skipping processes that went away: Config.Sample.
func RSSOf(ps []Process) func() map[string]int64 {
	return func() map[string]int64 {
		out := make(map[string]int64, len(ps))
		for _, p := range ps {
			if _, rss, err := memory(p.PID); err == nil {
				out[p.Name] = rss
			}
		}
		return out
	}
}
