package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leased/leased/grantor"
	"github.com/leased/leased/grantor/client"
	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/kvleasetest"
)

// A follower the stream leader has not heard from is unreachable, whatever
// stale lag or "current" flag the leader still reports for it.
func TestPeerState(t *testing.T) {
	for _, tc := range []struct {
		name    string
		offline bool
		current bool
		lag     uint64
		active  time.Duration
		want    string
	}{
		{"live and current", false, true, 0, 800 * time.Millisecond, "current (seen 800ms ago)"},
		{"live and catching up", false, false, 5, 300 * time.Millisecond, "behind by 5 (seen 300ms ago)"},
		{"at the bound", false, false, 5, peerSeenWithin, "behind by 5 (seen 5s ago)"},
		// A new leader elected after the follower died never heard from it:
		// nats-server reports Active 0 and the lag of an index it never learned.
		{"dead, never seen by this leader", false, false, 5, 0, "unreachable (not seen by this leader)"},
		// The leader of the follower's last answer still counts it current
		// (no writes since) until nats-server's own 10 s.
		{"dead, still flagged current", false, true, 0, 7 * time.Second, "unreachable (seen 7s ago)"},
		{"dead, behind", false, false, 3, 12 * time.Second, "unreachable (seen 12s ago)"},
		{"offline", true, false, 0, 0, "unreachable (offline)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := PeerStatus{Name: "n3", Current: tc.current, Lag: tc.lag, Active: tc.active, Offline: tc.offline,
				Unreachable: peerUnreachable(tc.offline, tc.current, tc.active)}
			if got := peerState(p); got != tc.want {
				t.Errorf("peerState(%+v) = %q, want %q", p, got, tc.want)
			}
		})
	}
}

// Grantors that share a node name (serve --nats-url on one host) get their
// service IDs in status; others keep the short line.
func TestPrintStatusTellsGrantorsApart(t *testing.T) {
	var b strings.Builder
	printStatus(printer{w: &b}, Status{Bucket: "leases", Replicas: 1, Grantors: []GrantorNode{
		{Node: "vm", ID: "a1", NATSURL: "nats://127.0.0.1:4222"},
		{Node: "vm", ID: "b2", NATSURL: "nats://127.0.0.1:4222"},
		{Node: "n3", ID: "c3", NATSURL: "nats://127.0.0.1:4224"},
	}})
	for _, want := range []string{
		"grantor   vm nats://127.0.0.1:4222 (id a1)\n",
		"grantor   vm nats://127.0.0.1:4222 (id b2)\n",
		"grantor   n3 nats://127.0.0.1:4224\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, b.String())
		}
	}
}

// A follower whose name the leader does not know yet (nats-server puts a
// sentence in its place) is shown by its peer ID (found by an outside
// client).
func TestPrintStatusPeerNameUnknown(t *testing.T) {
	var b strings.Builder
	printStatus(printer{w: &b}, Status{Bucket: "leases", Replicas: 3, Leader: "n1", Peers: []PeerStatus{
		{Name: "Server name unknown at this time (peerID: FlDeG4Ai)", Offline: true, Unreachable: true},
	}})
	if !strings.Contains(b.String(), "follower  peer FlDeG4Ai (name not known yet) ") {
		t.Errorf("status:\n%s\nwant the follower shown by its peer ID", b.String())
	}
}

// Gossip needs unique member names: grantors with --nats-url on one host
// share the host name, so their gossip names carry the process ID.
func TestGossipName(t *testing.T) {
	host := nodeName(serveFlags{})
	for _, tc := range []struct {
		f    serveFlags
		want string
	}{
		{serveFlags{}, host},
		{serveFlags{name: "n1"}, "n1"},
		{serveFlags{name: "n1", natsURL: "nats://a:4222"}, "n1"},
		{serveFlags{natsURL: "nats://a:4222"}, fmt.Sprintf("%s-%d", host, os.Getpid())},
	} {
		if got := gossipName(tc.f); got != tc.want {
			t.Errorf("gossipName(name %q, nats-url %q) = %q, want %q", tc.f.name, tc.f.natsURL, got, tc.want)
		}
	}
}

