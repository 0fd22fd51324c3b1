package main

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/byzlog/byzlog/gateway/client"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/services/internal/gatewaylink"
	"github.com/byzlog/byzlog/services/internal/keyfile"
)

// adminTimeout bounds one admin command: signing, commit and verification.
const adminTimeout = 60 * time.Second

// signing are the flags of every admin-signed command: the keys, the root
// of trust, and whether to submit or only write the signed request for
// other admins to cosign.
type signing struct {
	keys     []string
	trust    gatewaylink.Trust
	signOnly string
}

func (s *signing) add(f *pflag.FlagSet) {
	f.StringArrayVar(&s.keys, "admin-key", nil, "admin key file (the localnet's is DIR/admin.key); repeat to sign with several admins, for operations that need the admin set's threshold")
	f.StringVar(&s.signOnly, "sign-only", "", "write the signed request to this file instead of submitting it, for other admins to cosign (byzlog admin cosign) and one to submit (byzlog admin submit)")
	s.trust.Add(f)
}

// signed makes c an admin-signed command: request builds the operation from
// the arguments and says what was done, for the output line. The signing
// flags are added here; c's own flags are the caller's.
func signed(tf *topicFlags, c *cobra.Command, request func(args []string) (op proto.Message, done string, err error)) *cobra.Command {
	var s signing
	c.RunE = func(cmd *cobra.Command, args []string) error {
		op, done, err := request(args)
		if err != nil {
			return err
		}
		return s.apply(cmd, tf, op, done)
	}
	s.add(c.Flags())
	return c
}

// gatewayGroup adds --gateway and the TLS flags to a group of commands
// that talk to one gateway, and returns where they land.
func gatewayGroup(cmd *cobra.Command) *topicFlags {
	tf := &topicFlags{gateway: gatewaylink.LocalnetGateway}
	cmd.PersistentFlags().StringVar(&tf.gateway, "gateway", tf.gateway, "gateway address (host:port)")
	tf.tlsf.Add(cmd.PersistentFlags())
	return tf
}

// admin connects an admin client with the first key as the signer and the
// others as cosigners.
func (s *signing) admin(cmd *cobra.Command, tf *topicFlags) (*client.Admin, error) {
	if len(s.keys) == 0 {
		return nil, errors.New("--admin-key is required")
	}
	keys := make([]ed25519.PrivateKey, len(s.keys))
	for i, path := range s.keys {
		k, err := keyfile.Read(path)
		if err != nil {
			return nil, fmt.Errorf("--admin-key: %w", err)
		}
		keys[i] = k
	}
	return connect(cmd, tf, &s.trust, keys[0], client.WithCosigners(keys[1:]...))
}

// connect opens an admin client on the gateway of tf with the root of
// trust of tr; key may be nil for one that only reads or submits requests
// signed elsewhere.
func connect(cmd *cobra.Command, tf *topicFlags, tr *gatewaylink.Trust, key ed25519.PrivateKey, opts ...client.Option) (*client.Admin, error) {
	trust, err := tr.Root(cmd.Flags())
	if err != nil {
		return nil, err
	}
	transport, err := tf.tlsf.ProducerOption(cmd.Flags())
	if err != nil {
		return nil, err
	}
	return client.NewAdmin(tf.gateway, key, trust, append([]client.Option{transport}, opts...)...)
}

// apply signs op and submits it, or with --sign-only writes it to a file;
// done says what happened, for the output line.
func (s *signing) apply(cmd *cobra.Command, tf *topicFlags, op proto.Message, done string) error {
	adm, err := s.admin(cmd, tf)
	if err != nil {
		return err
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(cmd.Context(), adminTimeout)
	defer cancel()
	if s.signOnly == "" {
		h, err := adm.Apply(ctx, op)
		if err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "%s at height %d\n", done, h)
		return nil
	}
	req, err := adm.Sign(ctx, op)
	if err != nil {
		return err
	}
	if err := writeRequest(s.signOnly, req); err != nil {
		return err
	}
	what, err := client.Describe(req)
	if err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "wrote %s: %s\ncosign it with: byzlog admin cosign %s --admin-key KEY\nsubmit it with: byzlog admin submit %s\n", s.signOnly, what, s.signOnly, s.signOnly)
	return nil
}

// writeRequest writes a signed admin request as JSON (protojson), owner
// read/write only: it is a signed order, not a secret, but not for anyone.
func writeRequest(path string, req *byzlogv1.AdminRequest) error {
	b, err := protojson.MarshalOptions{Multiline: true}.Marshal(req)
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("write the signed request: %w", err)
	}
	return nil
}

