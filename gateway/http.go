package gateway

import (
	"io"
	"net/http"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
)

// maxHTTPBody bounds a JSON produce request (base64 makes a batch ~4/3 larger).
const maxHTTPBody = 4 << 20

// HTTPHandler is the HTTP/JSON face of the gateway, for clients without
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
func HTTPHandler(g *Gateway) http.Handler {
	s := &Service{g: g}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/produce", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, maxHTTPBody+1))
		if err != nil || len(body) > maxHTTPBody {
			writeError(w, status.Errorf(codes.InvalidArgument, "request body unreadable or over %d bytes", maxHTTPBody))
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
	return mux
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