// A JetStream that does not answer (503, or nothing within --timeout) is
// usually a cluster without a majority: status says what to check.
func TestQuorumHint(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		hint bool
	}{
		{"503", fmt.Errorf("stream info: %w", &jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}), true},
		{"no answer", fmt.Errorf("stream info: %w", context.DeadlineExceeded), true},
		{"not found", &jetstream.APIError{Code: 404, ErrorCode: 10059, Description: "stream not found"}, false},
	} {
		hint := quorumHint(c.err)
		if got := hint != ""; got != c.hint {
			t.Errorf("%s: hint %t, want %t", c.name, got, c.hint)
		}
		// status's own hint must not send the user to status, which is
		// what failed (found by an outside client).
		if strings.Contains(hint, "leased status") {
			t.Errorf("%s: hint %q suggests leased status", c.name, hint)
		}
	}
}

// A replicated bucket whose stream has no leader (no quorum) says so, and
// names its replicas without a leader's view of them: it printed them as
// followers "not seen by this leader", with a lease count the grantors'
// index had from before (found by an outside client).
func TestPrintStatusWithoutALeader(t *testing.T) {
	var b strings.Builder
	printStatus(printer{w: &b}, Status{Bucket: "leases", Replicas: 3, NoLeader: true, Peers: []PeerStatus{
		{Name: "n1", Unreachable: true}, {Name: "n2", Unreachable: true},
	}, Grantors: []GrantorNode{{Node: "n3", NATSURL: "nats://127.0.0.1:4224"}}})
	want := "bucket    leases (R3)\nleader    none (no quorum: nothing is granted or renewed)\nreplica   n1\nreplica   n2\ngrantor   n3 nats://127.0.0.1:4224\n"
	if b.String() != want {
		t.Errorf("status without a leader:\n%s\nwant\n%s", b.String(), want)
	}
}

// An error that says JetStream had no quorum gets the hint, once, whatever
// command it came from; others get none.
func TestNoQuorumHint(t *testing.T) {
	for msg, want := range map[string]bool{
		"unavailable: grantor unavailable: last revision: nats: API error: code=503 err_code=10008 description=JetStream system temporarily unavailable": true,
		"unavailable: grantor unavailable: grant: nats: no response from stream":                                                                         true,
		"unavailable: lease bucket: context deadline exceeded" + quorumHint(context.DeadlineExceeded):                                                    false, // status said it already
		"held: lease \"a\" is held by \"b\" (token 3)":                                                                                                   false,
	} {
		if got := noQuorumHint(msg) != ""; got != want {
			t.Errorf("noQuorumHint(%q) given: %v, want %v", msg, got, want)
		}
	}
}

// A request the service dropped for its reply subject (an --inbox-prefix
// outside its --reply-prefixes) was reported as a grantor that did not
// answer, with no word of why (found by an outside client).
func TestInboxHint(t *testing.T) {
	unavailable := fmt.Errorf("%w: the grantor did not answer", kvlease.ErrUnavailable)
	for _, c := range []struct {
		err    error
		prefix string
		hint   bool
	}{
		{unavailable, "myinbox", true},
		{unavailable, "_INBOX_app", false},
		{unavailable, "", false},
		{errors.New("held"), "myinbox", false},
	} {
		err := inboxHint(c.err, c.prefix)
		if got := strings.Contains(err.Error(), "--reply-prefixes"); got != c.hint || !errors.Is(err, c.err) {
			t.Errorf("inboxHint(%v, %q) = %v; want a hint %t, and the error kept", c.err, c.prefix, err, c.hint)
		}
	}
}

