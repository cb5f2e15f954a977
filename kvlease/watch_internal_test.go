package kvlease

import (
	"bytes"
	"io"
	"log/slog"
	"math"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// storedMsg is a stored message as a watch reads it: its headers and
// data (classify uses nothing else of the message).
type storedMsg struct {
	jetstream.Msg
	h    nats.Header
	data []byte
}

func (m storedMsg) Headers() nats.Header { return m.h }
func (m storedMsg) Data() []byte         { return m.data }

// knowsNone is classify's knownAfter for a watcher with UpdatesOnly that
// knows no tenure's grant: 0 is one that knows every tenure.
const knowsNone = math.MaxUint64

// A tombstone names the tenure it ended. After a gap in a watch's delivery
// (the bucket keeps one entry per lease) that is a later tenure than the
// one the watch saw last, and the event is that tenure's, not the last
// one seen: found in TestObserverRecordsHistory under load, where the
// history recorded h1's tenure as revoked when h1 had released it and h2's
// later tenure was revoked.
func TestTombstoneNamesItsTenure(t *testing.T) {
	s := &Store{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	granted := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	seen := &Record{Name: "a", Holder: "h1", Token: 2, Revision: 3, GrantedAt: granted}
	tombstone := func(token Token, holder string) storedMsg {
		h := nats.Header{}
		h.Set(hdrKVOp, kvOpPurge)
		h.Set(hdrOp, "revoke")
		h.Set(hdrReason, "stuck")
		if token != 0 {
			h.Set(hdrHolder, holder)
			h.Set(hdrToken, strconv.FormatUint(uint64(token), 10))
			h.Set(hdrGranted, granted.Add(time.Second).Format(time.RFC3339Nano))
		}
		return storedMsg{h: h}
	}
	md := &jetstream.MsgMetadata{Sequence: jetstream.SequencePair{Stream: 6}, Timestamp: granted.Add(2 * time.Second)}
	for _, c := range []struct {
		name       string
		msg        storedMsg
		wantHolder string
		wantToken  Token
		wantRecord bool // the event carries the tenure's last record
	}{
		{"the tenure seen last", tombstone(2, "h1"), "h1", 2, true},
		{"a later tenure, unseen", tombstone(5, "h2"), "h2", 5, false},
		{"a plain KV purge, naming none", tombstone(0, ""), "h1", 2, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			live := newTenures()
			live.put(seen, nil, nil)
			ev, _, ok := s.classify("a", md, c.msg, live, false, 0)
			if !ok || ev.Type != EventRevoked || ev.Holder != c.wantHolder || ev.Token != c.wantToken ||
				(ev.Record != nil) != c.wantRecord || ev.GrantedAt.IsZero() {
				t.Fatalf("event %+v (ok %v), want revoked, holder %s, token %d, record %v", ev, ok, c.wantHolder, c.wantToken, c.wantRecord)
			}
			if _, still := live.recs["a"]; still {
				t.Error("the ended lease is still live")
			}
		})
	}
}

// renewalMsg is a renewal of tenure (token) as the store writes it, with
// duration d.
func renewalMsg(token Token, granted time.Time, d time.Duration) storedMsg {
	h := nats.Header{}
	h.Set(hdrOp, "renew")
	h.Set(jetstream.MsgTTLHeader, "12s")
	data := value{Holder: "h1", Token: token, DurationMS: d.Milliseconds(), GrantedAt: &granted,
		Attributes: map[string]string{"zone": "a"}, SecretHash: hashSecret("s3cret"), Trace: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		RequestID: "rid-1"}.encode()
	return storedMsg{h: h, data: data}
}

// A renewal that stores the value of the renewal before it is not decoded
// again, and its record is what decoding would have given: the same
// fields, with the message's revision, time and TTL. One whose value
// differs (here its duration) is decoded.
func TestWatcherRecordOfARepeatedRenewal(t *testing.T) {
	s := &Store{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	granted := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	live := newTenures()
	at := func(rev uint64) *jetstream.MsgMetadata {
		return &jetstream.MsgMetadata{Sequence: jetstream.SequencePair{Stream: rev}, Timestamp: granted.Add(time.Duration(rev) * time.Second)}
	}
	for i, c := range []struct {
		rev    uint64
		d      time.Duration
		reused bool
	}{{3, 10 * time.Second, false}, {4, 10 * time.Second, true}, {5, 10 * time.Second, true}, {6, 20 * time.Second, false}, {7, 20 * time.Second, true}} {
		m := renewalMsg(2, granted, c.d)
		_, reused := live.raws["a"]
		reused = reused && string(live.raws["a"]) == string(m.data)
		ev, _, ok := s.classify("a", at(c.rev), m, live, false, knowsNone)
		if !ok || ev.Type != EventRenewed {
			t.Fatalf("renewal %d: event %+v (ok %v), want renewed", i, ev, ok)
		}
		if reused != c.reused {
			t.Errorf("renewal %d: reused %v, want %v", i, reused, c.reused)
		}
		want, err := decodeRecord("a", c.rev, at(c.rev).Timestamp, 12*time.Second, m.data)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(*ev.Record, want) {
			t.Errorf("renewal %d: record %+v, want %+v", i, *ev.Record, want)
		}
	}
	// A release ends the tenure: nothing of it is kept.
	h := nats.Header{}
	h.Set(hdrKVOp, kvOpPurge)
	h.Set(hdrOp, "release")
	if ev, _, ok := s.classify("a", at(8), storedMsg{h: h}, live, false, knowsNone); !ok || ev.Type != EventReleased {
		t.Fatalf("release: %+v (ok %v)", ev, ok)
	}
	if len(live.recs)+len(live.raws) != 0 {
		t.Errorf("after the release the watcher keeps %d records and %d values", len(live.recs), len(live.raws))
	}
}

// A watcher on the node that wrote a renewal keeps the Store's own copy
// of its value (revCache.renewal), not a second one: at 100k leases each
// copy was about 30 MB of serve's live heap. A value the Store did not
// write, or wrote differently, is copied.
func TestWatcherSharesTheStoresRenewalValue(t *testing.T) {
	s := &Store{log: slog.New(slog.NewTextHandler(io.Discard, nil)), cache: revCache{m: map[string]cacheEntry{}}}
	granted := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	m := renewalMsg(2, granted, 10*time.Second)
	md := &jetstream.MsgMetadata{Sequence: jetstream.SequencePair{Stream: 3}, Timestamp: granted.Add(time.Second)}
	rec, err := decodeRecord("a", 3, md.Timestamp, 12*time.Second, m.data)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		own   []byte // the Store's value at revision 3
		share bool
	}{
		{"written here", bytes.Clone(m.data), true},
		{"written elsewhere", nil, false},
		{"written here differently", append(bytes.Clone(m.data), ' '), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			s.cache.m = map[string]cacheEntry{}
			if c.own != nil {
				s.cache.putSure(rec, time.Time{}, c.own)
			}
			live := newTenures()
			if ev, _, ok := s.classify("a", md, m, live, false, knowsNone); !ok || ev.Type != EventRenewed {
				t.Fatalf("event %+v (ok %v), want renewed", ev, ok)
			}
			kept := live.raws["a"]
			if !bytes.Equal(kept, m.data) {
				t.Fatalf("kept %q, want the stored value", kept)
			}
			if shared := c.own != nil && &kept[0] == &c.own[0]; shared != c.share {
				t.Errorf("kept the Store's copy: %v, want %v", shared, c.share)
			}
			if &kept[0] == &m.data[0] {
				t.Error("kept the message's buffer itself")
			}
		})
	}
	// The watch saw the first renewal before the Store had its answer, so
	// it kept a copy; at the next it takes the Store's.
	s.cache.m = map[string]cacheEntry{}
	live := newTenures()
	if _, _, ok := s.classify("a", md, m, live, false, knowsNone); !ok {
		t.Fatal("not classified")
	}
	own := bytes.Clone(m.data)
	rec.Revision = 4
	s.cache.putSure(rec, time.Time{}, own)
	md4 := &jetstream.MsgMetadata{Sequence: jetstream.SequencePair{Stream: 4}, Timestamp: granted.Add(2 * time.Second)}
	if _, _, ok := s.classify("a", md4, m, live, false, knowsNone); !ok {
		t.Fatal("not classified")
	}
	if kept := live.raws["a"]; &kept[0] != &own[0] {
		t.Error("kept its own copy after the Store had the value")
	}
}

