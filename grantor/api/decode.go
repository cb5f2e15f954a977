package api

import (
	"slices"
	"time"
)

// fastDecoder is a request body with a hand-written decoder for the form
// leased's clients send (see encode.go): decodeFast decodes data into the
// receiver and reports true only where encoding/json's strict Decode
// would decode the same, and leaves the receiver as it was otherwise.
type fastDecoder interface {
	decodeFast(data []byte) bool
}

// flatObject scans a JSON object whose members are plain strings (as
// plain defines them, without escapes), unsigned integers without sign,
// fraction or exponent, or, for the member nested, an object of plain
// strings, followed by nothing but white space. It is the subset of JSON
// the fast decoders take; for anything else it fails and the request
// goes to encoding/json, which gives the answer, error or not.
type flatObject struct {
	data []byte
	i    int
	ok   bool
	seen []string // the keys so far
}

func (p *flatObject) space() {
	for p.i < len(p.data) {
		switch p.data[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// byte consumes c after white space.
func (p *flatObject) byte(c byte) bool {
	p.space()
	if p.i < len(p.data) && p.data[p.i] == c {
		p.i++
		return true
	}
	return false
}

// str consumes a plain string.
func (p *flatObject) str() string {
	p.space()
	if p.i >= len(p.data) || p.data[p.i] != '"' {
		p.ok = false
		return ""
	}
	start := p.i + 1
	for j := start; j < len(p.data); j++ {
		switch c := p.data[j]; {
		case c == '"':
			p.i = j + 1
			return string(p.data[start:j])
		case c < 0x20 || c > 0x7e || c == '\\':
			p.ok = false // an escape, a control character or UTF-8: encoding/json's
			return ""
		}
	}
	p.ok = false
	return ""
}

// uint consumes an unsigned integer of at most 19 digits (all fit in a
// uint64).
func (p *flatObject) uint() uint64 {
	p.space()
	start := p.i
	var n uint64
	for p.i < len(p.data) && '0' <= p.data[p.i] && p.data[p.i] <= '9' {
		n = n*10 + uint64(p.data[p.i]-'0')
		p.i++
	}
	digits := p.i - start
	if digits == 0 || digits > 19 || (digits > 1 && p.data[start] == '0') {
		p.ok = false
	}
	if p.i < len(p.data) { // a number ends at a delimiter; 1.5 or 1e3 are encoding/json's
		switch p.data[p.i] {
		case ',', '}', ' ', '\t', '\n', '\r':
		default:
			p.ok = false
		}
	}
	return n
}

// duration consumes a plain string that parses as a duration.
func (p *flatObject) duration() *Duration {
	s := p.str()
	if !p.ok {
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		p.ok = false // the error is encoding/json's to give
		return nil
	}
	v := Duration(d)
	return &v
}

// strings consumes an object of plain strings.
func (p *flatObject) strings() map[string]string {
	m := map[string]string{}
	if !p.byte('{') {
		p.ok = false
		return nil
	}
	if p.byte('}') {
		return m
	}
	for p.ok {
		k := p.str()
		if !p.byte(':') {
			p.ok = false
		}
		m[k] = p.str()
		if !p.byte(',') {
			if !p.byte('}') {
				p.ok = false
			}
			break
		}
	}
	return m
}

// members calls member with each key of the object in turn, which must
// consume the key's value and report whether the key is one it knows; it
// reports whether the whole of data was such an object.
func (p *flatObject) members(member func(key string) bool) bool {
	p.seen = make([]string, 0, 8)
	p.ok = p.byte('{')
	if p.ok && !p.byte('}') {
		for p.ok {
			k := p.str()
			if !p.ok || !p.byte(':') || slices.Contains(p.seen, k) || !member(k) {
				// An unknown key may still be a known one's case variant,
				// and a repeated one merges into a map: encoding/json's.
				return false
			}
			p.seen = append(p.seen, k)
			if !p.byte(',') {
				p.ok = p.ok && p.byte('}')
				break
			}
		}
	}
	p.space()
	return p.ok && p.i == len(p.data)
}

func (r *RenewRequest) decodeFast(data []byte) bool {
	var v RenewRequest
	p := flatObject{data: data}
	if !p.members(func(k string) bool {
		switch k {
		case "name":
			v.Name = p.str()
		case "holder":
			v.Holder = p.str()
		case "token":
			v.Token = p.uint()
		case "revision":
			v.Revision = p.uint()
		case "secret":
			v.Secret = p.str()
		case "ttl":
			v.TTL = p.duration()
		default:
			return false
		}
		return true
	}) {
		return false
	}
	*r = v
	return true
}

// decodeFast decodes a release as a renewal without a TTL: the same
// members but one.
func (r *ReleaseRequest) decodeFast(data []byte) bool {
	var v RenewRequest
	if !v.decodeFast(data) || v.TTL != nil {
		return false // "ttl" is not a member of a release: encoding/json's error
	}
	*r = ReleaseRequest{Name: v.Name, Holder: v.Holder, Token: v.Token, Revision: v.Revision, Secret: v.Secret}
	return true
}

func (r *GrantRequest) decodeFast(data []byte) bool {
	var v GrantRequest
	p := flatObject{data: data}
	if !p.members(func(k string) bool {
		switch k {
		case "name":
			v.Name = p.str()
		case "holder":
			v.Holder = p.str()
		case "ttl":
			v.TTL = p.duration()
		case "attributes":
			v.Attributes = p.strings()
		case "request_id":
			v.RequestID = p.str()
		case "secret":
			v.Secret = p.str()
		default:
			return false
		}
		return true
	}) {
		return false
	}
	*r = v
	return true
}
