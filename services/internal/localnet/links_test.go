package localnet

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"testing"
	"time"
)

// echoNode serves node i's p2p port with an echo server.
func echoNode(t *testing.T, cfg Config, i int) {
	t.Helper()
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", cfg.P2PPort(i)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); c.Close() }()
		}
	}()
}

// roundTrip sends a line through c and reads it back.
func roundTrip(c net.Conn, line string) error {
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := fmt.Fprintln(c, line); err != nil {
		return err
	}
	got, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if got != line+"\n" {
		return fmt.Errorf("echo %q, want %q", got, line)
	}
	return nil
}

func TestLinksPartitionAndHeal(t *testing.T) {
	cfg := Config{Validators: 3, BasePort: 21310, PeerProxies: true} // ports below the ephemeral range (32768 on), which other tests' connections take
	for i := 0; i < cfg.Validators; i++ {
		echoNode(t, cfg, i)
	}
	l, err := StartLinks(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	dial := func(i, j int) net.Conn {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", cfg.PeerProxyPort(i, j)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	c01, c12 := dial(0, 1), dial(1, 2)
	if err := roundTrip(c01, "hello 1"); err != nil {
		t.Fatalf("0→1 before the partition: %v", err)
	}
	if err := roundTrip(c12, "hello 2"); err != nil {
		t.Fatalf("1→2 before the partition: %v", err)
	}

	l.Partition([]int{0}, []int{1, 2})
	if err := roundTrip(c01, "cut"); err == nil {
		t.Fatal("0→1: an open connection still carries data after 0 was cut off")
	}
	if err := roundTrip(dial(1, 0), "cut"); err == nil {
		t.Fatal("1→0: a new connection carries data after 0 was cut off")
	}
	if err := roundTrip(c12, "same side"); err != nil {
		t.Fatalf("1→2, same side of the partition: %v", err)
	}

	l.Heal()
	if err := roundTrip(dial(0, 1), "healed"); err != nil {
		t.Fatalf("0→1 after the heal: %v", err)
	}
	if _, err := StartLinks(Config{Validators: 2, BasePort: 21410}); err == nil {
		t.Fatal("StartLinks without peer_proxies succeeded")
	}
}
