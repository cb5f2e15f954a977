package cli

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/kvleasetest"
)

// The raw baseline's release leaves a tombstone that lapses, as the
// Store's does: it purged without a TTL, and every lease a --raw or
// --compare run released left a tombstone in the user's bucket for good
// (1,745 after one short --compare of grant-release; found by an outside
// client).
func TestBenchRawReleaseTombstoneLapses(t *testing.T) {
	srv := kvleasetest.NewServer(t)
	nc := kvleasetest.Connect(t, srv.ClientURL())
	st := kvleasetest.OpenStoreOn(t, nc)
	c := &connFlags{timeout: 5 * time.Second}
	raw, err := c.openRaw(t.Context(), nc, kvlease.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := kvleasetest.JetStream(t, nc).Stream(t.Context(), "KV_"+kvlease.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	tombstoneTTL := func(g kvlease.Grantor, name string) string {
		t.Helper()
		rec, err := g.Grant(t.Context(), kvlease.GrantRequest{Name: name, Holder: "h", Duration: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if err := g.Release(t.Context(), releaseOf(rec)); err != nil {
			t.Fatal(err)
		}
		m, err := stream.GetLastMsgForSubject(t.Context(), "$KV."+kvlease.DefaultBucket+"."+name)
		if err != nil {
			t.Fatal(err)
		}
		if op := m.Header.Get("KV-Operation"); op != "PURGE" {
			t.Fatalf("%s after its release: KV-Operation %q, want PURGE", name, op)
		}
		return m.Header.Get(jetstream.MsgTTLHeader)
	}
	want := tombstoneTTL(st, "store.x")
	if want == "" {
		t.Fatal("the Store's tombstone has no TTL")
	}
	if got := tombstoneTTL(raw, "raw.x"); got != want {
		t.Errorf("the raw release's tombstone has TTL %q; want %q, as the Store's", got, want)
	}
}
