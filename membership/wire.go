package membership

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"
	"unicode/utf8"
)

// Wire formats. Everything here is gossiped or sent between members, so
// decoders must reject anything malformed without panicking.
//
// Node metadata (memberlist's Node.Meta, at most MaxMetaSize bytes):
//
//	metaVersion | uvarint heartbeat interval in µs | uvarint count |
//	count × (uvarint len | key | uvarint len | value), keys sorted
//
// Keys are sorted so that equal maps encode to equal bytes: memberlist
// compares the bytes to decide whether metadata changed.
//
// User messages (sent with SendBestEffort, received by NotifyMsg):
//
//	msgHeartbeat | uvarint epoch | uvarint seq | name
//	msgLeaving   | uvarint epoch | name
//
// Probe ack payload: ackVersion | 8 bytes big-endian Unix nanoseconds.

const (
	metaVersion  byte = 1
	msgHeartbeat byte = 0xb1
	msgLeaving   byte = 0xb2
	ackVersion   byte = 1
)

var errWire = errors.New("malformed")

func encodeMeta(meta map[string]string, heartbeat time.Duration, heartbeatRole string) ([]byte, error) {
	if heartbeatRole != "" {
		meta = maps.Clone(meta)
		if meta == nil {
			meta = map[string]string{}
		}
		meta[heartbeatRoleKey] = heartbeatRole
	}
	keys := make([]string, 0, len(meta))
	for k, v := range meta {
		switch {
		case k == "":
			return nil, fmt.Errorf("%w: empty key", ErrMeta)
		case k == heartbeatRoleKey && v != heartbeatRole:
			return nil, fmt.Errorf("%w: key %q is this package's own", ErrMeta, k)
		case !utf8.ValidString(k):
			return nil, fmt.Errorf("%w: key %q is not valid UTF-8", ErrMeta, k)
		case !utf8.ValidString(v):
			return nil, fmt.Errorf("%w: value of %q is not valid UTF-8", ErrMeta, k)
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b := []byte{metaVersion}
	b = binary.AppendUvarint(b, uint64(max(heartbeat, 0)/time.Microsecond))
	b = binary.AppendUvarint(b, uint64(len(keys)))
	for _, k := range keys {
		b = appendString(b, k)
		b = appendString(b, meta[k])
		if len(b) > MaxMetaSize {
			break
		}
	}
	if len(b) > MaxMetaSize {
		return nil, fmt.Errorf("%w: %d keys do not fit in %d bytes", ErrMeta, len(keys), MaxMetaSize)
	}
	return b, nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// decodeMeta parses metadata written by encodeMeta. Metadata from a member
// that does not run this package fails to parse; such a member is passive.
// heartbeatRoleKey carries Config.HeartbeatRole in the metadata; decoded,
// it is taken out of the member's Meta.
const heartbeatRoleKey = "membership.heartbeat_role"

// splitHeartbeatRole takes Config.HeartbeatRole out of decoded meta.
func splitHeartbeatRole(meta map[string]string) (map[string]string, string) {
	role, ok := meta[heartbeatRoleKey]
	if ok {
		delete(meta, heartbeatRoleKey)
	}
	return meta, role
}

func decodeMeta(b []byte) (meta map[string]string, heartbeat time.Duration, err error) {
	if len(b) == 0 || b[0] != metaVersion {
		return nil, 0, errWire
	}
	r := reader{b: b[1:]}
	us := r.uvarint()
	count := r.uvarint()
	if r.err != nil || us > uint64(time.Hour/time.Microsecond) || count > uint64(len(r.b)) {
		return nil, 0, errWire
	}
	meta = make(map[string]string, count)
	for range count {
		k, v := r.string(), r.string()
		if r.err != nil || k == "" || !utf8.ValidString(k) || !utf8.ValidString(v) {
			return nil, 0, errWire
		}
		meta[k] = v
	}
	if len(r.b) != 0 {
		return nil, 0, errWire
	}
	return meta, time.Duration(us) * time.Microsecond, nil
}

// message is a decoded user message.
type message struct {
	kind  byte
	epoch uint64
	seq   uint64 // heartbeats only
	name  string
}

func encodeHeartbeat(name string, epoch, seq uint64) []byte {
	b := make([]byte, 0, 1+2*binary.MaxVarintLen64+len(name))
	b = append(b, msgHeartbeat)
	b = binary.AppendUvarint(b, epoch)
	b = binary.AppendUvarint(b, seq)
	return append(b, name...)
}

func encodeLeaving(name string, epoch uint64) []byte {
	b := make([]byte, 0, 1+binary.MaxVarintLen64+len(name))
	b = append(b, msgLeaving)
	b = binary.AppendUvarint(b, epoch)
	return append(b, name...)
}

func decodeMessage(b []byte) (message, error) {
	if len(b) == 0 {
		return message{}, errWire
	}
	m := message{kind: b[0]}
	r := reader{b: b[1:]}
	switch m.kind {
	case msgHeartbeat:
		m.epoch, m.seq = r.uvarint(), r.uvarint()
	case msgLeaving:
		m.epoch = r.uvarint()
	default:
		return message{}, errWire
	}
	if r.err != nil || len(r.b) == 0 || len(r.b) > MaxNameLen || !utf8.Valid(r.b) {
		return message{}, errWire
	}
	m.name = string(r.b)
	return m, nil
}

func encodeAck(now time.Time) []byte {
	return binary.BigEndian.AppendUint64([]byte{ackVersion}, uint64(now.UnixNano()))
}

func decodeAck(b []byte) (time.Time, bool) {
	if len(b) != 9 || b[0] != ackVersion {
		return time.Time{}, false
	}
	return time.Unix(0, int64(binary.BigEndian.Uint64(b[1:]))), true
}

type reader struct {
	b   []byte
	err error
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errWire
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) string() string {
	n := r.uvarint()
	if r.err != nil {
		return ""
	}
	if n > uint64(len(r.b)) {
		r.err = errWire
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}
