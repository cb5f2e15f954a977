package api

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// fastKinds are the request bodies with a fast decoder.
var fastKinds = []func() fastDecoder{
	func() fastDecoder { return new(RenewRequest) },
	func() fastDecoder { return new(ReleaseRequest) },
	func() fastDecoder { return new(GrantRequest) },
}

// FuzzDecodeFast checks the fast decoders against encoding/json: a body
// one takes is one encoding/json's strict Decode takes too, with the same
// result, and a body it refuses leaves its request as it was.
func FuzzDecodeFast(f *testing.F) {
	for _, body := range []string{
		`{"name":"a.b","holder":"h-1","token":3,"revision":12,"secret":"s3cr3t-0123456789abcdef","ttl":"10s"}`,
		`{"name":"a","holder":"h","ttl":"1m30s","attributes":{"addr":"10.0.0.1:80","node":"n1"},"request_id":"r","secret":"x"}`,
		` { "name" : "a" , "token" : 0 } `, `{}`, `{"attributes":{}}`, `{"Name":"a"}`, `{"name":"a","name":"b"}`,
		`{"token":01}`, `{"token":1.0}`, `{"token":18446744073709551616}`, `{"ttl":"1x"}`, `{"ttl":null}`,
		`{"name":"\u0041"}`, `{"name":"é"}`, `{"name":"a"}}`, `{"name":"a"} x`, `{"attributes":{"a":"1","a":"2"}}`,
	} {
		for kind := range fastKinds {
			f.Add(kind, []byte(body))
		}
	}
	f.Fuzz(func(t *testing.T, kind int, body []byte) {
		if kind < 0 {
			kind = -kind
		}
		newReq := fastKinds[kind%len(fastKinds)]
		fast, strict := newReq(), newReq()
		if !fast.decodeFast(body) {
			if !reflect.DeepEqual(fast, newReq()) {
				t.Fatalf("a refused body %q left %+v", body, fast)
			}
			return
		}
		if err := decodeStrict(body, strict); err != nil {
			t.Fatalf("the fast decoder took %q, which encoding/json refuses: %v", body, err)
		}
		if !reflect.DeepEqual(fast, strict) {
			t.Fatalf("%q: the fast decoder gave %+v, encoding/json %+v", body, fast, strict)
		}
	})
}

// TestDecodeFastTakesClientBodies: the bodies leased's clients send
// (json.Marshal of the request types) take the fast path.
func TestDecodeFastTakesClientBodies(t *testing.T) {
	for _, req := range []any{
		RenewRequest{Name: "svc.api.a-1", Holder: "host-1:4711", Token: 7, Revision: 1 << 40, Secret: "00112233445566778899aabbccddeeff"},
		RenewRequest{Name: "a", Holder: "b", Token: 1, Revision: 2, Secret: "s", TTL: TTL(90 * time.Second)},
		ReleaseRequest{Name: "jobs.nightly", Holder: "worker-7", Token: 3, Revision: 99, Secret: "00112233445566778899aabbccddeeff"},
		GrantRequest{Name: "jobs.nightly", Holder: "worker-7", TTL: TTL(15 * time.Second), RequestID: "r-1",
			Secret: "00112233445566778899aabbccddeeff", Attributes: map[string]string{"role": "primary", "addr": "10.0.0.1:80"}},
		GrantRequest{Name: "a", Holder: "b"},
	} {
		body, err := json.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		got := reflect.New(reflect.TypeOf(req))
		if !got.Interface().(fastDecoder).decodeFast(body) {
			t.Errorf("%s fell back to encoding/json", body)
		} else if !reflect.DeepEqual(got.Elem().Interface(), req) {
			t.Errorf("%s decoded as %+v", body, got.Elem().Interface())
		}
	}
}

// BenchmarkDecodeRenew: a renewal's body decoded by encoding/json's
// strict Decode and by the fast decoder.
//
//	go test -run '^$' -bench DecodeRenew ./grantor/api/
func BenchmarkDecodeRenew(b *testing.B) {
	body := []byte(`{"name":"bench.live.12345","holder":"bench-holder-0001","token":7,"revision":123456,"secret":"00112233445566778899aabbccddeeff"}`)
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var r RenewRequest
			if err := decodeStrict(body, &r); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var r RenewRequest
			if err := Decode(body, &r); err != nil {
				b.Fatal(err)
			}
		}
	})
}
