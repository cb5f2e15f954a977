package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leased/leased/grantor/history"
	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/kvleasetest"
)

// tenureRows parses `leased history -o json`.
func tenureRows(t *testing.T, out string) []history.Tenure {
	t.Helper()
	var rows []history.Tenure
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		var r history.Tenure
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("history line %q: %v", line, err)
		}
		rows = append(rows, r)
	}
	return rows
}

// One node: `leased history` shows the tenures made through the CLI, with
// their ends, and still does after the node is killed and restarted on its
// data. Bad input gets a usage error.
func TestHistoryCommand(t *testing.T) {
	dir := t.TempDir()
	s := startServe(t, dir)
	if r := leased(t, s.url, "run", "--lease", "hist.job", "--holder", "w1", "--ttl", "5s", "--", "true"); r.code != 0 {
		t.Fatalf("run: %+v", r)
	}
	if r := leased(t, s.url, "acquire", "hist.job", "--holder", "w2", "--ttl", "20s"); r.code != 0 {
		t.Fatalf("acquire: %+v", r)
	}
	if r := leased(t, s.url, "revoke", "hist.job", "--reason", "maintenance"); r.code != 0 {
		t.Fatalf("revoke: %+v", r)
	}
	want := func(rows []history.Tenure) bool {
		return len(rows) == 2 && rows[0].Holder == "w1" && rows[0].EndedBy == history.EndReleased &&
			rows[1].Holder == "w2" && rows[1].EndedBy == history.EndRevoked && rows[1].Reason == "maintenance" &&
			rows[0].Token < rows[1].Token && rows[1].HeldUntil.After(rows[1].To) // the revocation holds it
	}
	var rows []history.Tenure
	for i := 0; ; i++ { // the observer records a change moments after it is stored
		r := leased(t, s.url, "history", "hist.", "-o", "json")
		if r.code != 0 {
			t.Fatalf("history: %+v", r)
		}
		if rows = tenureRows(t, r.stdout); want(rows) {
			break
		}
		if i == 200 { // each try is a process: seconds in all
			t.Fatalf("history rows %+v", rows)
		}
	}
	text := leased(t, s.url, "history", "hist.")
	for _, w := range []string{"NAME", "w1", "released", "w2", "revoked (maintenance), held until "} {
		if !strings.Contains(text.stdout, w) {
			t.Errorf("history table lacks %q:\n%s", w, text.stdout)
		}
	}

	if err := s.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = s.cmd.Wait()
	s = startServe(t, dir)
	r := leased(t, s.url, "history", "hist.", "-o", "json")
	if after := tenureRows(t, r.stdout); r.code != 0 || !want(after) {
		t.Errorf("history after a restart: %+v (%v)", after, r)
	}

	for _, args := range [][]string{
		{"history", "--since", "-1h"},
		{"history", "a b"},
		{"history", "--since", "soon"},
		// From an outside client: a bucket name that cannot be (exit 1,
		// "grantor unavailable"), a duration past what one holds.
		{"history", "--bucket", "bad bucket"},
		{"history", "--since", "10000000h"},
	} {
		if r := leased(t, s.url, args...); r.code != 2 {
			t.Errorf("%v: exit %d (%s), want 2", args, r.code, r.stderr)
		}
	}
	// A bucket no grantor keeps: a failure, as watch and status say, not
	// "no such live lease" (4).
	if r := leased(t, s.url, "history", "--bucket", "nosuch"); r.code != 1 || !strings.Contains(r.stderr, "no history of bucket") {
		t.Errorf("history of a bucket with no history: exit %d (%s), want 1", r.code, r.stderr)
	}
	// So too status (it said "grantor unavailable"; found by an outside
	// client).
	if r := leased(t, s.url, "status", "--bucket", "nosuch"); r.code != 1 || !strings.Contains(r.stderr, `no lease bucket "nosuch"`) {
		t.Errorf("status of a bucket that does not exist: exit %d (%s), want 1 saying so", r.code, r.stderr)
	}
}

