package api

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
)

// FuzzLeaseJSON checks that Lease's own encoding is byte for byte
// encoding/json's encoding of its fields, whatever the strings, numbers
// and times, and that the fast path is the one leased's own leases take.
func FuzzLeaseJSON(f *testing.F) {
	f.Add("jobs.nightly", "worker-7", uint64(12), uint64(40), int64(15e9), int64(17e9), int64(1764633600123456789),
		"role", "primary", "0123456789abcdef0123456789abcdef", "req-1", false, "node-1", true, int64(3600), int64(31000))
	f.Add("a<b>", "h\u2028", uint64(0), uint64(1<<63), int64(-1), int64(0), int64(-1<<63),
		"", "\x00", "\"", "\\", true, "", false, int64(-7200), int64(-1))
	f.Add("a", "b", uint64(1), uint64(2), int64(1), int64(2), int64(1<<62), "k", "v\xff", "", "", false, "n", false, int64(25*3600), int64(0))
	f.Fuzz(func(t *testing.T, name, holder string, token, rev uint64, ttl, serverTTL, at int64,
		k, v, secret, rid string, recovered bool, node string, flapping bool, offset, heldBack int64) {
		zone := time.FixedZone("z", int(offset))
		l := Lease{
			Name: name, Holder: holder, Token: token, Revision: rev, TTL: Duration(ttl), ServerTTL: Duration(serverTTL),
			StoredAt: time.Unix(0, at).UTC(), GrantedAt: time.Unix(0, at/2).In(zone), ExpiresAt: time.Unix(0, at).Add(time.Duration(ttl)),
			Secret: secret, RequestID: rid, GrantTrace: rid + secret, Recovered: recovered, ServerTime: time.Unix(at%1e12, 0), Node: node, Flapping: flapping,
			HeldBackMS: heldBack,
		}
		if k != "" || v != "" {
			l.Attributes = map[string]string{k: v, "z" + k: v + "z"}
		}
		want, wantErr := json.Marshal(l)
		got, err := l.AppendJSON([]byte("prefix"))
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("AppendJSON error %v, encoding/json's %v", err, wantErr)
		}
		if err != nil {
			return
		}
		if !bytes.Equal(got, append([]byte("prefix"), want...)) {
			t.Fatalf("AppendJSON wrote\n%s\nencoding/json\n%s", got, want)
		}
	})
}

// TestLeaseJSONFastPath: a lease as leased makes it (names, holders and
// secrets of printable ASCII, times in UTC) is encoded without falling
// back to reflection.
func TestLeaseJSONFastPath(t *testing.T) {
	now := time.Now().UTC()
	l := Lease{Name: "svc.api.a-1", Holder: "host-1:4711", Token: 7, Revision: 12, TTL: Duration(10 * time.Second),
		ServerTTL: Duration(12 * time.Second), StoredAt: now, GrantedAt: now, ExpiresAt: now.Add(10 * time.Second),
		Attributes: map[string]string{"addr": "10.0.0.1:80", "node": "n1"}, Secret: "00112233445566778899aabbccddeeff",
		ServerTime: now, Node: "n1"}
	if _, ok := l.appendPlain(nil); !ok {
		t.Fatal("a lease as leased makes it fell back to encoding/json")
	}
	if allocs := testing.AllocsPerRun(100, func() { _, _ = l.AppendJSON(make([]byte, 0, 512)) }); allocs > 6 {
		t.Errorf("AppendJSON allocates %.0f times (want at most 6: the sorted keys and the durations' strings)", allocs)
	}
}

// BenchmarkLeaseJSON: a reply's lease encoded by encoding/json's
// reflection and by AppendJSON.
//
//	go test -run '^$' -bench LeaseJSON ./grantor/api/
func BenchmarkLeaseJSON(b *testing.B) {
	now := time.Now().UTC()
	l := Lease{Name: "bench.live.12345", Holder: "bench-holder-0001", Token: 7, Revision: 123456, TTL: Duration(30 * time.Second),
		ServerTTL: Duration(32 * time.Second), StoredAt: now, GrantedAt: now, ExpiresAt: now.Add(30 * time.Second),
		ServerTime: now, Node: "n1"}
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = json.Marshal(l)
		}
	})
	b.Run("append", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = l.AppendJSON(make([]byte, 0, 512))
		}
	})
}

// A type embedding Lease keeps its own fields in json.Marshal: Lease has
// no MarshalJSON that it would inherit (the CLI's -o json embeds it to
// leave out a zero server_time).
func TestLeaseEmbeddedKeepsItsFields(t *testing.T) {
	type out struct {
		Lease
		ServerTime *time.Time `json:"server_time,omitempty"`
	}
	b, err := json.Marshal(out{Lease: Lease{Name: "a", Holder: "h"}})
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b, []byte("server_time")) {
		t.Fatalf("the embedding type's encoding %s has the Lease's server_time", b)
	}
}
