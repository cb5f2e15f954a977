package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/leased/leased/grantor"
	"github.com/leased/leased/grantor/api"
	"github.com/leased/leased/grantor/client"
	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/redact"
)

// Status is what `leased status -o json` prints.
type Status struct {
	Bucket   string `json:"bucket"`
	Replicas int    `json:"replicas"`
	Leader   string `json:"leader,omitempty"`
	// NoLeader: the replicated stream has no leader (no quorum): nothing
	// is granted, renewed or read until it has one. The peers are as the
	// node that answered last knew them, and no lease count is given.
	NoLeader bool `json:"no_leader,omitempty"`
	// LostQuorum: the stream has a leader, but it has not heard lately
	// from enough followers to make a majority with itself (see
	// [peerUnreachable]): it commits nothing, and nats-server makes it
	// step down only some seconds later. No lease count is given.
	LostQuorum bool         `json:"lost_quorum,omitempty"`
	Peers      []PeerStatus `json:"peers,omitempty"`
	Leases     int          `json:"leases"`
	// LeasesUnknown: the stream has a leader and a majority, but the
	// lease count could not be read (why): JetStream refused the read.
	// No lease count is given, and status exits 1.
	LeasesUnknown string        `json:"leases_unknown,omitempty"`
	Grantors      []GrantorNode `json:"grantors"`
	// OtherBuckets are lease services on the same NATS account that serve
	// another bucket (an older leased, or a start that missed the other's
	// answer): they share the grantors' subjects, so a lease can be
	// granted twice at once, once in each bucket ([grantor.ErrOtherBucket]).
	OtherBuckets []GrantorNode `json:"other_buckets,omitempty"`
}

// MarshalJSON leaves the lease count out when none was taken (NoLeader,
// LostQuorum, LeasesUnknown), as the text does: -o json said "leases":0 while a cluster
// without a quorum held leases (found by an outside client).
func (s Status) MarshalJSON() ([]byte, error) {
	type plain Status // without this method
	if s.NoLeader || s.LostQuorum || s.LeasesUnknown != "" {
		return json.Marshal(struct {
			plain
			Leases *int `json:"leases,omitempty"` // hides plain's
		}{plain: plain(s)})
	}
	return json.Marshal(plain(s))
}

// PeerStatus is one follower of the lease stream, as its leader sees it.
type PeerStatus struct {
	Name    string        `json:"name"`
	Current bool          `json:"current"`
	Lag     uint64        `json:"lag"`
	Active  time.Duration `json:"active_ns"` // since the leader last heard from it; 0: not since it became leader
	Offline bool          `json:"offline,omitempty"`
	// Unreachable: the leader has not heard from the follower recently
	// (see [peerUnreachable]); Current is then false and Lag stale.
	Unreachable bool `json:"unreachable,omitempty"`
}

// peerSeenWithin is how recently a stream leader must have heard from a
// follower for status to call it reachable. A leader sends heartbeats every
// second and every live follower answers them; nats-server itself stops
// calling a follower current after 10 s without an answer.
const peerSeenWithin = 5 * time.Second

// peerUnreachable says whether a follower is dead or cut off, from what the
// stream leader reports: offline (learned from a shutdown event, or minutes
// after a crash), not heard from for peerSeenWithin, or not heard from at
// all since the leader was elected (Active 0: a leader elected after the
// follower died has no time for it, and reports the lag of an index it
// never learned, hence "behind by N, seen 0s ago" for a dead node).
func peerUnreachable(offline, current bool, active time.Duration) bool {
	return offline || active > peerSeenWithin || (active == 0 && !current)
}

// GrantorNode is one running `leased serve`, as its service answers.
type GrantorNode struct {
	Node    string `json:"node"`
	ID      string `json:"id"`
	NATSURL string `json:"nats_url"`
	Version string `json:"version"`
	Bucket  string `json:"bucket,omitempty"` // in Status.OtherBuckets: the bucket it serves
	Policy  string `json:"policy,omitempty"` // its grantor margin and duration range (grantor.Node.Policy)
	Build   string `json:"build,omitempty"`  // which build of leased it runs (grantor.Build)
}