// A lease granted before the window and live through it is a row of
// `leased history --since`: it has no record in the window, and was
// missing (a leader that had held for more than an hour was not on the
// default hour's view). --since takes an RFC 3339 time, as the timeline
// does.
func TestHistoryShowsALeaseHeldSinceBeforeTheWindow(t *testing.T) {
	s := startServe(t, "")
	if r := leased(t, s.url, "acquire", "long.held", "--holder", "old-timer", "--ttl", "30s"); r.code != 0 {
		t.Fatalf("acquire: %+v", r)
	}
	// After the grant's record, which the observer stores moments after
	// the grant; not after now, which is refused.
	nc, err := nats.Connect(s.url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	h, err := history.Open(t.Context(), js, "leases", history.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, ok, err := h.LastFor(t.Context(), "long.held"); err == nil && ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the grant's record not in the history after 20 s")
		}
	}
	since := time.Now().UTC().Format(time.RFC3339Nano)
	r := leased(t, s.url, "history", "long.", "--since", since, "-o", "json")
	rows := tenureRows(t, r.stdout)
	if r.code != 0 || len(rows) != 1 || rows[0].Holder != "old-timer" || !rows[0].Live() || rows[0].From.IsZero() {
		t.Fatalf("history since after the grant: %+v (%+v)", rows, r)
	}
}

// A lone serve killed (SIGKILL) and started again on its data observes at
// once: the observer lease its predecessor on the directory still held is
// ended, not waited out. The history kept a tenure begun and ended in the
// first seconds after such a restart only if the observer was back by
// then; it was back about 5 s later, when the dead process's lease lapsed,
// and a lease granted, released and granted again meanwhile had only its
// last tenure recorded (found in review of the history's gaps).
func TestHistoryHasNoGapAfterAnUncleanRestart(t *testing.T) {
	dir := t.TempDir()
	s := startServe(t, dir)
	if err := s.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = s.cmd.Wait()
	s = startServe(t, dir)
	if r := leased(t, s.url, "run", "--lease", "gap.job", "--holder", "w1", "--ttl", "5s", "--", "true"); r.code != 0 {
		t.Fatalf("run: %+v", r)
	}
	if r := leased(t, s.url, "acquire", "gap.job", "--holder", "w2", "--ttl", "20s"); r.code != 0 {
		t.Fatalf("acquire: %+v", r)
	}
	var rows []history.Tenure
	for i := 0; ; i++ { // the observer records a change moments after it is stored
		r := leased(t, s.url, "history", "gap.", "-o", "json")
		if r.code != 0 {
			t.Fatalf("history: %+v", r)
		}
		if rows = tenureRows(t, r.stdout); len(rows) == 2 {
			break
		}
		if i == 200 { // each try is a process: seconds in all, past the 5 s lapse
			t.Fatalf("history after an unclean restart: %+v, want w1's released tenure and w2's", rows)
		}
	}
	if rows[0].Holder != "w1" || rows[0].EndedBy != history.EndReleased || rows[1].Holder != "w2" {
		t.Errorf("history after an unclean restart: %+v, want w1's released tenure and w2's", rows)
	}
}

// A long history is read in full: --timeout bounds the wait for each
// message, not the whole read. It bounded the whole read, so that a
// history of some hundred thousand records (a day of a few changes a
// second) failed with "grantor unavailable: follow history: context
// deadline exceeded", exit 1, from a server streaming it steadily (found
// by an outside client). A prefix that is not whole dot-separated tokens
// reads the records of other leases too, which count as progress.
func TestHistoryReadsALongHistory(t *testing.T) {
	s := startServe(t, "")
	nc := kvleasetest.Connect(t, s.url)
	js := kvleasetest.JetStream(t, nc)
	const tenures = 10000 // 20000 records: seconds for the race-built CLI, well past 1 s
	at := time.Now().Add(-time.Minute)
	stored := func() {
		t.Helper()
		select {
		case <-js.PublishAsyncComplete():
		case <-time.After(time.Minute):
			t.Fatal("records not all stored within a minute")
		}
	}
	n := 0
	publish := func(r history.Record) {
		t.Helper()
		b, _ := json.Marshal(r)
		if _, err := js.PublishAsync(history.Subject(kvlease.DefaultBucket, r.Name), b); err != nil {
			t.Fatal(err)
		}
		if n++; n%1000 == 0 { // under the publisher's limit of messages in flight
			stored()
		}
	}
	for i := range tenures {
		name := fmt.Sprintf("bulk.l%02d", i%10)
		tok := uint64(1_000_000 + 2*i)
		publish(history.Record{Kind: history.KindGranted, Name: name, Token: tok, Holder: "h", Revision: tok, Time: at, GrantedAt: at})
		publish(history.Record{Kind: history.KindEnded, Name: name, Token: tok, Holder: "h", Revision: tok + 1, Time: at,
			GrantedAt: at, EndedBy: history.EndReleased})
	}
	publish(history.Record{Kind: history.KindGranted, Name: "bulkx.one", Token: 5, Holder: "x", Revision: 5, Time: at, GrantedAt: at})
	stored()
	r := leased(t, s.url, "history", "bulk.", "--timeout", "1s", "-o", "json")
	if rows := tenureRows(t, r.stdout); r.code != 0 || len(rows) != tenures {
		t.Errorf("history bulk. --timeout 1s: exit %d, %d rows, want %d; stderr:\n%s", r.code, len(rows), tenures, r.stderr)
	}
	r = leased(t, s.url, "history", "bulkx", "--timeout", "1s", "-o", "json")
	if rows := tenureRows(t, r.stdout); r.code != 0 || len(rows) != 1 || rows[0].Holder != "x" {
		t.Errorf("history bulkx --timeout 1s: exit %d, rows %+v; stderr:\n%s", r.code, rows, r.stderr)
	}
}

