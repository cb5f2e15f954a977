package faultcheck_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leased/leased/cmd/leased/internal/faultcheck"
)

// What the Writer writes, Decode reads back field for field.
func TestWriterDecodeRoundTrip(t *testing.T) {
	recs := newHist().grant("h1", "L", 0, 10, 5).renew("h1", "L", 1000, 1010, 5, 5, 6).
		grantFails("h2", "L", 20, 0, pending, 0).fault(faultcheck.FaultStopNode, "n1", 100, 5000).
		attempt("h3", "M", "r1", 30, 1030, faultcheck.CodeNoReply, faultcheck.Reply{}).recovered("h3", "M", "r1", 1100, 1110, 7).recs
	recs[0].Reply.ServerTime = time.Date(2026, 12, 1, 8, 0, 0, 123, time.UTC)
	recs[0].Reply.Node = "n1"
	var buf bytes.Buffer
	w := faultcheck.NewWriter(&buf)
	for _, r := range recs {
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	if n := strings.Count(buf.String(), "\n"); n != len(recs) {
		t.Fatalf("%d lines for %d records:\n%s", n, len(recs), buf.String())
	}
	got, truncated, err := faultcheck.Decode(&buf)
	if err != nil || truncated {
		t.Fatalf("Decode: %v, truncated %v", err, truncated)
	}
	if len(got) != len(recs) {
		t.Fatalf("%d records back, want %d", len(got), len(recs))
	}
	for i := range recs {
		if !got[i].Reply.ServerTime.Equal(recs[i].Reply.ServerTime) {
			t.Errorf("record %d server time %v, want %v", i, got[i].Reply.ServerTime, recs[i].Reply.ServerTime)
		}
		got[i].Reply.ServerTime, recs[i].Reply.ServerTime = time.Time{}, time.Time{}
		if got[i] != recs[i] {
			t.Errorf("record %d:\n got %+v\nwant %+v", i, got[i], recs[i])
		}
	}
}

func TestWriterRefusesInvalidRecords(t *testing.T) {
	var buf bytes.Buffer
	err := faultcheck.NewWriter(&buf).Write(faultcheck.Record{Type: faultcheck.TypeOp, Proc: "h1", Seq: 1, Lease: "L", Op: "steal", TSend: 1})
	if !errors.Is(err, faultcheck.ErrInvalidRecord) || buf.Len() != 0 {
		t.Fatalf("Write: %v, wrote %q", err, buf.String())
	}
}

const (
	// lineGrant is a grant as histories from before idempotent grants
	// logged it, without a request id: they must still decode.
	lineGrant = `{"type":"op","proc":"h1","seq":1,"holder":"h1","lease":"L","op":"grant","t_send":100,"t_reply":200,"req":{"d_ns":3000000000},"code":"ok","reply":{"token":5,"revision":5}}`
	// lineRecovered is a retried grant's attempt, answered with the tenure
	// an earlier attempt made.
	lineRecovered = `{"type":"op","proc":"h1","seq":2,"holder":"h1","lease":"L","op":"grant","t_send":300,"t_reply":400,"req":{"d_ns":3000000000,"rid":"r1"},"code":"ok","reply":{"token":5,"revision":5,"recovered":true}}`
	lineFault     = `{"type":"fault","fault":"kill_all","target":"cluster","t_start":300,"t_end":400}`
)

func TestDecode(t *testing.T) {
	for _, tc := range []struct {
		name      string
		in        string
		n         int  // records
		truncated bool // the last line was dropped
		err       error
		line      int // of the error
	}{
		{name: "empty", in: ""},
		{name: "two lines", in: lineGrant + "\n" + lineFault + "\n", n: 2},
		{name: "a request id and a recovered reply", in: lineGrant + "\n" + lineRecovered + "\n", n: 2},
		{name: "recovered without a request id", in: strings.Replace(lineRecovered, `,"rid":"r1"`, ``, 1) + "\n", err: faultcheck.ErrInvalidRecord, line: 1},
		{name: "recovered but refused", in: strings.Replace(lineRecovered, `"code":"ok"`, `"code":"held"`, 1) + "\n", err: faultcheck.ErrInvalidRecord, line: 1},
		{name: "a request id on a renewal", in: `{"type":"op","proc":"h1","seq":1,"lease":"L","op":"renew","t_send":5,"req":{"token":3,"rid":"r1"}}` + "\n", err: faultcheck.ErrInvalidRecord, line: 1},
		{name: "blank lines", in: "\n" + lineGrant + "\n\n" + lineFault + "\n\n", n: 2},
		{name: "last line complete without newline", in: lineGrant + "\n" + lineFault, n: 2},
		{name: "last line cut by a kill", in: lineGrant + "\n" + lineFault[:30], n: 1, truncated: true},
		{name: "a cut line in the middle", in: lineGrant[:30] + "\n" + lineFault + "\n", err: faultcheck.ErrMalformed, line: 1},
		{name: "a cut last line that ends in a newline", in: lineGrant + "\n" + lineFault[:30] + "\n", err: faultcheck.ErrMalformed, line: 2},
		{name: "unknown field", in: strings.Replace(lineFault, `"target"`, `"targte"`, 1) + "\n", err: faultcheck.ErrMalformed, line: 1},
		{name: "two objects on a line", in: lineFault + lineFault + "\n", err: faultcheck.ErrMalformed, line: 1},
		{name: "reply before send", in: strings.Replace(lineGrant, `"t_reply":200`, `"t_reply":50`, 1) + "\n", err: faultcheck.ErrInvalidRecord, line: 1},
		{name: "grant without token", in: strings.Replace(lineGrant, `"token":5,`, ``, 1) + "\n", err: faultcheck.ErrInvalidRecord, line: 1},
		{name: "unknown type", in: `{"type":"note"}` + "\n", err: faultcheck.ErrInvalidRecord, line: 1},
		{name: "a line too long", in: `{"type":"op","proc":"` + strings.Repeat("x", 70<<10) + `"}` + "\n", err: faultcheck.ErrMalformed, line: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			recs, truncated, err := faultcheck.Decode(strings.NewReader(tc.in))
			if tc.err != nil {
				var de *faultcheck.DecodeError
				if !errors.Is(err, tc.err) || !errors.As(err, &de) || de.Line != tc.line {
					t.Fatalf("Decode: %v, want %v at line %d", err, tc.err, tc.line)
				}
				return
			}
			if err != nil || len(recs) != tc.n || truncated != tc.truncated {
				t.Fatalf("Decode: %d records, truncated %v, %v; want %d, %v", len(recs), truncated, err, tc.n, tc.truncated)
			}
		})
	}
}

