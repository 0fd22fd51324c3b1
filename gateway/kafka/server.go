package kafka

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"

	"github.com/rs/zerolog"
	"golang.org/x/sync/semaphore"
)

// Server is the Kafka face of one gateway.
type Server struct {
	cfg     Config
	b       Backend
	log     zerolog.Logger
	brokers []Broker

	buffered *semaphore.Weighted // request bytes in progress, server-wide
	workers  chan struct{}       // batches decoded and signed at once
	connMu   sync.Mutex
	conns    int
	perIP    map[string]int
	topics   *topicCache
	seqs     *sequencer
	groups   *groups
	peers    *peers
	nonces   *nonces
	creating creations
	sessions fetchSessions
}

// New checks cfg and returns a server for b.
func New(cfg Config, b Backend, log zerolog.Logger) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	brokers, err := cfg.brokers()
	if err != nil {
		return nil, err
	}
	return &Server{
		cfg: cfg, b: b, log: log, brokers: brokers,
		buffered: semaphore.NewWeighted(cfg.MaxBufferedBytes),
		perIP:    map[string]int{},
		workers:  make(chan struct{}, cfg.MaxWorkers),
		topics:   &topicCache{b: b.Reads, ttl: cfg.TopicsTTL},
		seqs:     newSequencer(b.Log),
		groups:   newGroups(cfg.InitialRebalanceDelay),
		peers:    &peers{seen: map[int32]peerSeen{}},
		nonces:   &nonces{b: b.Groups, keys: map[string]*counter{}},
	}, nil
}

// Listen opens the configured listener.
func (s *Server) Listen() (net.Listener, error) {
	ln, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("kafka listen %s: %w", s.cfg.Listen, err)
	}
	return ln, nil
}

// Serve accepts connections on ln until ctx is done, then closes ln and
// every connection and returns once their goroutines have ended.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	defer s.creating.wg.Wait() // after cancel: creations end with the server
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	s.creating.mu.Lock()
	s.creating.serving = ctx
	s.creating.mu.Unlock()
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	for {
		nc, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("kafka accept: %w", err)
		}
		ip := remoteIP(nc)
		if !s.admitConn(ip) {
			nc.Close()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer s.releaseConn(ip)
			c := newConn(s, nc)
			c.serve(ctx)
		}()
	}
}

func remoteIP(nc net.Conn) string {
	host, _, err := net.SplitHostPort(nc.RemoteAddr().String())
	if err != nil {
		return nc.RemoteAddr().String()
	}
	return host
}

// admitConn counts a new connection from ip, refusing it past MaxConns
// or MaxConnsPerIP, so one address cannot take every slot.
func (s *Server) admitConn(ip string) bool {
	s.connMu.Lock()
	defer s.connMu.Unlock()
	if s.conns >= s.cfg.MaxConns || s.perIP[ip] >= s.cfg.MaxConnsPerIP {
		s.log.Warn().Str("remote_ip", ip).Int("open", s.conns).Int("from_ip", s.perIP[ip]).Msg("kafka connection refused: too many open")
		return false
	}
	s.conns++
	s.perIP[ip]++
	return true
}

func (s *Server) releaseConn(ip string) {
	s.connMu.Lock()
	defer s.connMu.Unlock()
	s.conns--
	if s.perIP[ip]--; s.perIP[ip] == 0 {
		delete(s.perIP, ip)
	}
}
