package core_test

import (
	"bytes"
	"crypto/ed25519"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/byzlog/byzlog/abciapp/core"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// governedChain is a chain with admins a0..a(n-1), threshold k, and
// validators v0..v(m-1) of power 10 each.
func governedChain(t *testing.T, n, k, m int) (*testChain, []*wire.Signer) {
	t.Helper()
	admins := make([]*wire.Signer, n)
	hexKeys := make([]string, n)
	for i := range admins {
		admins[i] = wire.NewSigner(key(fmt.Sprintf("a%d", i)), chainID)
		hexKeys[i] = fmt.Sprintf("%q", hex.EncodeToString(admins[i].PublicKey()))
	}
	params, topics, err := core.ParseGenesis(chainID, fmt.Appendf(nil, `{"admins": [%s], "admin_threshold": %d}`, strings.Join(hexKeys, ","), k))
	if err != nil {
		t.Fatal(err)
	}
	vs := make([]*byzlogv1.Validator, m)
	for i := range vs {
		vs[i] = &byzlogv1.Validator{PubKey: validatorKey(i), Power: 10}
	}
	vs, err = core.GenesisValidators(vs)
	if err != nil {
		t.Fatal(err)
	}
	c := &testChain{t: t, store: newMemStore(), time: 1_700_000_000_000_000_000, admin: admins[0], nonces: map[string]uint64{}}
	c.store.apply(core.InitChain(params, topics, vs...))
	return c, admins
}

func validatorKey(i int) []byte { return pub(fmt.Sprintf("validator%d", i)) }

func pub(name string) []byte { return key(name).Public().(ed25519.PublicKey) }

// signed is an admin request for op signed by signers[0] (its next nonce)
// and cosigned by the rest.
func (c *testChain) signed(op proto.Message, signers ...*wire.Signer) []byte {
	c.t.Helper()
	req, err := signers[0].Admin(c.nonces[string(signers[0].PublicKey())], op)
	if err != nil {
		c.t.Fatal(err)
	}
	for _, s := range signers[1:] {
		s.Cosign(req)
	}
	tx, err := wire.AdminTx(req)
	if err != nil {
		c.t.Fatal(err)
	}
	return tx
}

// run executes a block of one admin tx of signers[0] and checks its code;
// an accepted one uses up the nonce. It returns the block's outcome.
func (c *testChain) run(name string, tx []byte, signer *wire.Signer, want wire.Code) core.Outcome {
	c.t.Helper()
	c.time += 1_000_000_000
	out, err := core.Execute(c.store, c.state, core.Block{Height: c.state.Height + 1, TimeUnixNano: c.time, Txs: [][]byte{tx}})
	if err != nil {
		c.t.Fatal(err)
	}
	c.store.apply(out.Changes)
	c.state = out.State
	r := out.Results[0]
	if r.Code != want || (!r.OK() && r.Log == "") {
		c.t.Fatalf("%s = %s %q, want %s", name, r.Code, r.Log, want)
	}
	if r.OK() {
		c.nonces[string(signer.PublicKey())]++
	}
	return out
}

func TestThresholdAdmin(t *testing.T) {
	c, a := governedChain(t, 3, 2, 4)
	mallory := wire.NewSigner(key("mallory"), chainID)
	c.run("create with one signature", c.signed(&byzlogv1.CreateTopic{Name: "t", Config: &byzlogv1.TopicConfig{Partitions: 1}}, a[0]), a[0], wire.CodeOK)
	del := &byzlogv1.DeleteTopic{Name: "t"}
	c.run("delete with one signature", c.signed(del, a[1]), a[1], wire.CodeBelowThreshold)
	c.run("delete cosigned by a non-admin", c.signed(del, a[1], mallory), a[1], wire.CodeNotAdmin)
	c.run("delete signed twice by one admin", c.signed(del, a[1], a[1]), a[1], wire.CodeMalformedTx)

	// A cosignature of another body (another nonce) does not verify.
	req, err := a[1].Admin(c.nonces[string(a[1].PublicKey())], del)
	if err != nil {
		t.Fatal(err)
	}
	other, err := a[2].Admin(7, del)
	if err != nil {
		t.Fatal(err)
	}
	req.Cosignatures = []*byzlogv1.AdminSignature{{AdminKey: a[2].PublicKey(), Signature: other.Signature}}
	tx, err := wire.AdminTx(req)
	if err != nil {
		t.Fatal(err)
	}
	if r := core.ValidateTx(tx); r.Code != wire.CodeBadSignature {
		t.Fatalf("cosignature of another body = %s %q, want %s", r.Code, r.Log, wire.CodeBadSignature)
	}

	c.run("delete with two signatures", c.signed(del, a[1], a[2]), a[1], wire.CodeOK)

	// The admin set changes by the same rule; then the old keys are out.
	d := wire.NewSigner(key("d"), chainID)
	set := func(k uint32, keys ...[]byte) *byzlogv1.SetAdmins {
		return &byzlogv1.SetAdmins{Admins: keys, Threshold: k}
	}
	for _, bad := range []struct {
		name string
		op   *byzlogv1.SetAdmins
	}{
		{"no admins", set(1)},
		{"threshold 0", set(0, d.PublicKey())},
		{"threshold above the keys", set(3, d.PublicKey(), a[0].PublicKey())},
		{"a key twice", set(1, d.PublicKey(), d.PublicKey())},
		{"a short key", set(1, []byte{1, 2, 3})},
	} {
		c.run(bad.name, c.signed(bad.op, a[0], a[2]), a[0], wire.CodeBadAdminSet)
	}
	c.run("set admins with one signature", c.signed(set(1, d.PublicKey(), a[0].PublicKey()), a[0]), a[0], wire.CodeBelowThreshold)
	c.run("set admins", c.signed(set(2, d.PublicKey(), a[0].PublicKey()), a[0], a[2]), a[0], wire.CodeOK)
	var admins byzlogv1.AdminSet
	c.query(wire.PathAdmins, nil, &admins)
	if admins.Threshold != 2 || len(admins.Admins) != 2 || bytes.Compare(admins.Admins[0], admins.Admins[1]) >= 0 {
		t.Fatalf("admin set = %v, want two sorted keys and threshold 2", &admins)
	}
	c.run("create by a removed admin", c.signed(&byzlogv1.CreateTopic{Name: "u", Config: &byzlogv1.TopicConfig{Partitions: 1}}, a[1]), a[1], wire.CodeNotAdmin)
	c.run("create by a new admin", c.signed(&byzlogv1.CreateTopic{Name: "u", Config: &byzlogv1.TopicConfig{Partitions: 1}}, d), d, wire.CodeOK)
}

func TestValidatorChanges(t *testing.T) {
	c, a := governedChain(t, 2, 2, 4)
	v := func(i int, power int64) *byzlogv1.SetValidator {
		return &byzlogv1.SetValidator{PubKey: validatorKey(i), Power: power}
	}
	updates := func(out core.Outcome) string {
		var s []string
		for _, u := range out.ValidatorUpdates {
			s = append(s, fmt.Sprintf("%x=%d", u.PubKey[:2], u.Power))
		}
		return strings.Join(s, ",")
	}
	want := func(i int, power int64) string { return fmt.Sprintf("%x=%d", validatorKey(i)[:2], power) }

	c.run("one signature of two", c.signed(v(4, 10), a[0]), a[0], wire.CodeBelowThreshold)
	for _, bad := range []struct {
		name string
		op   *byzlogv1.SetValidator
	}{
		{"a short key", &byzlogv1.SetValidator{PubKey: []byte{1}, Power: 1}},
		{"negative power", v(4, -1)},
		{"power past the bound", v(4, core.MaxValidatorPower+1)},
		{"remove an unknown validator", v(4, 0)},
		{"no change", v(0, 10)},
		{"remove to three validators", v(0, 0)},
		{"add more than a third of the power (14 of 40)", v(4, 14)},
		{"change more than a third (10 -> 24)", v(0, 24)},
	} {
		if out := c.run(bad.name, c.signed(bad.op, a[0], a[1]), a[0], wire.CodeBadValidatorChange); len(out.ValidatorUpdates) != 0 {
			t.Fatalf("%s: validator updates %s, want none", bad.name, updates(out))
		}
	}
	if out := c.run("add a third of the power (13 of 40)", c.signed(v(4, 13), a[0], a[1]), a[0], wire.CodeOK); updates(out) != want(4, 13) {
		t.Fatalf("validator updates = %s, want %s", updates(out), want(4, 13))
	}

	// Two changes in one block count together: 10 + 8 of 53 is more than a third.
	n := c.nonces[string(a[0].PublicKey())]
	first, second := c.signed(v(5, 10), a[0], a[1]), func() []byte {
		c.nonces[string(a[0].PublicKey())] = n + 1
		return c.signed(v(6, 8), a[0], a[1])
	}()
	c.time += 1_000_000_000
	out, err := core.Execute(c.store, c.state, core.Block{Height: c.state.Height + 1, TimeUnixNano: c.time, Txs: [][]byte{first, second}})
	if err != nil {
		t.Fatal(err)
	}
	if !out.Results[0].OK() || out.Results[1].Code != wire.CodeBadValidatorChange {
		t.Fatalf("two changes in one block = %s, %s %q; want ok, then %s", out.Results[0].Code, out.Results[1].Code, out.Results[1].Log, wire.CodeBadValidatorChange)
	}
	if updates(out) != want(5, 10) {
		t.Fatalf("validator updates = %s, want %s", updates(out), want(5, 10))
	}
	c.store.apply(out.Changes)
	c.state = out.State
	c.nonces[string(a[0].PublicKey())] = n + 1

	// Six validators now: two may go, one at a time, not a third.
	c.run("remove one", c.signed(v(4, 0), a[0], a[1]), a[0], wire.CodeOK)
	c.run("remove another", c.signed(v(5, 0), a[0], a[1]), a[0], wire.CodeOK)
	c.run("remove a third", c.signed(v(3, 0), a[0], a[1]), a[0], wire.CodeBadValidatorChange)
	var set byzlogv1.ValidatorSet
	c.query(wire.PathValidators, nil, &set)
	if len(set.Validators) != 4 || set.Height != c.state.Height-1 {
		t.Fatalf("validator set = %v, want the 4 genesis validators as of height %d", &set, c.state.Height-1)
	}
}

func TestValidatorUpdates(t *testing.T) {
	val := func(k byte, p int64) *byzlogv1.Validator { return &byzlogv1.Validator{PubKey: []byte{k}, Power: p} }
	for _, tc := range []struct {
		name string
		a, b []*byzlogv1.Validator
		want string
	}{
		{"none", []*byzlogv1.Validator{val(1, 1)}, []*byzlogv1.Validator{val(1, 1)}, ""},
		{"add", []*byzlogv1.Validator{val(1, 1)}, []*byzlogv1.Validator{val(1, 1), val(2, 5)}, "02=5"},
		{"remove", []*byzlogv1.Validator{val(1, 1), val(2, 5)}, []*byzlogv1.Validator{val(2, 5)}, "01=0"},
		{"change", []*byzlogv1.Validator{val(1, 1), val(2, 5)}, []*byzlogv1.Validator{val(1, 3), val(2, 5)}, "01=3"},
		{"all", []*byzlogv1.Validator{val(1, 1), val(3, 5)}, []*byzlogv1.Validator{val(0, 2), val(3, 6), val(4, 1)}, "00=2,01=0,03=6,04=1"},
	} {
		var got []string
		for _, u := range core.ValidatorUpdates(tc.a, tc.b) {
			got = append(got, fmt.Sprintf("%x=%d", u.PubKey, u.Power))
		}
		if s := strings.Join(got, ","); s != tc.want {
			t.Errorf("%s: updates = %s, want %s", tc.name, s, tc.want)
		}
	}
}

func TestGenesisGovernance(t *testing.T) {
	k := hex.EncodeToString(pub("a"))
	for _, tc := range []struct {
		genesis string
		want    string // error substring, "" for success
	}{
		{fmt.Sprintf(`{"admins": [%q]}`, k), ""},
		{fmt.Sprintf(`{"admins": [%q], "admin_threshold": 1}`, k), ""},
		{fmt.Sprintf(`{"admins": [%q], "admin_threshold": 2}`, k), "admin_threshold 2 is more than the 1 admins"},
	} {
		p, _, err := core.ParseGenesis(chainID, []byte(tc.genesis))
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.genesis, err)
		case tc.want == "" && p.AdminThreshold != 1:
			t.Errorf("%s: threshold %d, want 1", tc.genesis, p.AdminThreshold)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: error %v, want one saying %q", tc.genesis, err, tc.want)
		}
	}
	for _, vs := range [][]*byzlogv1.Validator{
		{{PubKey: []byte{1}, Power: 1}},
		{{PubKey: validatorKey(0), Power: 0}},
		{{PubKey: validatorKey(0), Power: 1}, {PubKey: validatorKey(0), Power: 2}},
	} {
		if _, err := core.GenesisValidators(vs); err == nil {
			t.Errorf("GenesisValidators(%v) = nil error, want one", vs)
		}
	}
}
