package kafka

import (
	"errors"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/byzlog/byzlog/gateway/kafka/sasl"
)

// SCRAM credentials (KIP-554). The users are the gateway's users file
// (--kafka-users), which the operator writes (byzlog-gateway kafka-user)
// and every gateway of the cluster reads: DescribeUserScramCredentials
// shows its users and their iterations to an admin, and
// AlterUserScramCredentials is refused, since a change through one gateway
// would reach neither the file nor the other gateways.

// describer is an Authenticator that can list its users.
type describer interface{ Describe() []sasl.Described }

// scramMechanisms numbers the mechanisms as Kafka's API does.
var scramMechanisms = []struct {
	name string
	code int8
}{{sasl.ScramSHA256, 1}, {sasl.ScramSHA512, 2}}

var errUsersFile = errors.New("users are the gateway's --kafka-users file, written with byzlog-gateway kafka-user and read by every gateway: change them there")

func (c *conn) describeUserScram(r *kmsg.DescribeUserSCRAMCredentialsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.DescribeUserSCRAMCredentialsResponse)
	if !c.principal.Admin {
		resp.ErrorCode, resp.ErrorMessage = kerr.ClusterAuthorizationFailed.Code, message(c.errNotAdmin())
		return resp
	}
	var users []sasl.Described
	if d, ok := c.s.cfg.Auth.(describer); ok {
		users = d.Describe()
	}
	names := make([]string, 0, len(r.Users))
	for _, u := range r.Users {
		names = append(names, u.Name)
	}
	for _, u := range users {
		if len(names) > 0 && !slices.Contains(names, u.Name) {
			continue
		}
		res := kmsg.NewDescribeUserSCRAMCredentialsResponseResult()
		res.User = u.Name
		for _, m := range scramMechanisms {
			if it, ok := u.Iterations[m.name]; ok {
				res.CredentialInfos = append(res.CredentialInfos, kmsg.DescribeUserSCRAMCredentialsResponseResultCredentialInfo{Mechanism: m.code, Iterations: int32(it)})
			}
		}
		resp.Results = append(resp.Results, res)
	}
	for _, name := range names {
		if !slices.ContainsFunc(users, func(u sasl.Described) bool { return u.Name == name }) {
			res := kmsg.NewDescribeUserSCRAMCredentialsResponseResult()
			res.User, res.ErrorCode = name, kerr.ResourceNotFound.Code
			res.ErrorMessage = kmsg.StringPtr("no such user in the gateway's users file")
			resp.Results = append(resp.Results, res)
		}
	}
	return resp
}

func (c *conn) alterUserScram(r *kmsg.AlterUserSCRAMCredentialsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.AlterUserSCRAMCredentialsResponse)
	refuse := func(user string) {
		res := kmsg.NewAlterUserSCRAMCredentialsResponseResult()
		res.User, res.ErrorCode, res.ErrorMessage = user, kerr.PolicyViolation.Code, message(errUsersFile)
		if !c.principal.Admin {
			res.ErrorCode, res.ErrorMessage = kerr.ClusterAuthorizationFailed.Code, message(c.errNotAdmin())
		}
		resp.Results = append(resp.Results, res)
	}
	for _, d := range r.Deletions {
		refuse(d.Name)
	}
	for _, u := range r.Upsertions {
		refuse(u.Name)
	}
	return resp
}