func readRequest(path string) (*byzlogv1.AdminRequest, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var req byzlogv1.AdminRequest
	if err := protojson.Unmarshal(b, &req); err != nil {
		return nil, fmt.Errorf("%s is not a signed admin request (byzlog ... --sign-only writes one): %w", path, err)
	}
	return &req, nil
}

func newValidatorCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "validator",
		Short: "Add, remove and list validators (admin-signed, the admin set's threshold)",
		Long: `Validator changes are admin requests that need the admin set's threshold of
signatures. CometBFT applies a change committed at height h from h+2. The chain
refuses a removal that would leave fewer than 4 validators and a block's changes
that move more than a third of the voting power.

A validator is named by its ed25519 consensus public key: base64 (the "value" of
"pub_key" in its priv_validator_key.json, or of "cometbft show-validator"), hex,
or the path of either JSON file.`,
	}
	tf := gatewayGroup(cmd)

	var power int64 = 10
	add := signed(tf, &cobra.Command{
		Use:   "add KEY",
		Short: "Add a validator with --power (a validator already in the set gets that power)",
		Args:  cobra.ExactArgs(1),
	}, func(args []string) (proto.Message, string, error) {
		pk, err := validatorKey(args[0])
		return &byzlogv1.SetValidator{PubKey: pk, Power: power}, fmt.Sprintf("validator %s set to power %d", args[0], power), err
	})
	add.Flags().Int64Var(&power, "power", power, "voting power")

	remove := signed(tf, &cobra.Command{
		Use:   "remove KEY",
		Short: "Remove a validator",
		Args:  cobra.ExactArgs(1),
	}, func(args []string) (proto.Message, string, error) {
		pk, err := validatorKey(args[0])
		return &byzlogv1.SetValidator{PubKey: pk}, fmt.Sprintf("validator %s removed", args[0]), err
	})

	var lt gatewaylink.Trust
	list := &cobra.Command{
		Use:   "list",
		Short: "List the validators of the latest block, from a light block verified from the root of trust",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			adm, err := connect(cmd, tf, &lt, nil)
			if err != nil {
				return err
			}
			defer adm.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), adminTimeout)
			defer cancel()
			h, vs, err := adm.Validators(ctx)
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintf(w, "validators at height %d: %d, total power %d\n", h, vs.Size(), vs.TotalVotingPower())
			fmt.Fprintln(w, "ADDRESS\tPUB KEY\tPOWER")
			for _, v := range vs.Validators {
				fmt.Fprintf(w, "%s\t%s\t%d\n", v.Address, base64.StdEncoding.EncodeToString(v.PubKey.Bytes()), v.VotingPower)
			}
			return w.Flush()
		},
	}
	lt.Add(list.Flags())
	cmd.AddCommand(add, remove, list)
	return cmd
}

// validatorKey reads a validator's ed25519 public key: base64, hex, or the
// path of a priv_validator_key.json or of cometbft show-validator's output.
func validatorKey(s string) ([]byte, error) {
	if b, err := os.ReadFile(s); err == nil {
		var f struct {
			PubKey struct {
				Value string `json:"value"`
			} `json:"pub_key"`
			Value string `json:"value"`
		}
		if err := json.Unmarshal(b, &f); err != nil {
			return nil, fmt.Errorf("validator key file %s: %w", s, err)
		}
		s = f.PubKey.Value + f.Value
	}
	if k, err := base64.StdEncoding.DecodeString(s); err == nil && len(k) == ed25519.PublicKeySize {
		return k, nil
	}
	if k, err := hex.DecodeString(s); err == nil && len(k) == ed25519.PublicKeySize {
		return k, nil
	}
	return nil, fmt.Errorf("validator key %q: want an ed25519 public key (32 bytes) in base64 or hex, or a priv_validator_key.json", s)
}

func newAdminCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "admin",
		Short: "Change the admin set; cosign and submit requests signed with --sign-only",
		Long: `Creating and updating a topic takes one admin's signature. Deleting a topic and
changing the admins or the validators take the admin set's threshold: k of its
n keys, k and n from genesis (app_state "admins" and "admin_threshold") and
changed by "byzlog admin set-admins".

Admins on different machines sign one request in turn: the first runs the
command with --sign-only FILE, each other runs "byzlog admin cosign FILE", and
any of them (or anyone) runs "byzlog admin submit FILE". The request commits only
within its expiry (120 blocks after it was signed): sign it again after that.`,
	}
	tf := gatewayGroup(cmd)
	cmd.AddCommand(newSetAdminsCommand(tf), newScheduleUpgradeCommand(tf), newCosignCommand(), newSubmitCommand(tf))
	return cmd
}