// BenchmarkClassifyRenewal: a watcher's cost per renewal when each stores
// the value of the one before (as a holder's renewals do), against
// decoding every one (values that alternate, so that none repeats).
//
//	go test -run '^$' -bench ClassifyRenewal -benchmem ./kvlease/
func BenchmarkClassifyRenewal(b *testing.B) {
	s := &Store{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	granted := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	msgs := []storedMsg{renewalMsg(2, granted, 10*time.Second), renewalMsg(2, granted, 11*time.Second)}
	for _, c := range []struct {
		name  string
		every int // alternate between the values every this many renewals
	}{{"decoded", 1}, {"repeated", 1 << 30}} {
		b.Run(c.name, func(b *testing.B) {
			live := newTenures()
			rev := uint64(2)
			b.ReportAllocs()
			for i := range b.N {
				rev++
				md := &jetstream.MsgMetadata{Sequence: jetstream.SequencePair{Stream: rev}, Timestamp: granted}
				if _, _, ok := s.classify("a", md, msgs[(i/c.every)%2], live, false, knowsNone); !ok {
					b.Fatal("not classified")
				}
			}
		})
	}
}

// A consumer the server places on a node catching up after a restart
// replays the stream as that node has it: a lease ended while the node
// was down comes first as it was (live), then its end, both before the
// watch began. The end was dropped as history, so the watcher's state
// kept the lease live for good (found by an outside client: a watch
// through a just-restarted node, under load, showed released leases as
// live and never their release). A replayed end of a tenure the watcher
// reported live, and the end a replayed grant carries of such a tenure,
// are reported as changes.
func TestReplayFromABehindNodeEndsWhatItReplayedLive(t *testing.T) {
	s := &Store{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	granted := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	at := func(rev uint64) *jetstream.MsgMetadata {
		return &jetstream.MsgMetadata{Sequence: jetstream.SequencePair{Stream: rev}, Timestamp: granted.Add(time.Duration(rev) * time.Second)}
	}
	grant := func(holder string, tombstone *tombstone) storedMsg {
		h := nats.Header{}
		h.Set(hdrOp, "grant")
		if tombstone != nil {
			tombstone.addTo(h)
		}
		return storedMsg{h: h, data: value{Holder: holder, DurationMS: 10_000}.encode()}
	}
	release := func(holder string, token Token) nats.Header {
		h := nats.Header{}
		h.Set(hdrKVOp, kvOpPurge)
		h.Set(hdrOp, "release")
		h.Set(hdrHolder, holder)
		h.Set(hdrToken, strconv.FormatUint(uint64(token), 10))
		return h
	}
	replay := func(live *tenures, rev uint64, m storedMsg) []Event {
		t.Helper()
		ev, before, ok := s.classify("a", at(rev), m, live, true, 0)
		var evs []Event
		if before != nil {
			evs = append(evs, *before)
		}
		if ok {
			evs = append(evs, ev)
		}
		return evs
	}

	t.Run("its end", func(t *testing.T) {
		live := newTenures()
		if evs := replay(live, 3, grant("h1", nil)); len(evs) != 1 || evs[0].Type != EventGranted || !evs[0].Replay {
			t.Fatalf("the stale grant: %+v, want one replayed grant", evs)
		}
		evs := replay(live, 6, storedMsg{h: release("h1", 3)})
		if len(evs) != 1 || evs[0].Type != EventReleased || evs[0].Replay || evs[0].Token != 3 || evs[0].Record == nil {
			t.Fatalf("its release: %+v, want the release of token 3 as a change", evs)
		}
		if len(live.recs) != 0 {
			t.Errorf("the released lease is still live: %+v", live.recs)
		}
	})
	t.Run("a later grant carrying its end", func(t *testing.T) {
		live := newTenures()
		replay(live, 3, grant("h1", nil))
		ended := tombstoneOf(6, granted.Add(6*time.Second), release("h1", 3))
		evs := replay(live, 7, grant("h2", ended))
		if len(evs) != 2 || evs[0].Type != EventReleased || evs[0].Replay || evs[0].Token != 3 ||
			evs[1].Type != EventGranted || !evs[1].Replay || evs[1].Token != 7 {
			t.Fatalf("events %+v, want the release of token 3 as a change, then the replayed grant of token 7", evs)
		}
	})
	t.Run("an end the watcher never saw live", func(t *testing.T) {
		// The usual replay: how a lease ended before the watch is history.
		if evs := replay(newTenures(), 6, storedMsg{h: release("h1", 3)}); len(evs) != 0 {
			t.Fatalf("events %+v, want none", evs)
		}
	})
}

// A grant's event gives the end of the tenure before it that it carries
// (Event.Replaced), whether or not the watcher saw that tenure: an
// observer whose watch began after a grant over a record the server had
// kept past its TTL never saw the record, and the history's fold ended
// its tenure "unknown" at the grant (found by an outside client). The end
// of a kept record has that record's revision, and its expiry for time.
func TestGrantEventCarriesTheEndItReplaced(t *testing.T) {
	s := &Store{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	stored := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	kept := Record{Name: "a", Holder: "old", Token: 3, Revision: 4, StoredAt: stored, GrantedAt: stored.Add(-time.Second),
		TTL: 2 * time.Second, Duration: 2 * time.Second}
	h := nats.Header{}
	h.Set(hdrOp, "grant")
	overdueTombstone(kept).addTo(h)
	md := &jetstream.MsgMetadata{Sequence: jetstream.SequencePair{Stream: 9}, Timestamp: stored.Add(time.Minute)}
	for _, knownAfter := range []uint64{0, knowsNone} {
		ev, before, ok := s.classify("a", md, storedMsg{h: h, data: value{Holder: "new", DurationMS: 10_000}.encode()}, newTenures(), false, knownAfter)
		if !ok || before != nil || ev.Type != EventGranted || ev.Token != 9 {
			t.Fatalf("the grant: %+v, %+v, %v; want the grant of token 9 alone (the watcher never saw token 3)", ev, before, ok)
		}
		end, ok := ev.Replaced()
		if !ok || end.Type != EventExpired || end.Name != "a" || end.Token != 3 || end.Holder != "old" || end.Revision != 4 ||
			!end.Time.Equal(kept.ExpiresAt()) || !end.GrantedAt.Equal(kept.GrantedAt) || end.Reason != overdueReason || end.Record != nil {
			t.Errorf("the end the grant replaced: %+v, %v; want the expiry of token 3 at %v, revision 4", end, ok, kept.ExpiresAt())
		}
	}
	// A grant of a free name carries none.
	plain := nats.Header{}
	plain.Set(hdrOp, "grant")
	ev, _, _ := s.classify("a", md, storedMsg{h: plain, data: value{Holder: "new", DurationMS: 10_000}.encode()}, newTenures(), false, 0)
	if end, ok := ev.Replaced(); ok {
		t.Errorf("a grant that carries no tombstone: replaced %+v", end)
	}
}
