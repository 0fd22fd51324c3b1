package kafka

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// answerer finishes a started request: it waits for what the request
// set going and returns the response.
type answerer func(ctx context.Context) (kmsg.Response, error)

// answered is an answerer of a response already made.
func answered(resp kmsg.Response, err error) answerer {
	return func(context.Context) (kmsg.Response, error) { return resp, err }
}

// start runs the part of req that must happen in the connection's request
// order, on the reading goroutine, and returns the rest, which may run
// concurrently with later requests:
//   - Produce: every batch is placed in its partition (produce.go);
//   - OffsetCommit: the commit has its nonce and is in a node's mempool
//     (commit.go), so a member's commits apply in the order it sent them;
//   - OffsetFetch: the connection's earlier commits are answered, so it
//     reads what they wrote;
//   - CreateTopics, DeleteTopics, CreatePartitions, DeleteRecords, the
//     config changes and the group deletions: done whole, as they are rare
//     and a later request may depend on them.
//
// Other requests only read, or wait on others (JoinGroup waits for the
// group's members): they start at once.
func (c *conn) start(ctx context.Context, req kmsg.Request) answerer {
	switch r := req.(type) {
	case *kmsg.ProduceRequest:
		return c.produce(ctx, r)
	case *kmsg.OffsetCommitRequest:
		return c.offsetCommit(ctx, r)
	case *kmsg.OffsetFetchRequest:
		c.commits.Wait()
	case *kmsg.CreateTopicsRequest, *kmsg.DeleteTopicsRequest, *kmsg.CreatePartitionsRequest,
		*kmsg.AlterConfigsRequest, *kmsg.IncrementalAlterConfigsRequest, *kmsg.DeleteRecordsRequest,
		*kmsg.DeleteGroupsRequest, *kmsg.OffsetDeleteRequest:
		return answered(c.handle(ctx, req))
	}
	return func(ctx context.Context) (kmsg.Response, error) { return c.handle(ctx, req) }
}

// handle answers one request. A nil response writes nothing (acks=0); an
// error closes the connection, as a broker does on a protocol violation.
func (c *conn) handle(ctx context.Context, req kmsg.Request) (kmsg.Response, error) {
	switch r := req.(type) {
	case *kmsg.ApiVersionsRequest:
		resp := r.ResponseKind().(*kmsg.ApiVersionsResponse)
		resp.ApiKeys = apiKeys()
		return resp, nil
	case *kmsg.SASLHandshakeRequest:
		return c.saslHandshake(r), nil
	case *kmsg.SASLAuthenticateRequest:
		return c.saslAuthenticate(r)
	case *kmsg.MetadataRequest:
		return c.metadata(ctx, r), nil
	case *kmsg.FetchRequest:
		return c.fetch(ctx, r), nil
	case *kmsg.ListOffsetsRequest:
		return c.listOffsets(ctx, r), nil
	case *kmsg.FindCoordinatorRequest:
		return c.findCoordinator(ctx, r), nil
	case *kmsg.OffsetFetchRequest:
		return c.offsetFetch(ctx, r), nil
	case *kmsg.CreateTopicsRequest:
		return c.createTopics(ctx, r), nil
	case *kmsg.DeleteTopicsRequest:
		return c.deleteTopics(ctx, r), nil
	case *kmsg.CreatePartitionsRequest:
		return c.createPartitions(ctx, r), nil
	case *kmsg.DescribeConfigsRequest:
		return c.describeConfigs(ctx, r), nil
	case *kmsg.AlterConfigsRequest:
		return c.alterConfigs(ctx, r), nil
	case *kmsg.IncrementalAlterConfigsRequest:
		return c.incrementalAlterConfigs(ctx, r), nil
	case *kmsg.DeleteRecordsRequest:
		return c.deleteRecords(ctx, r), nil
	case *kmsg.ListGroupsRequest:
		return c.listGroups(ctx, r), nil
	case *kmsg.DescribeGroupsRequest:
		return c.describeGroups(ctx, r), nil
	case *kmsg.DeleteGroupsRequest:
		return c.deleteGroups(ctx, r), nil
	case *kmsg.OffsetDeleteRequest:
		return c.offsetDelete(ctx, r), nil
	case *kmsg.DescribeClusterRequest:
		return c.describeCluster(r), nil
	case *kmsg.DescribeLogDirsRequest:
		return c.describeLogDirs(ctx, r), nil
	case *kmsg.OffsetForLeaderEpochRequest:
		return c.offsetForLeaderEpoch(ctx, r), nil
	case *kmsg.DescribeUserSCRAMCredentialsRequest:
		return c.describeUserScram(r), nil
	case *kmsg.AlterUserSCRAMCredentialsRequest:
		return c.alterUserScram(r), nil
	}
	if resp, ok := c.handleTxn(ctx, req); ok {
		return resp, nil
	}
	return c.handleMembership(ctx, req)
}

