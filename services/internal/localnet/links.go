package localnet

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
)

// Links is the loopback proxy layer of a network created with
// PeerProxies: one TCP proxy per ordered pair of nodes, so that a test can
// cut the links between groups of nodes — a network partition without
// network namespaces or firewall rules. A cut link closes its open
// connections and refuses new ones until healed.
type Links struct {
	cfg       Config
	listeners []net.Listener
	wg        sync.WaitGroup

	mu     sync.Mutex
	closed bool
	cut    map[[2]int]bool
	conns  map[[2]int]map[net.Conn]bool
}

// StartLinks listens on every PeerProxyPort of cfg and forwards each link
// to its node's p2p port. Close stops it.
func StartLinks(cfg Config) (*Links, error) {
	if !cfg.PeerProxies {
		return nil, errors.New("links: the network was not created with peer_proxies")
	}
	l := &Links{cfg: cfg, cut: map[[2]int]bool{}, conns: map[[2]int]map[net.Conn]bool{}}
	for i := 0; i < cfg.Validators; i++ {
		for j := 0; j < cfg.Validators; j++ {
			if i == j {
				continue
			}
			ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", cfg.PeerProxyPort(i, j)))
			if err != nil {
				l.Close()
				return nil, fmt.Errorf("links: node%d→node%d proxy: %w", i, j, err)
			}
			l.listeners = append(l.listeners, ln)
			l.wg.Add(1)
			go l.serve(ln, [2]int{i, j})
		}
	}
	return l, nil
}

func (l *Links) serve(ln net.Listener, link [2]int) {
	defer l.wg.Done()
	for {
		in, err := ln.Accept()
		if err != nil {
			return // closed
		}
		l.mu.Lock()
		cut := l.cut[link]
		l.mu.Unlock()
		if cut {
			in.Close()
			continue
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			l.forward(in, link)
		}()
	}
}

// forward pipes in to node link[1]'s p2p port until either side closes
// or the link is cut.
func (l *Links) forward(in net.Conn, link [2]int) {
	out, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", l.cfg.P2PPort(link[1])))
	if err != nil {
		in.Close()
		return
	}
	l.mu.Lock()
	if l.cut[link] || l.closed {
		l.mu.Unlock()
		in.Close()
		out.Close()
		return
	}
	if l.conns[link] == nil {
		l.conns[link] = map[net.Conn]bool{}
	}
	l.conns[link][in], l.conns[link][out] = true, true
	l.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(out, in); done <- struct{}{} }()
	go func() { _, _ = io.Copy(in, out); done <- struct{}{} }()
	<-done
	in.Close()
	out.Close()
	<-done
	l.mu.Lock()
	delete(l.conns[link], in)
	delete(l.conns[link], out)
	l.mu.Unlock()
}

// Partition cuts every link between nodes of different groups, both ways;
// links within a group stay. Nodes in no group are cut from everyone.
func (l *Links) Partition(groups ...[]int) {
	group := map[int]int{}
	for g, nodes := range groups {
		for _, n := range nodes {
			group[n] = g + 1
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := 0; i < l.cfg.Validators; i++ {
		for j := 0; j < l.cfg.Validators; j++ {
			if i == j || (group[i] != 0 && group[i] == group[j]) {
				continue
			}
			link := [2]int{i, j}
			l.cut[link] = true
			for c := range l.conns[link] {
				c.Close()
			}
		}
	}
}

// Heal restores every link.
func (l *Links) Heal() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cut = map[[2]int]bool{}
}

// Close stops every proxy and closes its connections.
func (l *Links) Close() {
	for _, ln := range l.listeners {
		ln.Close()
	}
	l.mu.Lock()
	l.closed = true
	for _, cs := range l.conns {
		for c := range cs {
			c.Close()
		}
	}
	l.mu.Unlock()
	l.wg.Wait()
}
