// Package httpface is the gateway's HTTP/JSON face, for clients without
// gRPC: a few of the gRPC service's calls (Backend, which grpcface.Service
// is) with the protobuf messages in canonical JSON, their errors as HTTP
// statuses, and every cost bounded before work is done. It decides nothing
// itself.
package httpface

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/byzlog/byzlog/gateway/pipeline"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
)

// Backend is what the HTTP face needs of the gateway: the calls of the
// byzlog.v1.Gateway service it serves in JSON. The gRPC face's
// grpcface.Service is one, so both faces answer alike.
type Backend interface {
	Produce(ctx context.Context, req *byzlogv1.ProduceRequest) (*byzlogv1.ProduceResponse, error)
	ListTopics(ctx context.Context, req *byzlogv1.ListTopicsRequest) (*byzlogv1.ListTopicsResponse, error)
	DescribeTopic(ctx context.Context, req *byzlogv1.DescribeTopicRequest) (*byzlogv1.DescribeTopicResponse, error)
	GetGroupOffsets(ctx context.Context, req *byzlogv1.GroupRequest) (*byzlogv1.GroupOffsets, error)
}

// Handler is the HTTP/JSON face of the gateway, for clients without
// gRPC. Bodies are the protobuf messages in their canonical JSON form
// (bytes in base64):
//
//	POST /v1/produce  ProduceRequest  -> ProduceResponse
//	GET  /v1/topics                   -> ListTopicsResponse
//	GET  /v1/topics/{name}            -> DescribeTopicResponse
//	GET  /v1/groups/{name}            -> GroupOffsets
//
// Errors answer with the HTTP status of their gRPC code and
// {"code": "...", "message": "..."}.
//
// Costs are bounded before work is done (cfg): at most
// MaxConcurrent requests are served at once (past it, 429 with
// Retry-After), a body over MaxBodyBytes gets 413, and each request must
// arrive within ReadTimeout and be answered within WriteTimeout, set per
// request so they hold whatever http.Server serves the handler (use
// NewServer for the header and idle bounds).
func Handler(s Backend, cfg pipeline.HTTPConfig) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/produce", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, cfg.MaxBodyBytes))
		if err != nil {
			writeBodyError(w, err, cfg)
			return
		}
		var req byzlogv1.ProduceRequest
		if err := protojson.Unmarshal(body, &req); err != nil {
			writeError(w, status.Errorf(codes.InvalidArgument, "body is not a JSON byzlog.v1.ProduceRequest: %v", err))
			return
		}
		resp, err := s.Produce(r.Context(), &req)
		writeJSON(w, resp, err)
	})
	mux.HandleFunc("GET /v1/topics", func(w http.ResponseWriter, r *http.Request) {
		resp, err := s.ListTopics(r.Context(), &byzlogv1.ListTopicsRequest{})
		writeJSON(w, resp, err)
	})
	mux.HandleFunc("GET /v1/topics/{name}", func(w http.ResponseWriter, r *http.Request) {
		resp, err := s.DescribeTopic(r.Context(), &byzlogv1.DescribeTopicRequest{Name: r.PathValue("name")})
		writeJSON(w, resp, err)
	})
	mux.HandleFunc("GET /v1/groups/{name}", func(w http.ResponseWriter, r *http.Request) {
		resp, err := s.GetGroupOffsets(r.Context(), &byzlogv1.GroupRequest{Group: r.PathValue("name")})
		writeJSON(w, resp, err)
	})
	return limitHTTP(cfg, mux)
}

// NewServer returns an http.Server for h with cfg's timeouts and
// header bound.
func NewServer(cfg pipeline.HTTPConfig, h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		ReadTimeout:       cfg.ReadTimeout,
		WriteTimeout:      cfg.WriteTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		MaxHeaderBytes:    cfg.MaxHeaderBytes,
	}
}

// limitHTTP serves at most cfg.MaxConcurrent requests at once and gives
// each its read and write deadlines.
func limitHTTP(cfg pipeline.HTTPConfig, next http.Handler) http.Handler {
	slots := make(chan struct{}, cfg.MaxConcurrent)
	retryAfter := strconv.Itoa(1)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case slots <- struct{}{}:
		default:
			w.Header().Set("Retry-After", retryAfter)
			writeError(w, status.Errorf(codes.ResourceExhausted, "the gateway is serving %d HTTP requests (http.max_concurrent); retry after %ss", cfg.MaxConcurrent, retryAfter))
			return
		}
		defer func() { <-slots }()
		now := time.Now()
		rc := http.NewResponseController(w)
		// Not every ResponseWriter supports deadlines (ErrNotSupported);
		// the server's own timeouts then still hold.
		_ = rc.SetReadDeadline(now.Add(cfg.ReadTimeout))
		_ = rc.SetWriteDeadline(now.Add(cfg.WriteTimeout))
		next.ServeHTTP(w, r)
	})
}

// writeBodyError answers a request whose body could not be read: too
// large (413), too slow (408), or broken.
func writeBodyError(w http.ResponseWriter, err error, cfg pipeline.HTTPConfig) {
	var tooLarge *http.MaxBytesError
	var ne net.Error
	code, msg := http.StatusBadRequest, fmt.Sprintf("request body unreadable: %v", err)
	switch {
	case errors.As(err, &tooLarge):
		code, msg = http.StatusRequestEntityTooLarge, fmt.Sprintf("request body is over %d bytes (the gateway's http.max_body_bytes); send smaller batches", tooLarge.Limit)
	case errors.As(err, &ne) && ne.Timeout():
		code, msg = http.StatusRequestTimeout, fmt.Sprintf("request body not received within %s (the gateway's http.read_timeout)", cfg.ReadTimeout)
	}
	b, _ := protojson.Marshal(&byzlogv1.HTTPError{Code: codes.InvalidArgument.String(), Message: msg})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Connection", "close")
	w.WriteHeader(code)
	_, _ = w.Write(b)
}

func writeJSON(w http.ResponseWriter, m proto.Message, err error) {
	if err != nil {
		writeError(w, err)
		return
	}
	b, err := protojson.Marshal(m)
	if err != nil {
		writeError(w, status.Errorf(codes.Internal, "encode response: %v", err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

func writeError(w http.ResponseWriter, err error) {
	st := status.Convert(err)
	b, _ := protojson.Marshal(&byzlogv1.HTTPError{Code: st.Code().String(), Message: st.Message()})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(httpStatus(st.Code()))
	_, _ = w.Write(b)
}

// httpStatus maps gRPC codes as grpc-gateway does.
func httpStatus(c codes.Code) int {
	switch c {
	case codes.OK:
		return http.StatusOK
	case codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange:
		return http.StatusBadRequest
	case codes.NotFound:
		return http.StatusNotFound
	case codes.AlreadyExists, codes.Aborted:
		return http.StatusConflict
	case codes.PermissionDenied:
		return http.StatusForbidden
	case codes.ResourceExhausted:
		return http.StatusTooManyRequests
	case codes.Unavailable:
		return http.StatusServiceUnavailable
	case codes.DeadlineExceeded:
		return http.StatusGatewayTimeout
	case codes.Unimplemented:
		return http.StatusNotImplemented
	case codes.Canceled:
		return 499
	}
	return http.StatusInternalServerError
}