// handleTxn answers the requests of producer ids and transactions, and
// reports whether req was one.
func (c *conn) handleTxn(ctx context.Context, req kmsg.Request) (kmsg.Response, bool) {
	switch r := req.(type) {
	case *kmsg.InitProducerIDRequest:
		if r.TransactionalID != nil {
			return c.initTxnProducer(ctx, r), true
		}
		return c.initProducerID(r), true
	case *kmsg.AddPartitionsToTxnRequest:
		return c.addPartitionsToTxn(ctx, r), true
	case *kmsg.AddOffsetsToTxnRequest:
		return c.addOffsetsToTxn(ctx, r), true
	case *kmsg.TxnOffsetCommitRequest:
		return c.txnOffsetCommit(ctx, r), true
	case *kmsg.EndTxnRequest:
		return c.endTxn(ctx, r), true
	case *kmsg.DescribeTransactionsRequest:
		return c.describeTransactions(ctx, r), true
	case *kmsg.ListTransactionsRequest:
		return c.listTransactions(ctx, r), true
	case *kmsg.DescribeProducersRequest:
		return c.describeProducers(ctx, r), true
	}
	return nil, false
}

// handleMembership answers a group member's requests (join, sync,
// heartbeat, leave) when this gateway coordinates the group, and refuses
// any other request as not served.
func (c *conn) handleMembership(ctx context.Context, req kmsg.Request) (kmsg.Response, error) {
	if group, ok := groupOf(req); ok && !c.coordinates(ctx, group) {
		return notCoordinator(req), nil
	}
	switch r := req.(type) {
	case *kmsg.JoinGroupRequest:
		return c.s.groups.join(ctx, r, c.client()), nil
	case *kmsg.SyncGroupRequest:
		return c.s.groups.sync(ctx, r), nil
	case *kmsg.HeartbeatRequest:
		return c.s.groups.heartbeat(r), nil
	case *kmsg.LeaveGroupRequest:
		return c.s.groups.leave(r), nil
	}
	return nil, fmt.Errorf("%w: key %d", errNotServed, req.Key())
}

// saslHandshake picks the mechanism of the SaslAuthenticate requests that
// follow.
func (c *conn) saslHandshake(r *kmsg.SASLHandshakeRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.SASLHandshakeResponse)
	if c.s.cfg.Auth == nil {
		resp.ErrorCode = kerr.IllegalSaslState.Code
		return resp
	}
	resp.SupportedMechanisms = c.s.cfg.Auth.Mechanisms()
	if c.principal != nil {
		resp.ErrorCode = kerr.IllegalSaslState.Code
		return resp
	}
	for _, m := range resp.SupportedMechanisms {
		if m == r.Mechanism {
			c.mechanism, c.session = m, nil
			c.rawSASL = r.Version == 0
			return resp
		}
	}
	resp.ErrorCode = kerr.UnsupportedSaslMechanism.Code
	return resp
}