func TestNewHistory(t *testing.T) {
	sent := newHist().grantFails("h1", "L", 0, 0, pending, 0).recs[0]
	done := newHist().grant("h1", "L", 0, 10, 5).recs[0]
	other := newHist().grant("h2", "M", 0, 10, 6).recs[0]
	fault := newHist().fault(faultcheck.FaultPartition, "n1", 5, 50).recs[0]
	for _, tc := range []struct {
		name    string
		streams [][]faultcheck.Record
		ops     []faultcheck.Record
		faults  int
		err     bool
	}{
		{name: "a pending op completed", streams: [][]faultcheck.Record{{sent, fault, done}, {other}}, ops: []faultcheck.Record{done, other}, faults: 1},
		{name: "a pending op never completed", streams: [][]faultcheck.Record{{sent}, {other}}, ops: []faultcheck.Record{sent, other}},
		{name: "an op logged twice", streams: [][]faultcheck.Record{{done}, {done}}, err: true},
		{name: "pending after its completion", streams: [][]faultcheck.Record{{done, sent}}, err: true},
		{name: "an invalid record", streams: [][]faultcheck.Record{{{Type: faultcheck.TypeFault}}}, err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := faultcheck.NewHistory(tc.streams...)
			if tc.err {
				if !errors.Is(err, faultcheck.ErrInvalidRecord) {
					t.Fatalf("NewHistory: %v, want ErrInvalidRecord", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(h.Ops) != len(tc.ops) || len(h.Faults) != tc.faults {
				t.Fatalf("%d ops, %d faults; want %d, %d", len(h.Ops), len(h.Faults), len(tc.ops), tc.faults)
			}
			for i := range tc.ops {
				if h.Ops[i] != tc.ops[i] {
					t.Errorf("op %d: %+v, want %+v", i, h.Ops[i], tc.ops[i])
				}
			}
		})
	}
}