func newStatus(stdout io.Writer) *cobra.Command {
	var c connFlags
	var bucket string
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the grantor nodes, the lease bucket's replicas and stream leader, and the lease count",
		Long: `Show the grantor nodes, the lease bucket's replicas and stream leader, and the lease count.

Exit codes: 0 when the bucket's stream has a leader that hears from a
majority of its replicas and the count could be read (a follower down, or
grantors whose policies differ, are shown as warnings); 1 when it has no
leader, its leader has no majority, the count could not be read, the
services of two buckets share this NATS account, there is no such bucket,
or NATS cannot be reached; 2 for bad arguments.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := kvlease.ValidateBucket(bucket); err != nil {
				// It said "grantor unavailable: invalid stream name", exit 1,
				// as history did.
				return usageError{fmt.Errorf("--bucket: %w", err)}
			}
			return withConn(cmd, &c, func(ctx context.Context, nc *nats.Conn) error {
				cl, err := c.client(nc)
				if err != nil {
					return err
				}
				direct := func(ctx context.Context) (int, error) {
					live, err := liveLeases(ctx, &c, nc, bucket, "")
					return len(live), err
				}
				st, err := status(ctx, nc, cl, bucket, c.timeout, direct)
				if err != nil {
					return err
				}
				printStatus(c.printer(stdout), st)
				return statusErr(st)
			})
		},
	}
	c.register(cmd.Flags())
	cmd.Flags().StringVar(&bucket, "bucket", kvlease.DefaultBucket, "lease bucket name")
	return cmd
}

// status reads the bucket's state. Its leases are counted by its grantors
// (client), or by reading the bucket (direct) when none serves it: the
// service that answered was another bucket's, whose count status printed
// (found in review), or none, and status failed.
func status(ctx context.Context, nc *nats.Conn, client *client.Client, bucket string, timeout time.Duration,
	direct func(context.Context) (int, error)) (Status, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	js, err := jetstream.New(nc)
	if err != nil {
		return Status{}, err
	}
	stream, err := js.Stream(ctx, kvlease.StreamName(bucket))
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		// It said "grantor unavailable" (found by an outside client).
		return Status{}, fmt.Errorf("no lease bucket %q on this NATS account (its stream KV_%s is missing; a grantor of the bucket creates it)",
			bucket, bucket)
	}
	if err != nil {
		return Status{}, fmt.Errorf("%w: lease bucket %q: %w%s", kvlease.ErrUnavailable, bucket, err, quorumHint(err))
	}
	info := stream.CachedInfo()
	s := Status{Bucket: bucket, Replicas: info.Config.Replicas}
	if cl := info.Cluster; cl != nil {
		s.Leader = cl.Leader
		for _, p := range cl.Replicas {
			unreachable := peerUnreachable(p.Offline, p.Current, p.Active)
			// The server's current is stale for a peer it no longer hears
			// from: a dead one showed current (found by an outside client).
			s.Peers = append(s.Peers, PeerStatus{Name: p.Name, Current: p.Current && !unreachable && !p.Offline, Lag: p.Lag,
				Active: p.Active, Offline: p.Offline, Unreachable: unreachable})
		}
	}
	s.NoLeader = s.Replicas > 1 && s.Leader == ""
	s.LostQuorum = lostQuorum(s)
	if s.Grantors, s.OtherBuckets, err = grantorNodes(nc, bucket, min(timeout, grantorsWait)); err != nil {
		return Status{}, err
	}
	// A refusal of the services' info ($SRV.INFO, to a user allowed
	// JetStream only) leaves no grantor found and cuts off the count that
	// follows: status printed its table, no grantor and "leases unknown
	// (JetStream did not answer the count)", which JetStream was never
	// asked, above the refusal (found by an outside client).
	if cause := context.Cause(ctx); errors.Is(cause, ErrPermissionDenied) {
		return Status{}, cause
	}
	if !s.NoLeader && !s.LostQuorum {
		count := client.Count
		if len(s.Grantors) == 0 {
			count = func(ctx context.Context, _ string) (int, error) { return direct(ctx) }
		}
		if s.Leases, err = count(ctx, ""); err != nil {
			if cause := context.Cause(ctx); !errors.Is(err, kvlease.ErrUnavailable) || errors.Is(cause, ErrPermissionDenied) {
				return Status{}, permissionCause(ctx, err)
			}
			// The stream answered (its leader, its followers) but the
			// count's read did not: status printed nothing but the read's
			// 503, and sent the user to leased status, itself, for the
			// table it had just failed to show (found by trying a cluster
			// whose fourth node had left: JetStream's meta group had no
			// majority, the bucket's stream had one).
			s.LeasesUnknown = api.Message(err)
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				// Its own deadline, not JetStream's refusal: a --timeout
				// too short for this server read as a cluster without a
				// majority, on one server too (found trying status). Only
				// the deadline: an interrupt, or a refusal withConn
				// cancels for, was told to try a longer --timeout (found
				// in review).
				s.LeasesUnknown = countTimedOut
			}
		}
	}
	return s, nil
}

// countTimedOut is Status.LeasesUnknown for a count that status's own
// --timeout cut off.
const countTimedOut = "no answer within --timeout (connecting included): a longer one may do, unless the server is stopped or overloaded"

// grantorsWait is how long status waits for the grantors' answers (less
// if --timeout is shorter).
const grantorsWait = 500 * time.Millisecond

// bucketsShareSubjects says whether lease services of two buckets answer on
// this account: this bucket's and another's, or two others'. They share
// the service's subjects and queue group, so a lease can be granted twice
// ([grantor.ErrOtherBucket]). A bucket written directly (elect --bucket,
// bench --direct) beside one grantor's is not such a case (it was warned
// of as one: review).
func (s Status) bucketsShareSubjects() bool {
	buckets := map[string]bool{}
	for _, g := range s.OtherBuckets {
		buckets[g.Bucket] = true
	}
	return len(buckets) > 0 && (len(s.Grantors) > 0 || len(buckets) > 1)
}

// statusErr is status's exit: a failure when the bucket's stream cannot
// commit, printed and then reported, so that a script that checks the exit
// status does not take it for a healthy cluster (it exited 0 without a
// leader, and, found by an outside client, for 10-15 s after the leader
// lost both its followers, while every grant failed).
func statusErr(s Status) error {
	switch {
	case s.NoLeader:
		return fmt.Errorf("%w: the lease bucket's stream has no leader%s", kvlease.ErrUnavailable,
			quorumHint(context.DeadlineExceeded))
	case s.LostQuorum:
		return fmt.Errorf("%w: the lease bucket's stream leader %s hears from %d of its %d followers, too few for a majority%s",
			kvlease.ErrUnavailable, s.Leader, reachablePeers(s), len(s.Peers), quorumHint(context.DeadlineExceeded))
	case s.LeasesUnknown != "":
		hint := metaHint(s.LeasesUnknown)
		if s.Replicas == 1 && !strings.Contains(s.LeasesUnknown, "JetStream system temporarily unavailable") {
			hint = "" // no majority to lack, but the meta group's
		}
		return fmt.Errorf("%w: the lease bucket's stream has a leader and a majority, but the lease count could not be read: %s%s",
			kvlease.ErrUnavailable, s.LeasesUnknown, hint)
	case s.bucketsShareSubjects():
		// The worst hazard of all exited 0 with a warning (review).
		return fmt.Errorf("%w: stop all but one bucket's services, or give each bucket a NATS account of its own", grantor.ErrOtherBucket)
	}
	return nil
}

// reachablePeers counts the followers the stream leader has heard from lately.
func reachablePeers(s Status) int {
	n := 0
	for _, p := range s.Peers {
		if !p.Unreachable {
			n++
		}
	}
	return n
}

// lostQuorum says whether a replicated stream's leader, with the followers
// it has heard from lately, is no majority of the stream's replicas: it
// can commit nothing until they answer again.
func lostQuorum(s Status) bool {
	return s.Replicas > 1 && s.Leader != "" && 2*(1+reachablePeers(s)) <= s.Replicas
}

// quorumHint is what a user of status can check when JetStream does not
// answer (a 503, or no answer at all): in a cluster it answers only while
// a majority of its nodes is up and connected, which is the usual cause.
// Not "leased status", which is what failed (it suggested itself).
func quorumHint(err error) string {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.Code == 503 || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return " (" + noQuorumCause + ": check that the others run and reach each other, or ask another node with --url)"
	}
	return ""
}

// noQuorumCause is why JetStream says "temporarily unavailable", and
// noQuorum the hint other commands get for it.
const (
	noQuorumCause = "in a cluster, JetStream answers only while a majority of its nodes is up and connected, and a new cluster " +
		"only once every node of its routes has started"
	noQuorum = noQuorumCause + ": check the others (leased status)"
	// noMetaQuorumCause is metaHint's: status has said it, no other hint follows.
	noMetaQuorumCause = "JetStream's meta group, every server that has ever joined the cluster, has no majority"
)

// metaHint is status's hint for a read that JetStream refused as
// "temporarily unavailable" (err_code 10008) while the bucket's stream had
// a leader and a majority: JetStream's meta group, every server that has
// joined the cluster, then lacks one, as when a node left it for good.
func metaHint(msg string) string {
	if !strings.Contains(msg, "JetStream system temporarily unavailable") {
		return " (" + noQuorumCause + ": check that the others run and reach each other, or ask another node with --url)"
	}
	return " (" + noMetaQuorumCause + ": a node that joined and left for good still counts; bring it back, " +
		"or see README \"Beyond one machine\")"
}

// noQuorumHint is the hint a command's error message gets when it says
// JetStream did not answer for want of a quorum (err_code 10008, through
// the service too, or a stream that gave no response), once.
func noQuorumHint(msg string) string {
	if strings.Contains(msg, noQuorumCause) || strings.Contains(msg, noMetaQuorumCause) ||
		!strings.Contains(msg, "JetStream system temporarily unavailable") && !strings.Contains(msg, "no response from stream") {
		return ""
	}
	return noQuorum
}

// grantorNodes asks every running lease service for its info and sorts
// the answers that arrive within wait into those of bucket and those of
// other buckets on the same account (another's was listed as the
// bucket's, found by an outside client; then left out, which hid the
// hazard, found in review).
func grantorNodes(nc *nats.Conn, bucket string, wait time.Duration) (nodes, others []GrantorNode, err error) {
	found, err := grantor.Nodes(nc, wait)
	nodes = make([]GrantorNode, 0, len(found))
	for _, n := range found {
		g := GrantorNode{Node: n.Node, ID: n.ID, NATSURL: redact.URL(n.NATSURL), Version: n.Version, Policy: n.Policy, Build: n.Build}
		if n.Bucket != bucket {
			g.Bucket = n.Bucket
			others = append(others, g)
			continue
		}
		nodes = append(nodes, g)
	}
	return nodes, others, err
}

func printStatus(p printer, s Status) {
	if p.json {
		p.obj(s)
		return
	}
	fmt.Fprintf(p.w, "bucket    %s (R%d)\n", s.Bucket, s.Replicas)
	if s.NoLeader {
		// The replicas are as the answering node last heard of them:
		// no leader has heard from them lately.
		fmt.Fprintf(p.w, "leader    none (no quorum: nothing is granted or renewed)\n")
		for _, peer := range s.Peers {
			fmt.Fprintf(p.w, "replica   %s\n", peerName(peer.Name))
		}
	} else {
		switch {
		case s.LostQuorum:
			fmt.Fprintf(p.w, "leader    %s (no quorum: hears from %d of %d followers; nothing is granted or renewed)\n",
				s.Leader, reachablePeers(s), len(s.Peers))
		case s.Leader != "":
			fmt.Fprintf(p.w, "leader    %s\n", s.Leader)
		}
		for _, peer := range s.Peers {
			fmt.Fprintf(p.w, "follower  %s %s\n", peerName(peer.Name), peerState(peer))
		}
		switch {
		case s.LeasesUnknown == countTimedOut:
			// Not "JetStream did not answer the count": the count is the
			// grantors' unless none answers, and this was status's own
			// deadline (found by an outside client).
			fmt.Fprintf(p.w, "leases    unknown (no answer within --timeout)\n")
		case s.LeasesUnknown != "":
			fmt.Fprintf(p.w, "leases    unknown (the count could not be read)\n")
		case !s.LostQuorum:
			fmt.Fprintf(p.w, "leases    %d live\n", s.Leases)
		}
	}
	named, policies, builds := map[string]int{}, map[string]bool{}, map[string]bool{}
	for _, g := range s.Grantors {
		named[g.Node]++
		builds[g.Build] = true
		if g.Policy != "" { // "": a grantor too old to say
			policies[g.Policy] = true
		}
	}
	// One policy, said once; several, said per grantor, with a warning: a
	// request is then granted by one node and refused by another (found by
	// an outside client, mid-way through a rolling change of --max-ttl).
	disagree := len(policies) > 1
	for policy := range policies {
		if !disagree {
			fmt.Fprintf(p.w, "policy    %s\n", policy)
		}
	}
	if len(s.Grantors) == 0 {
		// It said nothing: a bucket whose grantors had all stopped looked
		// like one served, its leases counted (found by an outside client).
		fmt.Fprintf(p.w, "grantor   none answered (no leased serve of this bucket runs, or none answered within %v: "+
			"the service's grants, renewals and releases fail until one does)\n", grantorsWait)
	}
	for _, g := range s.Grantors {
		line := fmt.Sprintf("grantor   %s %s", g.Node, g.NATSURL)
		if named[g.Node] > 1 {
			// Grantors that share a node name (serve --nats-url on one
			// host: the host name) are told apart by their service ID.
			line += " (id " + g.ID + ")"
		}
		if disagree || g.Policy == "" && len(policies) > 0 {
			line += " (" + cmp.Or(g.Policy, "policy not said: an older leased") + ")"
		}
		if len(builds) > 1 {
			// Mid-way through a rolling upgrade: which node runs which.
			line += " (build " + cmp.Or(g.Build, "not said") + ")"
		}
		fmt.Fprintln(p.w, line)
	}
	if disagree {
		fmt.Fprintf(p.w, "WARNING   the grantors grant with different policies (serve's --grantor-margin, --min-ttl, --max-ttl): "+
			"one request is granted by one and refused by another; give them the same\n")
	}
	shared := s.bucketsShareSubjects()
	for _, g := range s.OtherBuckets {
		if !shared {
			fmt.Fprintf(p.w, "elsewhere grantor %s (id %s, %s) serves bucket %q, not this one\n", g.Node, g.ID, g.NATSURL, g.Bucket)
			continue
		}
		fmt.Fprintf(p.w, "WARNING   grantor %s (id %s, %s) serves bucket %q on this NATS account: requests reach either, "+
			"so a lease can be granted twice; one account serves one bucket\n", g.Node, g.ID, g.NATSURL, g.Bucket)
	}
}

// peerName is a follower's name, or "peer ID (name not known yet)" for
// the sentence nats-server puts there for a peer it has not heard from
// since it started (the line read "follower  Server name unknown at this
// time (peerID: FlDeG4Ai) unreachable").
func peerName(name string) string {
	if id, ok := strings.CutPrefix(name, "Server name unknown at this time (peerID: "); ok {
		return "peer " + strings.TrimSuffix(id, ")") + " (name not known yet)"
	}
	return name
}

// peerState is a follower's line in `leased status`.
func peerState(p PeerStatus) string {
	seen := fmt.Sprintf("seen %v ago", p.Active.Round(time.Millisecond))
	switch {
	case p.Offline:
		return "unreachable (offline)"
	case p.Unreachable && p.Active == 0:
		return "unreachable (not seen by this leader)"
	case p.Unreachable:
		return "unreachable (" + seen + ")"
	case !p.Current:
		return fmt.Sprintf("behind by %d (%s)", p.Lag, seen)
	default:
		return "current (" + seen + ")"
	}
}
