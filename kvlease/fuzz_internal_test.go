package kvlease

import (
	"reflect"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// FuzzStoredEntry reads one stored message of the bucket the way the store
// and the watcher do: its headers classify it (a tombstone or server marker
// ends a tenure: gone), else its Nats-TTL header and body decode into a
// record. No input may panic, and a record that decodes holds what the
// store, fences and clients rely on: its revision and name as given, a
// token no higher than its revision (a token is the revision of the
// tenure's grant), a non-negative duration and TTL, and a value that
// encodes and decodes back to the same record. Seeds:
// testdata/fuzz/FuzzStoredEntry.
func FuzzStoredEntry(f *testing.F) {
	f.Add("", "", "16s", uint64(42), []byte(`{"holder":"worker-7","duration_ms":15000,"attrs":{"role":"primary"},"sh":"ab"}`))
	f.Fuzz(func(t *testing.T, kvOp, marker, ttl string, rev uint64, data []byte) {
		h := nats.Header{}
		if kvOp != "" {
			h.Set(hdrKVOp, kvOp)
		}
		if marker != "" {
			h.Set(jetstream.MarkerReasonHeader, marker)
		}
		if ttl != "" {
			h.Set(jetstream.MsgTTLHeader, ttl)
		}
		if g := Removed(h); g != (kvOp != "" || marker != "") {
			t.Fatalf("Removed(%v) = %v", h, g)
		}
		if Removed(h) {
			return // the store never decodes a marker's body
		}
		d := parseTTL(h.Get(jetstream.MsgTTLHeader))
		if d < 0 {
			t.Fatalf("parseTTL(%q) = %v, negative", ttl, d)
		}
		stored := time.Unix(1_700_000_000, 0).UTC()
		rec, err := decodeRecord("jobs.nightly", rev, stored, d, data)
		if err != nil {
			return
		}
		switch {
		case rec.Name != "jobs.nightly" || rec.Revision != rev || rec.TTL != d || !rec.StoredAt.Equal(stored):
			t.Fatalf("record %+v does not keep the message's name, revision %d, TTL %v and time", rec, rev, d)
		case uint64(rec.Token) > rev || rec.Token == 0 && rev != 0:
			t.Fatalf("record of revision %d has token %d", rev, rec.Token)
		case rec.Duration < 0:
			t.Fatalf("record has duration %v", rec.Duration)
		case rec.Secret != "":
			t.Fatal("a record read back carries a secret")
		}
		// What a renewal writes back (it carries token and grant time
		// forward) must read back as the same tenure.
		v := value{Holder: rec.Holder, Token: rec.Token, DurationMS: rec.Duration.Milliseconds(),
			GrantedAt: &rec.GrantedAt, Attributes: rec.Attributes, SecretHash: rec.secretHash, Trace: rec.GrantTrace}
		again, err := decodeRecord(rec.Name, rev, stored, d, v.encode())
		if err != nil {
			t.Fatalf("re-encoded record does not decode: %v", err)
		}
		if !again.GrantedAt.Equal(rec.GrantedAt) {
			t.Fatalf("grant time %v came back as %v", rec.GrantedAt, again.GrantedAt)
		}
		again.GrantedAt = rec.GrantedAt
		if len(rec.Attributes) == 0 {
			rec.Attributes, again.Attributes = nil, nil
		}
		if !reflect.DeepEqual(again, rec) {
			t.Fatalf("round trip changed the record:\n%+v\n%+v", rec, again)
		}
		if rec.ExpiresAt().Before(rec.StoredAt) {
			t.Fatalf("expires %v before it was stored %v", rec.ExpiresAt(), rec.StoredAt)
		}
	})
}
