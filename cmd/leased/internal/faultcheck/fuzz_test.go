package faultcheck_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/leased/leased/cmd/leased/internal/faultcheck"
)

// Decode reads what killed processes left behind: it never panics, and
// what it accepts the Writer writes back as the same records, which
// assemble and check without an error.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(lineGrant + "\n" + lineFault + "\n"))
	f.Add([]byte(lineGrant + "\n" + lineFault[:40]))
	f.Add([]byte(lineGrant + "\n" + lineRecovered + "\n"))
	f.Add([]byte(`{"type":"op","proc":"h1","seq":1,"lease":"L","op":"renew","t_send":5,"t_reply":9,"req":{"token":3},"code":"not_holder","reply":{"server_time":"2026-12-01T08:00:00.5Z"}}`))
	f.Add([]byte("\n\n{}\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		recs, _, err := faultcheck.Decode(bytes.NewReader(in))
		if err != nil {
			var de *faultcheck.DecodeError
			if !errors.As(err, &de) || !(errors.Is(err, faultcheck.ErrMalformed) || errors.Is(err, faultcheck.ErrInvalidRecord)) {
				t.Fatalf("Decode: %v is not a DecodeError of this package", err)
			}
			return
		}
		var buf bytes.Buffer
		w := faultcheck.NewWriter(&buf)
		for _, r := range recs {
			if err := w.Write(r); err != nil {
				t.Fatalf("Write of a decoded record: %v", err)
			}
		}
		again, truncated, err := faultcheck.Decode(&buf)
		if err != nil || truncated || len(again) != len(recs) {
			t.Fatalf("decoding what was written: %d records, truncated %v, %v; want %d", len(again), truncated, err, len(recs))
		}
		for i := range recs {
			a, b := recs[i], again[i]
			if !a.Reply.ServerTime.Equal(b.Reply.ServerTime) {
				t.Fatalf("record %d server time %v, back %v", i, a.Reply.ServerTime, b.Reply.ServerTime)
			}
			a.Reply.ServerTime, b.Reply.ServerTime = time.Time{}, time.Time{}
			if a != b {
				t.Fatalf("record %d:\n%+v\nback\n%+v", i, a, b)
			}
		}
		if h, err := faultcheck.NewHistory(recs); err == nil {
			if _, err := faultcheck.Check(h, faultcheck.DefaultParams()); err != nil {
				t.Fatalf("Check: %v", err)
			}
		} else if !errors.Is(err, faultcheck.ErrInvalidRecord) {
			t.Fatalf("NewHistory: %v", err)
		}
	})
}
