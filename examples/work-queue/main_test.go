package main

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/kvleasetest"
	"github.com/leased/leased/kvlease/workqueue"
)

func TestRun(t *testing.T) {
	srv := kvleasetest.NewServer(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()

	// Twice on one server, as with -nats-url: the second run starts from an
	// empty queue again.
	for i := range 2 {
		var out strings.Builder
		if err := run(ctx, &out, srv.ClientURL()); err != nil {
			t.Fatalf("run %d: %v\noutput:\n%s", i+1, err, out.String())
		}
		t.Logf("output of run %d:\n%s", i+1, out.String())
		for _, want := range []string{
			`(?m)^w3: crashes while making the thumbnail of img-\d+ \(claim token \d+\), after 3 items$`,
			`(?m)^w[12]: claimed img-\d+ \(token \d+\), \S+ after w3 crashed holding it`,
			`(?m)^img-\d+, abandoned by w3 \(token \d+\), was done by w[12] \(token \d+\)$`,
			`(?m)^items done per worker: w1 \d+, w2 \d+, w3 3 \(crashed\)$`,
			`(?m)^all 50 items done exactly once$`,
		} {
			if !regexp.MustCompile(want).MatchString(out.String()) {
				t.Errorf("run %d: output lacks a match for %s", i+1, want)
			}
		}
		if deleted := strings.Contains(out.String(), "of an earlier run"); deleted != (i == 1) {
			t.Errorf("run %d: deleted an earlier run's buckets: %v", i+1, deleted)
		}
	}

	// The real state: every item done at the sink, by one of the workers,
	// and nothing left pending.
	js := kvleasetest.JetStream(t, kvleasetest.Connect(t, srv.ClientURL()))
	st := kvleasetest.OpenStore(t, srv.ClientURL(), kvlease.WithBucket(leaseBucket))
	q, err := workqueue.Open(ctx, js, st, queueName)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	counts := map[string]int{}
	for i := 1; i <= numItems; i++ {
		done, worker, _, result, err := q.Result(ctx, itemID(i))
		if err != nil || !done || !strings.HasPrefix(worker, "w") || !strings.Contains(string(result), itemID(i)) {
			t.Errorf("%s at the sink: done %v by %q, result %q, %v", itemID(i), done, worker, result, err)
		}
		counts[worker]++
	}
	if counts[crasher] != crashAfter {
		t.Errorf("%s did %d items, want %d", crasher, counts[crasher], crashAfter)
	}
	items, err := js.KeyValue(ctx, queueName+"-items")
	if err != nil {
		t.Fatal(err)
	}
	if keys, err := items.Keys(ctx); !errors.Is(err, jetstream.ErrNoKeysFound) {
		t.Errorf("items still pending: %v, %v", keys, err)
	}
	if claims, err := st.List(ctx, "claim."+queueName+"."); err != nil || len(claims) != 0 {
		t.Errorf("claims still live: %v, %v", claims, err)
	}
}
