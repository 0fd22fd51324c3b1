package localnet

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// proc is one process of the network: its binary, arguments and files. The
// process is identified by its PID file plus one argument that names this
// run directory, so a PID reused by an unrelated process is never signalled.
type proc struct {
	name    string // "node2/cometbft"
	bin     string
	args    []string
	mark    string   // an argument only this process has (a path under Dir)
	env     []string // added to the inherited environment
	logPath string
	pidPath string
}

// start launches p in its own process group (a Ctrl-C in the terminal that
// ran `localnet up` must not reach it), output appended to its log. The
// returned channel closes when the process exits; the caller owns reaping.
func (p proc) start() (<-chan struct{}, error) {
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("start %s: open log: %w", p.name, err)
	}
	defer logf.Close()
	cmd := exec.Command(p.bin, p.args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if len(p.env) > 0 {
		cmd.Env = append(os.Environ(), p.env...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s (%s): %w", p.name, p.bin, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	if err := os.WriteFile(p.pidPath, []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644); err != nil {
		_ = cmd.Process.Kill()
		<-done
		return nil, fmt.Errorf("start %s: write PID file: %w", p.name, err)
	}
	return done, nil
}

// pid returns the PID of p if it is running, else 0.
func (p proc) pid() int {
	b, err := os.ReadFile(p.pidPath)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	if !isOurs(pid, p.mark) {
		return 0
	}
	return pid
}

// isOurs reports whether pid is a live (not zombie) process with mark among
// its arguments.
func isOurs(pid int, mark string) bool {
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	found := false
	for _, arg := range bytes.Split(cmdline, []byte{0}) {
		if string(arg) == mark {
			found = true
			break
		}
	}
	if !found {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name: "pid (comm) S ...".
	if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
		return false
	}
	return true
}

// signal sends sig to p if it is running and waits up to wait for it to exit.
// It reports whether the process was running.
func (p proc) signal(sig syscall.Signal, wait time.Duration) (bool, error) {
	pid := p.pid()
	if pid == 0 {
		return false, nil
	}
	if err := syscall.Kill(pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return true, fmt.Errorf("signal %s (pid %d): %w", p.name, pid, err)
	}
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		if !isOurs(pid, p.mark) {
			return true, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true, fmt.Errorf("%s (pid %d) still running %s after %s", p.name, pid, wait, sig)
}

// stop asks p to exit (SIGTERM), then kills it if it has not within grace.
func (p proc) stop(grace time.Duration) (bool, error) {
	was, err := p.signal(syscall.SIGTERM, grace)
	if err == nil {
		_ = os.Remove(p.pidPath)
		return was, nil
	}
	if _, err := p.signal(syscall.SIGKILL, 5*time.Second); err != nil {
		return true, err
	}
	_ = os.Remove(p.pidPath)
	return true, nil
}

// tail returns the last n lines of p's log, for error messages.
func (p proc) tail(n int) string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