// A stream leader that has not heard lately from enough followers to make
// a majority commits nothing: status says so and fails. It printed
// "leader n2", both followers unreachable and a lease count, and exited 0,
// for 10-15 s after the leader lost its two followers, while every grant
// failed (found by an outside client, 2 of 2 tries).
func TestStatusLeaderWithoutQuorum(t *testing.T) {
	gone := PeerStatus{Name: "n1", Active: 9 * time.Second, Unreachable: true}
	live := PeerStatus{Name: "n3", Current: true, Active: 300 * time.Millisecond}
	for _, c := range []struct {
		name string
		s    Status
		lost bool
	}{
		{"both followers gone", Status{Bucket: "leases", Replicas: 3, Leader: "n2", Peers: []PeerStatus{gone, {Name: "n3", Unreachable: true}}}, true},
		{"one follower gone", Status{Bucket: "leases", Replicas: 3, Leader: "n2", Peers: []PeerStatus{gone, live}, Leases: 4}, false},
		{"all current", Status{Bucket: "leases", Replicas: 3, Leader: "n2", Peers: []PeerStatus{live, {Name: "n1", Current: true}}}, false},
		{"R5, two of four", Status{Bucket: "leases", Replicas: 5, Leader: "n1", Peers: []PeerStatus{live, live, gone, gone}}, false},
		{"R5, one of four", Status{Bucket: "leases", Replicas: 5, Leader: "n1", Peers: []PeerStatus{live, gone, gone, gone}}, true},
		{"R1", Status{Bucket: "leases", Replicas: 1}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := lostQuorum(c.s); got != c.lost {
				t.Fatalf("lostQuorum = %t, want %t", got, c.lost)
			}
			c.s.LostQuorum = c.lost
			var b strings.Builder
			printStatus(printer{w: &b}, c.s)
			err := statusErr(c.s)
			if c.lost {
				if err == nil || !errors.Is(err, kvlease.ErrUnavailable) {
					t.Errorf("status exits with %v, want ErrUnavailable", err)
				}
				if !strings.Contains(b.String(), "no quorum") || strings.Contains(b.String(), "\nleases ") {
					t.Errorf("status:\n%s\nwant no quorum said, and no lease count", b.String())
				}
				if strings.Contains(err.Error(), "leased status") {
					t.Errorf("status's error %q suggests leased status", err)
				}
				return
			}
			if err != nil {
				t.Errorf("status exits with %v, want success", err)
			}
			if strings.Contains(b.String(), "no quorum") {
				t.Errorf("status:\n%s\nsays no quorum", b.String())
			}
		})
	}
}

// status says the grantors' policy once when they agree, and each one's
// with a warning when they do not: mid-way through a rolling change of
// serve --max-ttl, one request was granted by one node and refused by
// another, and nothing said why (found by an outside client).
func TestStatusSaysThePolicy(t *testing.T) {
	const p1, p2 = "grantor margin 1s, durations 1s to 1h0m0s", "grantor margin 3s, durations 1s to 30s"
	for _, c := range []struct {
		name     string
		policies []string
		want     []string
		not      []string
	}{
		{"agree", []string{p1, p1}, []string{"\npolicy    " + p1 + "\n", "grantor   n1 nats://a\n", "grantor   n2 nats://b\n"}, []string{"WARNING"}},
		{"disagree", []string{p1, p2}, []string{"grantor   n1 nats://a (" + p1 + ")\n", "grantor   n2 nats://b (" + p2 + ")\n", "WARNING   the grantors grant with different policies"}, []string{"\npolicy "}},
		{"an older grantor", []string{p1, ""}, []string{"\npolicy    " + p1 + "\n", "grantor   n1 nats://a\n", "grantor   n2 nats://b (policy not said: an older leased)\n"}, []string{"WARNING"}},
		{"none said", []string{"", ""}, []string{"grantor   n1 nats://a\n"}, []string{"WARNING", "\npolicy "}},
		// Builds are named only where they differ: mid-way through a
		// rolling upgrade, which node runs which (every build said
		// version 0.1.0; found by an outside client).
		{"builds differ", []string{p1, p1}, []string{"grantor   n1 nats://a (build 0123456789ab)\n", "grantor   n2 nats://b (build not said)\n"}, []string{"WARNING"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := Status{Bucket: "leases", Replicas: 1, Grantors: []GrantorNode{
				{Node: "n1", ID: "i1", NATSURL: "nats://a", Policy: c.policies[0]}, {Node: "n2", ID: "i2", NATSURL: "nats://b", Policy: c.policies[1]}}}
			if c.name == "builds differ" {
				s.Grantors[0].Build = "0123456789ab"
			}
			var b strings.Builder
			printStatus(printer{w: &b}, s)
			for _, w := range c.want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("status:\n%s\nwant %q", b.String(), w)
				}
			}
			for _, n := range c.not {
				if strings.Contains(b.String(), n) {
					t.Errorf("status:\n%s\nwant no %q", b.String(), n)
				}
			}
		})
	}
}

