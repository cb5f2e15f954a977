package api

import (
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"time"
)

// A grantor encodes a Lease in every reply to a grant, renewal or get, and
// decodes a request for each: on a node renewing 100,000 leases, the
// reflection of encoding/json was about a tenth of its CPU. The hot bodies
// therefore have hand-written encoders and decoders for the form leased's
// own clients send and receive (ASCII strings that JSON need not escape,
// plain numbers), each falling back to encoding/json for anything else, so
// that the wire is byte for byte what encoding/json gives (FuzzLeaseJSON,
// FuzzDecodeFast).

// AppendJSON appends l's JSON encoding, byte for byte json.Marshal's, to
// b. (Lease has no MarshalJSON: a type embedding it, like the CLI's
// -o json, would get it as its own and lose its fields.)
func (l *Lease) AppendJSON(b []byte) ([]byte, error) {
	if out, ok := l.appendPlain(b); ok {
		return out, nil
	}
	enc, err := json.Marshal(l)
	if err != nil {
		return b, err
	}
	return append(b, enc...), nil
}

// appendPlain encodes l if all its strings are plain and its times
// RFC 3339; else it reports false and b is to be encoded again.
func (l *Lease) appendPlain(b []byte) ([]byte, bool) {
	ok := true
	str := func(b []byte, key, s string, omitEmpty bool) []byte {
		if omitEmpty && s == "" {
			return b
		}
		if !plain(s) {
			ok = false
			return b
		}
		b = append(b, key...)
		b = append(b, '"')
		b = append(b, s...)
		return append(b, '"')
	}
	tm := func(b []byte, key string, t time.Time) []byte {
		b = append(b, key...)
		b = append(b, '"')
		b, err := t.AppendText(b) // as Time.MarshalJSON: RFC 3339, or an error
		if err != nil {
			ok = false
		}
		return append(b, '"')
	}
	b = str(b, `{"name":`, l.Name, false)
	b = str(b, `,"holder":`, l.Holder, false)
	b = strconv.AppendUint(append(b, `,"token":`...), l.Token, 10)
	b = strconv.AppendUint(append(b, `,"revision":`...), l.Revision, 10)
	b = l.TTL.appendJSON(append(b, `,"ttl":`...))
	b = l.ServerTTL.appendJSON(append(b, `,"server_ttl":`...))
	b = tm(b, `,"stored_at":`, l.StoredAt)
	b = tm(b, `,"granted_at":`, l.GrantedAt)
	b = tm(b, `,"expires_at":`, l.ExpiresAt)
	if len(l.Attributes) > 0 {
		b = append(b, `,"attributes":{`...)
		for i, k := range slices.Sorted(maps.Keys(l.Attributes)) { // as encoding/json orders a map
			if i > 0 {
				b = append(b, ',')
			}
			b = str(b, "", k, false)
			b = str(b, ":", l.Attributes[k], false)
		}
		b = append(b, '}')
	}
	b = str(b, `,"secret":`, l.Secret, true)
	b = str(b, `,"request_id":`, l.RequestID, true)
	b = str(b, `,"grant_trace":`, l.GrantTrace, true)
	if l.Recovered {
		b = append(b, `,"recovered":true`...)
	}
	b = tm(b, `,"server_time":`, l.ServerTime)
	b = str(b, `,"node":`, l.Node, true)
	if l.Flapping {
		b = append(b, `,"flapping":true`...)
	}
	if l.HeldBackMS != 0 {
		b = strconv.AppendInt(append(b, `,"held_back_ms":`...), l.HeldBackMS, 10)
	}
	return append(b, '}'), ok
}

// plain reports whether encoding/json writes s as it is between quotes:
// printable ASCII but for the quote, the backslash and the three it
// escapes for HTML.
func plain(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c > 0x7e, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}
