package kvlease

import (
	"io"
	"log/slog"
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
			live := map[string]*Record{"a": seen}
			ev, _, ok := s.classify("a", md, c.msg, live, false, true)
			if !ok || ev.Type != EventRevoked || ev.Holder != c.wantHolder || ev.Token != c.wantToken ||
				(ev.Record != nil) != c.wantRecord || ev.GrantedAt.IsZero() {
				t.Fatalf("event %+v (ok %v), want revoked, holder %s, token %d, record %v", ev, ok, c.wantHolder, c.wantToken, c.wantRecord)
			}
			if _, still := live["a"]; still {
				t.Error("the ended lease is still live")
			}
		})
	}
}