// status warns of another bucket's grantor only where two buckets' lease
// services share the account's subjects: asked about a bucket written
// directly (elect --bucket, bench --direct), with no service of its own,
// beside one grantor of the default bucket, it said "a lease can be
// granted twice" of a healthy set-up (review).
func TestStatusOtherBucketsWarnOnlyOfTwoServices(t *testing.T) {
	g := func(node, bucket string) GrantorNode {
		return GrantorNode{Node: node, ID: "id-" + node, NATSURL: "nats://" + node, Bucket: bucket}
	}
	for _, c := range []struct {
		name string
		s    Status
		warn bool
	}{
		{"beside this bucket's grantor", Status{Bucket: "leases", Replicas: 1, Grantors: []GrantorNode{g("n1", "")}, OtherBuckets: []GrantorNode{g("old", "other")}}, true},
		{"a direct bucket beside one grantor", Status{Bucket: "elections", Replicas: 1, OtherBuckets: []GrantorNode{g("n1", "leases"), g("n2", "leases")}}, false},
		{"a direct bucket beside two buckets' grantors", Status{Bucket: "elections", Replicas: 1, OtherBuckets: []GrantorNode{g("n1", "leases"), g("n2", "other")}}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			var b strings.Builder
			printStatus(printer{w: &b}, c.s)
			if got := strings.Contains(b.String(), "granted twice"); got != c.warn {
				t.Errorf("status:\n%s\nwarns of a lease granted twice: %t, want %t", b.String(), got, c.warn)
			}
			if err := statusErr(c.s); (err != nil) != c.warn || c.warn && !errors.Is(err, grantor.ErrOtherBucket) {
				t.Errorf("status exits with %v; want ErrOtherBucket: %t", err, c.warn)
			}
			for _, o := range c.s.OtherBuckets {
				if !strings.Contains(b.String(), "grantor "+o.Node+" (id ") {
					t.Errorf("status:\n%s\nwant grantor %s named", b.String(), o.Node)
				}
			}
		})
	}
}

// -o json gives no lease count where the text gives none, the stream
// without a leader or its leader without a quorum: it said "leases":0
// while the cluster held leases (found by an outside client).
func TestStatusJSONCountsOnlyWithAQuorum(t *testing.T) {
	peers := []PeerStatus{{Name: "n1", Unreachable: true}, {Name: "n3", Unreachable: true}}
	for _, c := range []struct {
		name string
		s    Status
		want bool
	}{
		{"no leader", Status{Bucket: "leases", Replicas: 3, NoLeader: true, Peers: peers}, false},
		{"no quorum", Status{Bucket: "leases", Replicas: 3, Leader: "n2", LostQuorum: true, Peers: peers}, false},
		{"a quorum, no leases", Status{Bucket: "leases", Replicas: 3, Leader: "n2"}, true},
		{"a quorum", Status{Bucket: "leases", Replicas: 3, Leader: "n2", Leases: 4}, true},
	} {
		var b strings.Builder
		printStatus(printer{w: &b, json: true}, c.s)
		var got map[string]any
		if err := json.Unmarshal([]byte(b.String()), &got); err != nil {
			t.Fatalf("%s: %q: %v", c.name, b.String(), err)
		}
		n, ok := got["leases"]
		if ok != c.want || ok && n != float64(c.s.Leases) {
			t.Errorf("%s: %s\nwant a lease count: %t", c.name, b.String(), c.want)
		}
		if got["bucket"] != "leases" || got["replicas"] != float64(3) {
			t.Errorf("%s: %s\nwant the bucket and its replicas", c.name, b.String())
		}
	}
}

