package attack

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	neturl "net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/byzlog/byzlog/indexer/layout"
	"github.com/byzlog/byzlog/indexer/natsauth"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
)

// forbiddenReader reads the secret topic (env.Secret, whose one reader's
// key nobody here holds) every way NATS offers: as the consumer user
// (make a consumer of its stream, get its first message, subscribe to its
// subjects, subscribe to its reader's inbox) and as a key the topic does
// not list. Every try is a send; one the server lets through is accepted,
// and the row misses its goal (Attack.Unauthorized).
func forbiddenReader(ctx context.Context, env *Env, t *Tally) error {
	if env.NATSURL == "" || env.Secret == "" {
		return errors.New("forbidden-reader: the cluster has no NATS or no secret topic to attack")
	}
	nc, v, err := connectWatching(env, "forbidden-reader")
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	stream := layout.StreamName(env.Secret)
	subscribe := func(subject string) error {
		sub, err := nc.SubscribeSync(subject)
		if err != nil {
			return err
		}
		defer func() { _ = sub.Unsubscribe() }()
		if err := nc.FlushTimeout(time.Second); err != nil {
			return err
		}
		sleep(ctx, 100*time.Millisecond) // the refusal comes after the flush
		if last := v.last(); last != "" {
			return errors.New(last)
		}
		return nil
	}
	tries := []try{
		{"make a consumer of the secret topic's stream", func(ctx context.Context, i int) error {
			_, err := js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{Name: fmt.Sprintf("intruder-%d", i), InactiveThreshold: 10 * time.Second})
			return err
		}},
		{"get the secret topic's first message", func(ctx context.Context, _ int) error {
			st, err := js.Stream(ctx, stream)
			if err != nil {
				return err
			}
			_, err = st.GetMsg(ctx, 1)
			return err
		}},
		{"list the consumers of the phase's topic (to find a group's durable)", func(ctx context.Context, _ int) error {
			st, err := js.Stream(ctx, layout.StreamName(env.Topic))
			if err != nil {
				return err
			}
			names := st.ConsumerNames(ctx)
			for range names.Name() {
			}
			return names.Err()
		}},
		{"subscribe to the secret topic's subjects", func(context.Context, int) error { return subscribe(layout.TopicSubjects(env.Secret)) }},
		{"subscribe to every subject", func(context.Context, int) error { return subscribe(">") }},
		{"subscribe to the secret topic's reader's inbox", func(context.Context, int) error {
			return subscribe(natsauth.InboxPrefix(env.SecretReader) + ".>")
		}},
		{"connect as a key the secret topic does not list", func(context.Context, int) error {
			opts, err := natsauth.ReaderOptions(env.Stranger)
			if err != nil {
				return err
			}
			c, err := nats.Connect(env.NATSURL, append(append(opts, nats.Timeout(2*time.Second)), env.NATSTLS...)...)
			if err != nil {
				return err
			}
			c.Close()
			return nil
		}},
	}
	runTries(ctx, t, tries, 500*time.Millisecond, v, "NATS let an intruder %s")
	return nil
}

// foreignCA knocks on every TLS door with a client certificate another CA
// signed, and with none: the gateways' gRPC and HTTP faces (which require
// a certificate of the cluster's CA) and NATS in plaintext. Every try is a
// send; one let through is accepted, and the row misses its goal
// (Attack.Unauthorized).
func foreignCA(ctx context.Context, env *Env, t *Tally) error {
	if env.TLS == nil || env.Foreign == nil {
		return errors.New("foreign-ca: the cluster serves no TLS to attack")
	}
	noCert := env.TLS.Clone()
	noCert.Certificates = nil
	var tries []try
	for g, addr := range env.Gateways {
		for _, c := range []struct {
			what  string
			creds credentials.TransportCredentials
		}{
			{"a certificate of another CA", credentials.NewTLS(env.Foreign)},
			{"no client certificate", credentials.NewTLS(noCert)},
			{"plaintext", insecure.NewCredentials()},
		} {
			tries = append(tries, try{fmt.Sprintf("gateway%d gRPC with %s", g, c.what), func(ctx context.Context, _ int) error {
				conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(c.creds))
				if err != nil {
					return err
				}
				defer conn.Close()
				_, err = byzlogv1.NewGatewayClient(conn).ListTopics(ctx, &byzlogv1.ListTopicsRequest{})
				return err
			}})
		}
	}
	for g, addr := range env.GatewayHTTP {
		tries = append(tries, try{fmt.Sprintf("gateway%d HTTP with a certificate of another CA", g), func(ctx context.Context, _ int) error {
			hc := &http.Client{Timeout: time.Second, Transport: &http.Transport{TLSClientConfig: env.Foreign}}
			defer hc.CloseIdleConnections()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+"/v1/topics", nil)
			if err != nil {
				return err
			}
			resp, err := hc.Do(req)
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("HTTP %s", resp.Status)
			}
			return nil
		}})
	}
	tries = append(tries, try{"NATS in plaintext with the consumer's password", func(ctx context.Context, _ int) error {
		return plaintextNATS(ctx, env.NATSURL, env.NATSPassword)
	}})
	runTries(ctx, t, tries, 2*time.Second, nil, "let in: %s")
	return nil
}

// plaintextNATS speaks NATS's protocol without TLS to url's server: its
// INFO, then CONNECT as the consumer with password, then PING. A server
// that answers PONG let a plaintext client in.
func plaintextNATS(ctx context.Context, url, password string) error {
	u, err := neturl.Parse(url)
	if err != nil {
		return err
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", u.Host)
	if err != nil {
		return err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	r := bufio.NewReader(conn)
	if _, err := r.ReadString('\n'); err != nil { // INFO {...}
		return fmt.Errorf("read INFO: %w", err)
	}
	connect, err := json.Marshal(map[string]any{"user": "consumer", "pass": password, "verbose": false, "pedantic": false, "tls_required": false})
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(conn, "CONNECT %s\r\nPING\r\n", connect); err != nil {
		return err
	}
	line, err := r.ReadString('\n')
	if err != nil {
		return fmt.Errorf("no answer: %w", err)
	}
	if line = strings.TrimSpace(line); line != "PONG" {
		return errors.New(line)
	}
	return nil
}