func newSetAdminsCommand(tf *topicFlags) *cobra.Command {
	var admins []string
	var threshold uint32
	setAdmins := signed(tf, &cobra.Command{
		Use:   "set-admins",
		Short: "Replace the admin set with --admin keys and --threshold",
		Args:  cobra.NoArgs,
	}, func([]string) (proto.Message, string, error) {
		keys, err := publicKeys("admin", admins)
		return &byzlogv1.SetAdmins{Admins: keys, Threshold: threshold}, fmt.Sprintf("admin set replaced: %d keys, threshold %d", len(keys), threshold), err
	})
	setAdmins.Flags().StringSliceVar(&admins, "admin", nil, "public key (hex) of an admin of the new set; repeat for each")
	setAdmins.Flags().Uint32Var(&threshold, "threshold", 1, "how many admins must sign a dangerous operation")
	return setAdmins
}

func newScheduleUpgradeCommand(tf *topicFlags) *cobra.Command {
	var version uint64
	var height int64
	upgrade := signed(tf, &cobra.Command{
		Use:   "schedule-upgrade --rules-version N --height H",
		Short: "Schedule the switch to rules version N at height H (--rules-version 0 cancels)",
		Long: `Schedules the switch to a new version of the state machine's rules at height H,
at least 20 blocks ahead. Replace every validator's byzlog-app, one by one, with
a build that knows the version before H: it runs the old rules until H. A build
that does not know the version stops at H instead of executing the block
differently. --rules-version 0 cancels a scheduled upgrade.`,
		Args: cobra.NoArgs,
	}, func([]string) (proto.Message, string, error) {
		done := fmt.Sprintf("rules version %d scheduled at height %d", version, height)
		if version == 0 {
			done = "scheduled upgrade cancelled"
		}
		return &byzlogv1.ScheduleUpgrade{RulesVersion: version, Height: height}, done, nil
	})
	upgrade.Flags().Uint64Var(&version, "rules-version", 0, "the rules version to switch to (0: cancel the scheduled one)")
	upgrade.Flags().Int64Var(&height, "height", 0, "the first height that runs it")
	return upgrade
}

func newCosignCommand() *cobra.Command {
	var keyPath string
	var ct gatewaylink.Trust
	cosign := &cobra.Command{
		Use:   "cosign FILE",
		Short: "Add an admin's signature to a request written with --sign-only (shows what it does first)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			key, err := keyfile.Read(keyPath)
			if err != nil {
				return fmt.Errorf("--admin-key: %w", err)
			}
			trust, err := ct.Root(cmd.Flags())
			if err != nil {
				return err
			}
			req, err := readRequest(args[0])
			if err != nil {
				return err
			}
			what, err := client.Describe(req)
			if err != nil {
				return err
			}
			if err := client.Cosign(req, key, trust.ChainID()); err != nil {
				return fmt.Errorf("%s: %w", args[0], err)
			}
			if err := writeRequest(args[0], req); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "cosigned %s: %s\n", args[0], what)
			return nil
		},
	}
	cosign.Flags().StringVar(&keyPath, "admin-key", "", "the cosigning admin's key file")
	_ = cosign.MarkFlagRequired("admin-key")
	ct.Add(cosign.Flags())
	return cosign
}

func newSubmitCommand(tf *topicFlags) *cobra.Command {
	var st gatewaylink.Trust
	submit := &cobra.Command{
		Use:   "submit FILE",
		Short: "Submit a request written with --sign-only and cosigned, and wait for its commit",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req, err := readRequest(args[0])
			if err != nil {
				return err
			}
			adm, err := connect(cmd, tf, &st, nil)
			if err != nil {
				return err
			}
			defer adm.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), adminTimeout)
			defer cancel()
			what, err := client.Describe(req)
			if err != nil {
				return err
			}
			h, err := adm.Submit(ctx, req)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "committed at height %d: %s\n", h, what)
			return nil
		},
	}
	st.Add(submit.Flags())
	return submit
}

func newTopicDeleteCommand(tf *topicFlags) *cobra.Command {
	return signed(tf, &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a topic and its records (the admin set's threshold of admin keys)",
		Args:  cobra.ExactArgs(1),
	}, func(args []string) (proto.Message, string, error) {
		return &byzlogv1.DeleteTopic{Name: args[0]}, fmt.Sprintf("deleted topic %s", args[0]), nil
	})
}