// A count that status's own --timeout cut off says so, and on one server
// sends no one to look for a cluster's majority: a --timeout too short for
// the server read as a cluster without one (found trying status).
func TestStatusCountTimedOut(t *testing.T) {
	srv := kvleasetest.NewServer(t)
	st := kvleasetest.OpenStore(t, srv.ClientURL()) // the bucket, with no grantor serving it
	nc := kvleasetest.Connect(t, srv.ClientURL())
	cl, err := client.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	slow := func(ctx context.Context) (int, error) { // a count that takes longer than the timeout
		<-ctx.Done()
		return 0, fmt.Errorf("%w: %w", kvlease.ErrUnavailable, ctx.Err())
	}
	s, err := status(t.Context(), nc, cl, st.Bucket(), time.Second, slow)
	if err != nil {
		t.Fatal(err)
	}
	err = statusErr(s)
	if !errors.Is(err, kvlease.ErrUnavailable) || !strings.Contains(err.Error(), "no answer within --timeout") ||
		strings.Contains(err.Error(), "majority of its nodes") {
		t.Errorf("status of an R1 bucket whose count timed out: %v; want the timeout named, and no cluster's majority", err)
	}
}

// A count cut off by anything but status's own --timeout (an interrupt, or
// withConn cancelling for a refusal of the server's) is not said to be the
// timeout's: the line told an interrupted status, or one whose user may
// not count, to try a longer --timeout (found in review).
func TestStatusCountCancelledNotTimedOut(t *testing.T) {
	srv := kvleasetest.NewServer(t)
	st := kvleasetest.OpenStore(t, srv.ClientURL())
	nc := kvleasetest.Connect(t, srv.ClientURL())
	cl, err := client.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	interrupted := func(ctx context.Context) (int, error) { // the count's caller interrupted as it waits
		cancel()
		<-ctx.Done()
		return 0, fmt.Errorf("%w: %w", kvlease.ErrUnavailable, ctx.Err())
	}
	s, err := status(ctx, nc, cl, st.Bucket(), time.Minute, interrupted)
	if err != nil {
		t.Fatal(err)
	}
	if s.LeasesUnknown == "" || strings.Contains(s.LeasesUnknown, "--timeout") {
		t.Errorf("count of a status interrupted within its --timeout: leases unknown %q; want it said, and not as --timeout's", s.LeasesUnknown)
	}
}

// A count not read says why in a word, not "JetStream did not answer the
// count": the count is the grantors' (JetStream's only when none
// answers), and one cut off by --timeout was no JetStream's silence
// (found by an outside client, s25d: status --timeout 50ms).
func TestPrintStatusCountNotRead(t *testing.T) {
	for _, c := range []struct{ unknown, want string }{
		{"no answer within --timeout (connecting included): a longer one may do, unless the server is stopped or overloaded", "leases    unknown (no answer within --timeout)\n"},
		{"grantor unavailable: JetStream system temporarily unavailable", "leases    unknown (the count could not be read)\n"},
	} {
		var b strings.Builder
		printStatus(printer{w: &b}, Status{Bucket: "leases", Replicas: 1, Leader: "n1", LeasesUnknown: c.unknown,
			Grantors: []GrantorNode{{Node: "n1", NATSURL: "nats://127.0.0.1:4222"}}})
		if !strings.Contains(b.String(), c.want) {
			t.Errorf("status with the count unknown (%s):\n%s\nwant %q", c.unknown, b.String(), c.want)
		}
	}
}
