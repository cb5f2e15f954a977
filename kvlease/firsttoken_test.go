package kvlease_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/kvleasetest"
)

// A bucket made anew with WithFirstToken grants tokens from there on: after
// a clean restart, and after a SIGKILL that came before anything was
// written to it (the first revision is the stream's configuration, not a
// message the crash could lose).
func TestFirstTokenSurvivesRestarts(t *testing.T) {
	const first = 100_000
	srv := kvleasetest.StartChildServer(t)
	grant := func(name string) kvlease.Token {
		t.Helper()
		st := kvleasetest.OpenStore(t, srv.URL, kvlease.WithFirstToken(first))
		rec, err := st.Grant(t.Context(), kvlease.GrantRequest{Name: name, Holder: "h", Duration: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		return rec.Token
	}
	kvleasetest.OpenStore(t, srv.URL, kvlease.WithFirstToken(first)) // creates the bucket, writes nothing
	srv.Kill()
	srv.Restart()
	if tok := grant("a"); tok != first {
		t.Fatalf("first grant after a SIGKILL of the new bucket's server: token %d, want %d", tok, first)
	}
	srv.Stop()
	srv.Restart()
	if tok := grant("b"); tok <= first {
		t.Fatalf("grant after a clean restart: token %d, want above %d", tok, first)
	}
	// The server purges a stream whose first sequence is below its
	// configured one at each start (filestore.go, newFileStore): the
	// leases granted stay all the same, after a SIGKILL too.
	srv.Kill()
	srv.Restart()
	st := kvleasetest.OpenStore(t, srv.URL, kvlease.WithFirstToken(first))
	if rec, err := st.Get(t.Context(), "a"); err != nil || rec.Token != first {
		t.Fatalf("lease a after restarts: %+v, %v; want token %d", rec, err, first)
	}
	if rec, err := st.Get(t.Context(), "b"); err != nil || rec.Token <= first {
		t.Fatalf("lease b after restarts: %+v, %v", rec, err)
	}
}

// A bucket begun at the largest first token grants, renews and restarts
// as any other; one past it is refused. A bucket begun at 2^62 lost its
// first grant at once (nats-server's file store reads a sequence with bit
// 62 set as a tombstone's), and one begun near 2^63 stopped answering for
// its stream within seconds: WithFirstToken took up to 2^63-1.
func TestFirstTokenAtItsLargest(t *testing.T) {
	if err := kvlease.CheckOptions(kvlease.WithFirstToken(kvlease.MaxFirstToken + 1)); !errors.Is(err, kvlease.ErrInvalidOption) {
		t.Fatalf("first token MaxFirstToken+1: %v, want ErrInvalidOption", err)
	}
	srv := kvleasetest.StartChildServer(t)
	st := kvleasetest.OpenStore(t, srv.URL, kvlease.WithFirstToken(kvlease.MaxFirstToken))
	rec, err := st.Grant(t.Context(), kvlease.GrantRequest{Name: "a", Holder: "h", Duration: time.Minute})
	if err != nil || rec.Token != kvlease.MaxFirstToken {
		t.Fatalf("grant: %+v, %v; want token %d", rec, err, kvlease.MaxFirstToken)
	}
	if _, err := st.Renew(t.Context(), kvlease.RenewRequest{Name: "a", Holder: "h", Token: rec.Token, Revision: rec.Revision,
		Duration: time.Minute, Secret: rec.Secret}); err != nil {
		t.Fatalf("renew: %v", err)
	}
	srv.Stop()
	srv.Restart()
	st = kvleasetest.OpenStore(t, srv.URL)
	if got, err := st.Get(t.Context(), "a"); err != nil || got.Token != rec.Token {
		t.Fatalf("after a restart: %+v, %v; want token %d live", got, err, rec.Token)
	}
}

// An existing bucket keeps its revisions: Open refuses a first token above
// them (it cannot raise them), and takes one they have passed.
func TestFirstTokenOfAnExistingBucket(t *testing.T) {
	srv, st := kvleasetest.NewStore(t)
	for _, name := range []string{"a", "b", "c"} {
		if _, err := st.Grant(t.Context(), kvlease.GrantRequest{Name: name, Holder: "h", Duration: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := kvlease.Open(t.Context(), kvleasetest.JetStream(t, kvleasetest.Connect(t, srv.ClientURL())),
		kvlease.WithFirstToken(1000)); !errors.Is(err, kvlease.ErrBucket) {
		t.Fatalf("Open of a bucket at revision 3 with first token 1000: %v, want ErrBucket", err)
	}
	if _, err := kvlease.Open(t.Context(), kvleasetest.JetStream(t, kvleasetest.Connect(t, srv.ClientURL())),
		kvlease.WithFirstToken(kvlease.MaxFirstToken+1)); !errors.Is(err, kvlease.ErrInvalidOption) {
		t.Fatalf("first token 2^61+1: %v, want ErrInvalidOption (nats-server's file store takes sequences below 2^62)", err)
	}
	for _, first := range []kvlease.Token{0, 1, 4} {
		kvleasetest.OpenStore(t, srv.ClientURL(), kvlease.WithFirstToken(first))
	}
}

// The bucket Open creates with a first token (its stream made by leased)
// is the one nats.go's CreateKeyValue makes, but for its first sequence:
// a nats.go that changes its buckets shows here.
func TestFirstTokenBucketIsNATSKV(t *testing.T) {
	srv := kvleasetest.NewServer(t)
	js := kvleasetest.JetStream(t, kvleasetest.Connect(t, srv.ClientURL()))
	if _, err := js.CreateKeyValue(t.Context(), kvlease.BucketConfig("by_nats")); err != nil {
		t.Fatal(err)
	}
	kvleasetest.OpenStore(t, srv.ClientURL(), kvlease.WithBucket("by_nats"))
	kvleasetest.OpenStore(t, srv.ClientURL(), kvlease.WithBucket("by_us"), kvlease.WithFirstToken(7))
	cfg := func(bucket string) jetstream.StreamConfig {
		s, err := js.Stream(t.Context(), kvlease.StreamName(bucket))
		if err != nil {
			t.Fatal(err)
		}
		return s.CachedInfo().Config
	}
	theirs, ours := cfg("by_nats"), cfg("by_us")
	if ours.FirstSeq != 7 {
		t.Errorf("first sequence %d, want 7", ours.FirstSeq)
	}
	ours.Name, ours.Subjects, ours.FirstSeq = theirs.Name, theirs.Subjects, theirs.FirstSeq
	a, _ := json.Marshal(theirs)
	b, _ := json.Marshal(ours)
	if string(a) != string(b) {
		t.Errorf("stream configs differ:\nnats.go: %s\nleased:  %s", a, b)
	}
}

// On an R3 bucket too: every replica begins at the first token, and a
// restart of the whole cluster (each replaying its raft log) keeps the
// tenure granted and the tokens above it.
func TestFirstTokenR3(t *testing.T) {
	const first = 5000
	servers := kvleasetest.NewCluster(t, 3)
	open := func(s *kvleasetest.Server) *kvlease.Store {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		st, err := kvlease.Open(ctx, kvleasetest.JetStream(t, kvleasetest.Connect(t, s.ClientURL())),
			kvlease.WithReplicas(3), kvlease.WithFirstToken(first))
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	grant := func(st *kvlease.Store, name string) kvlease.Record {
		t.Helper()
		rec, err := kvlease.RetryUnavailable(t.Context(), time.Second, nil, func() (kvlease.Record, error) {
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			return st.Grant(ctx, kvlease.GrantRequest{Name: name, Holder: "h", Duration: time.Hour})
		})
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}
	if rec := grant(open(servers[0]), "a"); rec.Token != first {
		t.Fatalf("first grant: token %d, want %d", rec.Token, first)
	}
	for _, s := range servers {
		s.Shutdown()
	}
	for _, s := range servers {
		if err := s.Restart(); err != nil {
			t.Fatal(err)
		}
	}
	st := open(servers[1])
	if rec := grant(st, "b"); rec.Token <= first {
		t.Fatalf("grant after the cluster's restart: token %d, want above %d", rec.Token, first)
	}
	if rec, err := st.Get(t.Context(), "a"); err != nil || rec.Token != first {
		t.Fatalf("the tenure granted before the restart: %+v, %v", rec, err)
	}
}

// WithNewBucketFirstToken is asked for a first token only when Open is
// about to create the bucket, again after an ErrUnavailable, and the
// larger of its answer and WithFirstToken's is the first.
func TestNewBucketFirstToken(t *testing.T) {
	srv := kvleasetest.NewServer(t)
	js := kvleasetest.JetStream(t, kvleasetest.Connect(t, srv.ClientURL()))
	calls := 0
	first := func(context.Context) (kvlease.Token, error) {
		if calls++; calls == 1 {
			return 0, kvlease.ErrUnavailable
		}
		return 500, nil
	}
	st, err := kvlease.Open(t.Context(), js, kvlease.WithFirstToken(300), kvlease.WithNewBucketFirstToken(first))
	if err != nil {
		t.Fatal(err)
	}
	rec, err := st.Grant(t.Context(), kvlease.GrantRequest{Name: "a", Holder: "h", Duration: time.Minute})
	if err != nil || rec.Token != 500 {
		t.Fatalf("first grant: %+v, %v; want token 500", rec, err)
	}
	if calls != 2 {
		t.Errorf("asked %d times, want 2 (once more after ErrUnavailable)", calls)
	}
	if _, err := kvlease.Open(t.Context(), js, kvlease.WithNewBucketFirstToken(func(context.Context) (kvlease.Token, error) {
		t.Error("asked for a first token of a bucket that exists")
		return 0, nil
	})); err != nil {
		t.Fatal(err)
	}
	if _, err := kvlease.Open(t.Context(), js, kvlease.WithNewBucketFirstToken(nil)); !errors.Is(err, kvlease.ErrInvalidOption) {
		t.Errorf("nil first token function: %v, want ErrInvalidOption", err)
	}
}
