package membership

import (
	"bytes"
	"maps"
	"math"
	"testing"
	"time"
	"unicode/utf8"
)

// Gossip arrives from any member of the pool, or from anything that can
// reach the gossip port: the decoders below get whatever it sends. Seeds:
// testdata/fuzz/<FuzzName>.

// FuzzDecodeMeta decodes node metadata (memberlist's Node.Meta) as the
// roster does on every join and update. Metadata that decodes has at most
// one entry per input byte (the decoder allocates no more), a heartbeat
// interval in [0, 1h] that the detector turns into a finite suspicion, and
// encodes canonically into metadata that decodes to the same.
func FuzzDecodeMeta(f *testing.F) {
	valid, err := encodeMeta(map[string]string{"grpc": "10.0.0.7:9090", "zone": "a"}, time.Second, "")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(valid)
	f.Fuzz(func(t *testing.T, b []byte) {
		meta, hb, err := decodeMeta(b)
		if err != nil {
			return
		}
		if len(meta) > len(b) {
			t.Fatalf("%d bytes decode to %d entries", len(b), len(meta))
		}
		if hb < 0 || hb > time.Hour {
			t.Fatalf("heartbeat interval %v", hb)
		}
		for k, v := range meta {
			if k == "" || !utf8.ValidString(k) || !utf8.ValidString(v) {
				t.Fatalf("entry %q=%q", k, v)
			}
		}
		var w window
		if s := detectorSuspicion(&w, false, 3*time.Second, hb, 50*time.Millisecond); hb > 0 && (math.IsNaN(s) || s < 0) {
			t.Fatalf("heartbeat %v gives suspicion %v", hb, s)
		}
		meta, role := splitHeartbeatRole(meta)
		enc, err := encodeMeta(meta, hb, role)
		if err != nil {
			if len(b) <= MaxMetaSize {
				t.Fatalf("metadata of %d bytes decodes but does not encode: %v", len(b), err)
			}
			return // larger than memberlist sends
		}
		if len(enc) > len(b) {
			t.Fatalf("canonical encoding %d bytes, input %d", len(enc), len(b))
		}
		meta2, hb2, err := decodeMeta(enc)
		meta2, role2 := splitHeartbeatRole(meta2)
		if err != nil || hb2 != hb || !maps.Equal(meta2, meta) || role2 != role {
			t.Fatalf("round trip: %v %v %q %v, want %v %v %q", meta2, hb2, role2, err, meta, hb, role)
		}
		again, _ := encodeMeta(meta2, hb2, role2)
		if !bytes.Equal(again, enc) {
			t.Fatalf("encoding is not canonical: %x then %x", enc, again)
		}
	})
}

// FuzzDecodeMessage decodes a user message (heartbeat or leaving) as
// NotifyMsg does. A message that decodes names a member in at most
// MaxNameLen bytes of UTF-8, and encodes back to the same message.
func FuzzDecodeMessage(f *testing.F) {
	f.Add(encodeHeartbeat("web-i1", 3, 17))
	f.Add(encodeLeaving("web-i1", 3))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeMessage(b)
		if err != nil {
			return
		}
		if m.name == "" || len(m.name) > MaxNameLen || !utf8.ValidString(m.name) {
			t.Fatalf("member name %q", m.name)
		}
		var enc []byte
		switch m.kind {
		case msgHeartbeat:
			enc = encodeHeartbeat(m.name, m.epoch, m.seq)
		case msgLeaving:
			if m.seq != 0 {
				t.Fatalf("leaving message with seq %d", m.seq)
			}
			enc = encodeLeaving(m.name, m.epoch)
		default:
			t.Fatalf("decoded kind %#x", m.kind)
		}
		if len(enc) > len(b) {
			t.Fatalf("canonical encoding %d bytes, input %d", len(enc), len(b))
		}
		if m2, err := decodeMessage(enc); err != nil || m2 != m {
			t.Fatalf("round trip: %+v %v, want %+v", m2, err, m)
		}
	})
}

// FuzzDecodeAck decodes a probe ack's payload (the peer's clock): one that
// decodes is exactly what encodeAck writes for that time.
func FuzzDecodeAck(f *testing.F) {
	f.Add(encodeAck(time.Unix(1_700_000_000, 123)))
	f.Fuzz(func(t *testing.T, b []byte) {
		at, ok := decodeAck(b)
		if !ok {
			return
		}
		if enc := encodeAck(at); !bytes.Equal(enc, b) {
			t.Fatalf("ack %x decodes to %v, which encodes to %x", b, at, enc)
		}
	})
}
