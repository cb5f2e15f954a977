package main

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/fence/pgtest"
	"github.com/leased/leased/kvlease/kvleasetest"
)

// The test binary doubles as the worker processes: run starts its own
// executable with -worker and envWorkerProcess set.
func TestMain(m *testing.M) {
	if os.Getenv(envWorkerProcess) != "" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// 1,000 items, four worker processes, one SIGSTOPped holding a checked
// claim past its deadline and resumed: its late completion is refused by
// PostgreSQL, and every item is completed exactly once there, the paused
// worker's by another worker with a higher token.
func TestRun(t *testing.T) {
	srv := kvleasetest.NewServer(t)
	dsn := pgtest.Database(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	var out strings.Builder
	started := time.Now()
	if err := run(ctx, &out, srv.ClientURL(), dsn); err != nil {
		t.Fatalf("run: %v\noutput:\n%s", err, out.String())
	}
	t.Logf("run took %v; output:\n%s", time.Since(started).Round(time.Millisecond), out.String())
	for _, want := range []string{
		`(?m)^w4: checked its claim on frame-\d{4} \(token \d+\), then stopped \(SIGSTOP\) before completing it$`,
		`(?m)^w[123]: claimed frame-\d{4} \(token \d+\) \S+ after w4 was stopped, and raised its fence$`,
		`(?m)^w4: resumed \(SIGCONT\)`,
		`(?m)^w4: completion of frame-\d{4} \(token \d+\) refused by PostgreSQL: token \d+ already accepted$`,
		`(?m)^frame-\d{4}, claimed by w4 \(token \d+\) before its pause, was completed by w[123] \(token \d+\)$`,
		`(?m)^items completed per worker: w1 \d+, w2 \d+, w3 \d+, w4 \d+$`,
		`(?m)^all 1000 items completed exactly once in PostgreSQL$`,
	} {
		if !regexp.MustCompile(want).MatchString(out.String()) {
			t.Errorf("output lacks a match for %s", want)
		}
	}

	// The real state, read independently: the table holds each item once,
	// the paused item completed by someone else, with a token above w4's.
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var rows, items, byWorkers int
	if err := db.QueryRowContext(ctx, "SELECT count(*), count(DISTINCT item), count(DISTINCT worker) FROM "+doneTable).
		Scan(&rows, &items, &byWorkers); err != nil {
		t.Fatal(err)
	}
	if rows != numItems || items != numItems || byWorkers != len(workers) {
		t.Errorf("%s: %d rows, %d items, by %d workers; want %d, %d, %d", doneTable, rows, items, byWorkers, numItems, numItems, len(workers))
	}
	m := regexp.MustCompile(`(?m)^w4: checked its claim on (frame-\d{4}) \(token (\d+)\)`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatal("no pause in the output")
	}
	var worker string
	var token int64
	if err := db.QueryRowContext(ctx, "SELECT worker, token FROM "+doneTable+" WHERE item = $1", m[1]).Scan(&worker, &token); err != nil {
		t.Fatal(err)
	}
	pausedToken, err := strconv.ParseInt(m[2], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	if worker == sleeper || token <= pausedToken {
		t.Errorf("%s completed by %s with token %d; w4 held token %s", m[1], worker, token, m[2])
	}
	// Nothing left on the queue, no claim live.
	js := kvleasetest.JetStream(t, kvleasetest.Connect(t, srv.ClientURL()))
	kv, err := js.KeyValue(ctx, queueName+"-items")
	if err != nil {
		t.Fatal(err)
	}
	if keys, err := kv.Keys(ctx); !errors.Is(err, jetstream.ErrNoKeysFound) {
		t.Errorf("items still pending: %d, %v", len(keys), err)
	}
	// A worker told to stop while its Claim's grant was in flight leaves
	// that claim granted, unanswered, and it lapses by its TTL (CI saw
	// one, of an item already completed); any other live claim would be
	// a leak. Each must lapse within its TTL.
	st := kvleasetest.OpenStore(t, srv.ClientURL(), kvlease.WithBucket(leaseBucket))
	w := kvleasetest.Watch(t, st, "claim."+queueName+".")
	claims, err := st.List(ctx, "claim."+queueName+".")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range claims {
		kvleasetest.NextEvent(t, w, c.TTL+2*time.Second, func(ev kvlease.Event) bool {
			return ev.Name == c.Name && ev.Type == kvlease.EventExpired
		})
	}
}

// A run that cannot reach its database deletes nothing of an earlier
// run's (it deleted the queue's buckets first; found by an outside
// client).
func TestRunWithoutDatabaseDeletesNothing(t *testing.T) {
	srv := kvleasetest.NewServer(t)
	js := kvleasetest.JetStream(t, kvleasetest.Connect(t, srv.ClientURL()))
	ctx := t.Context()
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: queueName + "-items"}); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := run(ctx, &out, srv.ClientURL(), "postgres://nobody@127.0.0.1:1/none?connect_timeout=2"); err == nil {
		t.Fatal("run without its database succeeded")
	}
	if _, err := js.KeyValue(ctx, queueName+"-items"); err != nil || strings.Contains(out.String(), "deleted") {
		t.Fatalf("after a run that could not reach its database: %v; output %q", err, out.String())
	}
}