// saslAuthenticate carries one step of the exchange. A failed exchange is
// answered, then the connection closes (Kafka does the same).
func (c *conn) saslAuthenticate(r *kmsg.SASLAuthenticateRequest) (kmsg.Response, error) {
	resp := r.ResponseKind().(*kmsg.SASLAuthenticateResponse)
	if c.mechanism == "" || c.principal != nil {
		resp.ErrorCode = kerr.IllegalSaslState.Code
		msg := "SaslAuthenticate before SaslHandshake chose a mechanism, or after authenticating"
		resp.ErrorMessage = &msg
		return resp, nil
	}
	if c.session == nil {
		s, err := c.s.cfg.Auth.Start(c.mechanism)
		if err != nil {
			return c.authFailed(resp, err), nil
		}
		c.session = s
	}
	var reply []byte
	var done bool
	// A step may derive a key (PLAIN runs PBKDF2): it takes a worker slot,
	// so logins cannot take all the CPU.
	err := c.work(context.Background(), func() (err error) {
		reply, done, err = c.session.Step(r.SASLAuthBytes)
		return err
	})
	if err != nil {
		return c.authFailed(resp, err), nil
	}
	resp.SASLAuthBytes = reply
	if done {
		c.authenticated()
	}
	return resp, nil
}

// authenticated ends a successful exchange: the connection acts as its
// principal from the next request on.
func (c *conn) authenticated() {
	p := c.session.Principal()
	c.principal, c.session, c.rawSASL = &p, nil, false
	c.log = c.log.With().Str("principal", p.Name).Logger()
	c.log.Debug().Str("mechanism", c.mechanism).Msg("kafka client authenticated")
}

// rawStep runs one bare SASL message after a SaslHandshake v0. A failure
// closes the connection: v0 has no way to answer it.
func (c *conn) rawStep(msg []byte) ([]byte, error) {
	if c.session == nil {
		s, err := c.s.cfg.Auth.Start(c.mechanism)
		if err != nil {
			return nil, err
		}
		c.session = s
	}
	var reply []byte
	var done bool
	err := c.work(context.Background(), func() (err error) {
		reply, done, err = c.session.Step(msg)
		return err
	})
	if err != nil {
		c.log.Info().Err(err).Str("mechanism", c.mechanism).Msg("kafka authentication failed")
		return nil, err
	}
	if done {
		c.authenticated()
	}
	if reply == nil {
		reply = []byte{}
	}
	return reply, nil
}

// authFailed answers SASL_AUTHENTICATION_FAILED; the connection may try
// again only on a new connection, so the session is dropped.
func (c *conn) authFailed(resp *kmsg.SASLAuthenticateResponse, err error) kmsg.Response {
	c.log.Info().Err(err).Str("mechanism", c.mechanism).Msg("kafka authentication failed")
	resp.ErrorCode = kerr.SaslAuthenticationFailed.Code
	msg := err.Error()
	resp.ErrorMessage = &msg
	c.mechanism, c.session = "", nil
	return resp
}

// notCoordinator answers a group request sent to a gateway that does not
// coordinate the group.
func notCoordinator(req kmsg.Request) kmsg.Response {
	resp := req.ResponseKind()
	code := kerr.NotCoordinator.Code
	switch r := resp.(type) {
	case *kmsg.JoinGroupResponse:
		r.ErrorCode = code
	case *kmsg.SyncGroupResponse:
		r.ErrorCode = code
	case *kmsg.HeartbeatResponse:
		r.ErrorCode = code
	case *kmsg.LeaveGroupResponse:
		r.ErrorCode = code
	}
	return resp
}

// groupOf is the group a membership request is for.
func groupOf(req kmsg.Request) (string, bool) {
	switch r := req.(type) {
	case *kmsg.JoinGroupRequest:
		return r.Group, true
	case *kmsg.SyncGroupRequest:
		return r.Group, true
	case *kmsg.HeartbeatRequest:
		return r.Group, true
	case *kmsg.LeaveGroupRequest:
		return r.Group, true
	}
	return "", false
}
