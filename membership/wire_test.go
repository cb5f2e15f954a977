package membership

import (
	"bytes"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"
)

func TestMetaRoundTrip(t *testing.T) {
	tests := []struct {
		name      string
		meta      map[string]string
		heartbeat time.Duration
	}{
		{"nil", nil, 100 * time.Millisecond},
		{"empty value", map[string]string{"role": ""}, time.Second},
		{"typical", map[string]string{"nats_url": "nats://10.0.0.1:4222", "version": "v0.1.0", "role": "grantor"}, 500 * time.Millisecond},
		{"unicode", map[string]string{"zone": "zürich-ä"}, 10 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := encodeMeta(tt.meta, tt.heartbeat, "")
			if err != nil {
				t.Fatal(err)
			}
			meta, hb, err := decodeMeta(b)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if hb != tt.heartbeat || !maps.Equal(meta, tt.meta) {
				t.Errorf("got %v, %v; want %v, %v", meta, hb, tt.meta, tt.heartbeat)
			}
		})
	}
}

// memberlist compares metadata bytes to detect updates, so equal maps must
// encode identically whatever the map iteration order.
func TestMetaEncodingIsDeterministic(t *testing.T) {
	meta := map[string]string{}
	for _, k := range strings.Split("a b c d e f g h i j k l m n o p", " ") {
		meta[k] = k + k
	}
	first, _ := encodeMeta(meta, time.Second, "")
	for range 20 {
		b, _ := encodeMeta(maps.Clone(meta), time.Second, "")
		if !bytes.Equal(b, first) {
			t.Fatal("encoding depends on map order")
		}
	}
}

func TestMetaRejected(t *testing.T) {
	tests := []struct {
		name string
		meta map[string]string
	}{
		{"empty key", map[string]string{"": "x"}},
		{"invalid key", map[string]string{"\xff": "x"}},
		{"invalid value", map[string]string{"k": "\xff"}},
		{"too big", map[string]string{"k": strings.Repeat("x", MaxMetaSize)}},
		{"too many", func() map[string]string {
			m := map[string]string{}
			for i := range 200 {
				m[string(rune('A'+i))] = "v"
			}
			return m
		}()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := encodeMeta(tt.meta, time.Second, ""); !errors.Is(err, ErrMeta) {
				t.Errorf("err = %v, want ErrMeta", err)
			}
		})
	}
	t.Run("largest that fits", func(t *testing.T) {
		// header: version + 3-byte uvarint(1e6 µs) + count; entry: 1 + 1 + 2 + n
		n := MaxMetaSize - 1 - 3 - 1 - 1 - 1 - 2
		b, err := encodeMeta(map[string]string{"k": strings.Repeat("x", n)}, time.Second, "")
		if err != nil || len(b) != MaxMetaSize {
			t.Errorf("len %d, err %v; want %d, nil", len(b), err, MaxMetaSize)
		}
		if _, err := encodeMeta(map[string]string{"k": strings.Repeat("x", n+1)}, time.Second, ""); err == nil {
			t.Error("one byte more fits")
		}
	})
}

func TestMetaMalformed(t *testing.T) {
	good, _ := encodeMeta(map[string]string{"role": "grantor"}, time.Second, "")
	tests := []struct {
		name string
		b    []byte
	}{
		{"nil", nil},
		{"plain memberlist metadata", []byte("some other format")},
		{"wrong version", append([]byte{2}, good[1:]...)},
		{"truncated", good[:len(good)-1]},
		{"trailing bytes", append(bytes.Clone(good), 0)},
		{"count too large", []byte{metaVersion, 1, 100}},
		{"bad varint", []byte{metaVersion, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}},
		{"empty key", []byte{metaVersion, 1, 1, 0, 0}},
		{"absurd interval", append([]byte{metaVersion}, 0xff, 0xff, 0xff, 0xff, 0x7f, 0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if m, _, err := decodeMeta(tt.b); err == nil {
				t.Errorf("decoded %v", m)
			}
		})
	}
}

func TestMessages(t *testing.T) {
	tests := []struct {
		name string
		b    []byte
		want message
	}{
		{"heartbeat", encodeHeartbeat("node-1", 42, 7), message{msgHeartbeat, 42, 7, "node-1"}},
		{"big numbers", encodeHeartbeat("n", 1<<63, 1<<62), message{msgHeartbeat, 1 << 63, 1 << 62, "n"}},
		{"leaving", encodeLeaving("node-2", 9), message{msgLeaving, 9, 0, "node-2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decodeMessage(tt.b)
			if err != nil || got != tt.want {
				t.Errorf("got %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
	bad := []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"unknown kind", []byte{0x01, 1, 1, 'n'}},
		{"no name", encodeHeartbeat("", 1, 1)},
		{"truncated varint", []byte{msgHeartbeat, 0x80}},
		{"name too long", encodeHeartbeat(strings.Repeat("n", MaxNameLen+1), 1, 1)},
		{"name not UTF-8", encodeLeaving("\xff", 1)},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			if m, err := decodeMessage(tt.b); err == nil {
				t.Errorf("decoded %+v", m)
			}
		})
	}
}

func TestAck(t *testing.T) {
	now := time.Unix(1767225600, 123456789)
	got, ok := decodeAck(encodeAck(now))
	if !ok || !got.Equal(now) {
		t.Errorf("got %v, %v; want %v", got, ok, now)
	}
	for _, b := range [][]byte{nil, {ackVersion}, {2, 0, 0, 0, 0, 0, 0, 0, 0}} {
		if _, ok := decodeAck(b); ok {
			t.Errorf("decoded %x", b)
		}
	}
}