// A first start, with neither the bucket nor its history, says nothing
// of a history: it warned, on every new data directory without
// --first-token, that the bucket was missing but its history was not.
func TestServeFirstStartWarnsOfNoHistory(t *testing.T) {
	s := startServe(t, "")
	if text := s.logs.text(); strings.Contains(text, "its history is not") {
		t.Fatalf("a first start warned of a history there is not:\n%s", text)
	}
}

// A lease bucket deleted and made anew by serve begins above the tokens
// its history recorded: before, it began at 1, its tokens repeated those
// of the history, and the observer, which takes the history's last record
// as reported, left the new tenures out of it.
func TestServeMakesABucketAnewAboveItsHistory(t *testing.T) {
	srv := kvleasetest.NewServer(t)
	js := kvleasetest.JetStream(t, kvleasetest.Connect(t, srv.ClientURL()))
	serve := func() *exec.Cmd {
		cmd := exec.Command(leasedBin, "serve", "--nats-url", srv.ClientURL(), "--log-format", "json")
		stderr, _ := cmd.StderrPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		readLines(stderr).wait(t, 20*time.Second, func(l string) bool { return strings.Contains(l, `"msg":"ready"`) })
		return cmd
	}
	grant := func(name string) kvlease.Token {
		t.Helper()
		st := kvleasetest.OpenStore(t, srv.ClientURL(), kvlease.WithoutCreate())
		rec, err := st.Grant(t.Context(), kvlease.GrantRequest{Name: name, Holder: "h", Duration: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		return rec.Token
	}
	var h *history.Stream
	recorded := func(name string, token kvlease.Token) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
		defer cancel()
		found := false
		err := h.Follow(ctx, name, time.Time{}, func(r history.Record, _ bool) bool {
			found = r.Name == name && r.Kind == history.KindGranted && r.Token == uint64(token)
			return !found
		})
		if !found {
			t.Fatalf("the history has no grant of %s token %d: %v", name, token, err)
		}
	}

	cmd := serve()
	var err error
	if h, err = history.Open(t.Context(), js, kvlease.DefaultBucket, history.Options{}); err != nil {
		t.Fatal(err)
	}
	old := grant("anew.a")
	recorded("anew.a", old)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := waitExit(cmd, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteKeyValue(t.Context(), kvlease.DefaultBucket); err != nil {
		t.Fatal(err)
	}

	serve()
	tok := grant("anew.b")
	if tok <= old {
		t.Fatalf("the bucket made anew granted token %d, not above the history's %d", tok, old)
	}
	recorded("anew.b", tok)
	// The old bucket's tenure ended with it, recorded before the new
	// bucket was made: it showed held for the history's whole retention.
	recs, err := h.Read(t.Context(), "anew.a", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if ts := history.Fold(recs); len(ts) != 1 || ts[0].Live() || ts[0].EndedBy != history.EndUnknown || ts[0].Reason != history.BucketGoneReason {
		t.Fatalf("the old bucket's tenure in the history: %+v, want it ended, %s, %q", ts, history.EndUnknown, history.BucketGoneReason)
	}
}
