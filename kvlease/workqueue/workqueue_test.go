package workqueue_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/fence"
	"github.com/leased/leased/kvlease/kvleasetest"
	"github.com/leased/leased/kvlease/workqueue"
	"github.com/leased/leased/telemetry"
	"github.com/leased/leased/telemetry/telemetrytest"
)

// A claim whose lease lapsed cannot complete; the item is redone under a
// newer claim, and completes exactly once.
func TestWorkQueueStaleClaimRefused(t *testing.T) {
	srv, st := kvleasetest.NewStore(t, kvlease.WithGrantorMargin(0))
	js := kvleasetest.JetStream(t, kvleasetest.Connect(t, srv.ClientURL()))
	ctx := t.Context()
	q, err := workqueue.Open(ctx, js, st, "q")
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if err := q.Add(ctx, "item-1", []byte("payload")); err != nil {
		t.Fatal(err)
	}
	if err := q.Add(ctx, "item-1", nil); !errors.Is(err, kvlease.ErrHeld) {
		t.Fatalf("second add of a pending item: %v", err)
	}
	old, err := q.Claim(ctx, "slow", time.Second)
	if err != nil || old.Item != "item-1" || string(old.Payload) != "payload" {
		t.Fatalf("claim: %+v, %v", old, err)
	}
	old.Orphan()                                    // paused: no renewals; the claim lapses
	fresh, err := q.Claim(ctx, "fast", time.Second) // waits for the lapse on the stream
	if err != nil || fresh.Token() <= old.Token() {
		t.Fatalf("second claim: %v (token %v after %d)", err, fresh, old.Token())
	}
	// The paused worker wakes up and completes: refused, nothing written.
	if err := old.Complete(ctx, []byte("late")); !errors.Is(err, kvlease.ErrExpired) {
		t.Fatalf("stale completion: %v, want expired", err)
	}
	if err := fresh.Complete(ctx, []byte("ok")); err != nil {
		t.Fatal(err)
	}
	done, worker, token, result, err := q.Result(ctx, "item-1")
	if err != nil || !done || worker != "fast" || token != fresh.Token() || string(result) != "ok" {
		t.Fatalf("sink: %v %q %d %q %v", done, worker, token, result, err)
	}
	if err := q.Add(ctx, "item-1", nil); !errors.Is(err, workqueue.ErrDone) {
		t.Fatalf("re-adding a completed item: %v, want ErrDone", err)
	}
}

// 1,000 items, four worker processes, one SIGKILLed midway: every item is
// completed exactly once at the fenced sink, and the dead worker's claimed
// items are finished by others after their claims lapse.
func TestWorkQueueWorkerKilled(t *testing.T) {
	const items = 1000
	srv, st := kvleasetest.NewStore(t)
	ctx := t.Context()
	js := kvleasetest.JetStream(t, kvleasetest.Connect(t, srv.ClientURL()))
	q, err := workqueue.Open(ctx, js, st, "jobs")
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	for i := range items {
		if err := q.Add(ctx, fmt.Sprintf("item-%04d", i), nil); err != nil {
			t.Fatal(err)
		}
	}
	sink, err := js.KeyValue(ctx, "jobs-done")
	if err != nil {
		t.Fatal(err)
	}
	sinkW, err := sink.WatchAll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sinkW.Stop()

	type line struct{ worker, text string }
	lines := make(chan line, 4096)
	var workers []*exec.Cmd
	var readers sync.WaitGroup
	for w := range 4 {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "KVLEASE_CHILD=worker", "KVLEASE_URL="+srv.ClientURL(), fmt.Sprintf("KVLEASE_WORKER=w%d", w))
		out, _ := cmd.StdoutPipe()
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		workers = append(workers, cmd)
		readers.Add(1)
		go func() {
			defer readers.Done()
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				lines <- line{fmt.Sprintf("w%d", w), sc.Text()}
			}
		}()
	}

	doneBy := map[string]string{}      // item → worker that reported done
	claimedBy := map[string][]string{} // item → workers that claimed it, in order
	var killedAt time.Time
	var victimClaims []string // items w0 claimed and had not completed when killed
	open := map[string]bool{} // w0's claims not yet done
	sinkDone := 0
	timeout := time.After(2 * time.Minute)
	for sinkDone < items {
		select {
		case l := <-lines:
			f := strings.Fields(l.text)
			if len(f) < 2 {
				continue
			}
			switch f[0] {
			case "claim":
				claimedBy[f[1]] = append(claimedBy[f[1]], l.worker)
				if l.worker == "w0" {
					open[f[1]] = true
				}
				// Kill w0 midway, right after a claim, so it dies holding one.
				if l.worker == "w0" && killedAt.IsZero() && len(doneBy) >= items/2 {
					_ = workers[0].Process.Signal(syscall.SIGKILL)
					killedAt = time.Now()
					for it := range open {
						victimClaims = append(victimClaims, it)
					}
				}
			case "done":
				if prev, dup := doneBy[f[1]]; dup {
					t.Fatalf("%s completed twice (by %s and %s)", f[1], prev, l.worker)
				}
				doneBy[f[1]] = l.worker
				delete(open, f[1])
			}
		case e := <-sinkW.Updates():
			if e != nil && strings.Contains(string(e.Value()), `"done":true`) {
				sinkDone++
			}
		case <-timeout:
			t.Fatalf("only %d of %d items done at the sink", sinkDone, items)
		}
	}
	if killedAt.IsZero() {
		t.Fatal("the worker was never killed")
	}
	// Every item is done at the sink, exactly once.
	for i := range items {
		id := fmt.Sprintf("item-%04d", i)
		done, worker, _, result, err := q.Result(ctx, id)
		if err != nil || !done || worker != string(result) {
			t.Fatalf("%s at the sink: done %v by %q (%q), %v", id, done, worker, result, err)
		}
	}
	// The dead worker's open claims were finished by others.
	if len(victimClaims) == 0 {
		t.Fatal("the killed worker held no claim")
	}
	for _, id := range victimClaims {
		_, worker, _, _, _ := q.Result(ctx, id)
		if worker == "w0" && doneBy[id] != "w0" {
			continue // it completed at the sink just before dying, unreported
		}
		if worker == "w0" {
			t.Fatalf("%s reported done by the killed worker after it was killed", id)
		}
		t.Logf("%s: claimed by %v, finished by %s after the dead worker's claim lapsed", id, claimedBy[id], worker)
	}
	counts := map[string]int{}
	for _, w := range doneBy {
		counts[w]++
	}
	t.Logf("completions per worker: %v (w0 killed after %d)", counts, counts["w0"])
	for _, w := range workers[1:] {
		_ = w.Process.Signal(syscall.SIGKILL)
	}
}

// The queue's per-item state follows what is live: after many items were
// added, claimed and completed, it is back to nothing.
func TestWorkQueueStateShrinks(t *testing.T) {
	const items = 200
	srv, st := kvleasetest.NewStore(t)
	js := kvleasetest.JetStream(t, kvleasetest.Connect(t, srv.ClientURL()))
	ctx := t.Context()
	q, err := workqueue.Open(ctx, js, st, "shrink")
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	for i := range items {
		if err := q.Add(ctx, fmt.Sprintf("item-%d", i), nil); err != nil {
			t.Fatal(err)
		}
	}
	if p, _, err := q.WaitStateSize(ctx, func(p, _ int) bool { return p == items }); err != nil {
		t.Fatalf("%d pending items, want %d: %v", p, items, err)
	}
	for range items {
		c, err := q.Claim(ctx, "w", 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Complete(ctx, []byte("ok")); err != nil {
			t.Fatal(err)
		}
	}
	// The deletions reach the queue through the buckets' streams.
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if p, c, err := q.WaitStateSize(wctx, func(p, c int) bool { return p == 0 && c == 0 }); err != nil {
		t.Fatalf("after %d items came and went the queue still tracks %d pending and %d claimed entries", items, p, c)
	}
}

// Bad input is refused before anything is sent, as an invalid name or id,
// not as an outage: queue names its buckets cannot have, an item id whose
// claim would be no lease name (it could be added, never claimed, and
// failed every Claim that tried it). A closed queue refuses Add and Claim,
// and a Claim waiting on it returns.
func TestWorkQueueRefusesBadInputAndClosed(t *testing.T) {
	srv, st := kvleasetest.NewStore(t)
	js := kvleasetest.JetStream(t, kvleasetest.Connect(t, srv.ClientURL()))
	ctx := t.Context()
	for _, name := range []string{"", "a.b", "a/b", "a=b", strings.Repeat("q", 250)} {
		if _, err := workqueue.Open(ctx, js, st, name); !errors.Is(err, kvlease.ErrInvalidName) {
			t.Errorf("Open(%.20q…): %v, want ErrInvalidName", name, err)
		}
	}
	q, err := workqueue.Open(ctx, js, st, "badinput")
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Add(ctx, strings.Repeat("i", 246), nil); !errors.Is(err, kvlease.ErrInvalidName) {
		t.Errorf("Add of an id whose claim name is 260 bytes: %v, want ErrInvalidName", err)
	}
	if _, _, _, _, err := q.Result(ctx, "a b"); !errors.Is(err, kvlease.ErrInvalidName) {
		t.Errorf("Result of an invalid id: %v, want ErrInvalidName", err)
	}
	if _, _, _, _, err := q.Result(ctx, "never-added"); !errors.Is(err, kvlease.ErrNotFound) {
		t.Errorf("Result of an id never added: %v, want ErrNotFound", err)
	}
	waiting := make(chan error, 1)
	go func() {
		_, err := q.Claim(ctx, "w", 5*time.Second) // nothing to claim: waits
		waiting <- err
	}()
	q.Close()
	select {
	case err := <-waiting:
		if !errors.Is(err, kvlease.ErrClosed) {
			t.Errorf("Claim waiting when the queue closed: %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a Claim waiting on a closed queue did not return")
	}
	if err := q.Add(ctx, "late", nil); !errors.Is(err, kvlease.ErrClosed) {
		t.Errorf("Add after Close: %v, want ErrClosed", err)
	}
}

// After its server restarts, a Claim waiting on an empty queue takes an
// item added then as soon as the queue's connection is back: the queue's
// watch of its items is made anew on the reconnect. With nats.go's KV
// watcher it came 6–8 s later, when that watcher's heartbeats were missed
// (found by an outside client).
func TestWorkQueueClaimAfterServerRestart(t *testing.T) {
	srv := kvleasetest.NewServer(t)
	dir, addr := srv.DataDir(), srv.Addr()
	reconnected := make(chan struct{}, 1)
	nc := kvleasetest.Connect(t, srv.ClientURL(), nats.ReconnectHandler(func(*nats.Conn) {
		select {
		case reconnected <- struct{}{}:
		default:
		}
	}))
	ctx := t.Context()
	q, err := workqueue.Open(ctx, kvleasetest.JetStream(t, nc), kvleasetest.OpenStoreOn(t, nc), "q")
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	srv.Shutdown()
	_, port, _ := net.SplitHostPort(addr)
	p, _ := strconv.Atoi(port)
	srv = kvleasetest.NewServer(t, kvleasetest.WithDataDir(dir), kvleasetest.WithPort(p))
	<-reconnected
	claimed := make(chan error, 1)
	go func() {
		// Bounded well under nats.go's watcher's recovery, well over a
		// consumer's creation on a loaded machine.
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		c, err := q.Claim(cctx, "w", time.Minute)
		if err == nil && c.Item != "after-restart" {
			err = fmt.Errorf("claimed %q", c.Item)
		}
		claimed <- err
	}()
	other := kvleasetest.Connect(t, srv.ClientURL())
	q2, err := workqueue.Open(ctx, kvleasetest.JetStream(t, other), kvleasetest.OpenStoreOn(t, other), "q")
	if err != nil {
		t.Fatal(err)
	}
	defer q2.Close()
	if err := q2.Add(ctx, "after-restart", nil); err != nil {
		t.Fatal(err)
	}
	if err := <-claimed; err != nil {
		t.Fatalf("claim of an item added after the server restarted: %v", err)
	}
}

// clusterStore starts a three-node cluster and opens an R3 lease store
// on its first node, once the cluster has a leader for it.
func clusterStore(t *testing.T) ([]*kvleasetest.Server, jetstream.JetStream, *kvlease.Store) {
	t.Helper()
	servers := kvleasetest.NewCluster(t, 3)
	js := kvleasetest.JetStream(t, kvleasetest.Connect(t, servers[0].ClientURL()))
	st, err := kvlease.RetryUnavailable(t.Context(), 30*time.Second, nil, func() (*kvlease.Store, error) {
		return kvlease.Open(t.Context(), js, kvlease.WithReplicas(3))
	})
	if err != nil {
		t.Fatal(err)
	}
	return servers, js, st
}

// Opening a queue whose buckets exist without WithReplicas keeps their
// replica count: it made R3 buckets R1 (found by an outside client). Made
// without WithReplicas, they have the lease bucket's: they had one replica
// on a cluster, and a node's loss lost the queue and its sink, the fence
// of its completions (found by an outside client).
func TestOpenKeepsTheBucketsReplicas(t *testing.T) {
	_, js, st := clusterStore(t)
	ctx := t.Context()
	open := func(name string, opts ...workqueue.OpenOption) {
		t.Helper()
		q, err := kvlease.RetryUnavailable(ctx, 30*time.Second, nil, func() (*workqueue.Queue, error) {
			return workqueue.Open(ctx, js, st, name, opts...)
		})
		if err != nil {
			t.Fatal(err)
		}
		q.Close()
	}
	open("rq", workqueue.WithReplicas(3))
	open("rq")
	open("dq") // made without WithReplicas
	for _, bucket := range []string{"rq-items", "rq-done", "dq-items", "dq-done"} {
		s, err := js.Stream(ctx, "KV_"+bucket)
		if err != nil {
			t.Fatal(err)
		}
		if n := s.CachedInfo().Config.Replicas; n != 3 {
			t.Errorf("%s: replicas %d, want 3 (the lease bucket's)", bucket, n)
		}
	}
}

// The sink and the items are read through their streams' leaders, not by
// direct get, which any replica may answer before it has applied the
// latest write: Add's second look at the sink, made to catch a Complete
// that raced it, then missed it on R3, and the item was dropped unworked
// while Add said nil; a Claim's read of an item just added found nothing,
// and the item left pending for good (found in review).
func TestQueueReadsGoToTheStreamLeader(t *testing.T) {
	servers, js, st := clusterStore(t)
	ctx := t.Context()
	q, err := kvlease.RetryUnavailable(ctx, 30*time.Second, nil, func() (*workqueue.Queue, error) {
		return workqueue.Open(ctx, js, st, "lq", workqueue.WithReplicas(3))
	})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	monitor := kvleasetest.Connect(t, servers[0].ClientURL())
	var direct, leader atomic.Int64
	for subject, n := range map[string]*atomic.Int64{
		"$JS.API.DIRECT.GET.KV_lq-done": &direct, "$JS.API.DIRECT.GET.KV_lq-done.>": &direct,
		"$JS.API.DIRECT.GET.KV_lq-items": &direct, "$JS.API.DIRECT.GET.KV_lq-items.>": &direct,
		"$JS.API.STREAM.MSG.GET.KV_lq-done": &leader, "$JS.API.STREAM.MSG.GET.KV_lq-items": &leader,
	} {
		kvleasetest.Subscribe(t, monitor, subject, func(*nats.Msg) { n.Add(1) })
	}
	if err := monitor.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := q.Add(ctx, "item", []byte("x")); err != nil {
		t.Fatal(err)
	}
	c, err := q.Claim(ctx, "w", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Complete(ctx, []byte("done")); err != nil {
		t.Fatal(err)
	}
	if done, _, _, _, err := q.Result(ctx, "item"); !done || err != nil {
		t.Fatalf("Result after Complete: done %v, %v", done, err)
	}
	if err := monitor.Flush(); err != nil { // the requests came before the flush's reply
		t.Fatal(err)
	}
	if direct.Load() != 0 || leader.Load() < 3 {
		t.Fatalf("sink and item reads: %d direct gets, %d through the leader; want none direct", direct.Load(), leader.Load())
	}
}

// A Claim on a queue whose connection its owner closed returns at once
// (ErrConnClosed, as Add and Acquire do); its follows of the buckets had
// ended, and it waited for a change until its context ended (found by an
// outside client), for good under context.Background.
func TestClaimOnAClosedConnectionReturns(t *testing.T) {
	srv, _ := kvleasetest.NewStore(t)
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	js := kvleasetest.JetStream(t, nc)
	st, err := kvlease.Open(t.Context(), js)
	if err != nil {
		t.Fatal(err)
	}
	q, err := workqueue.Open(t.Context(), js, st, "closing")
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	claimed := make(chan error, 1)
	go func() {
		_, err := q.Claim(t.Context(), "w", 5*time.Second) // waits: the queue is empty
		claimed <- err
	}()
	nc.Close()
	select {
	case err := <-claimed:
		if !errors.Is(err, kvlease.ErrConnClosed) {
			t.Fatalf("Claim on a closed connection: %v; want ErrConnClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Claim on a closed connection still waits 10 s later")
	}
	if _, err := q.Claim(t.Context(), "w", 5*time.Second); !errors.Is(err, kvlease.ErrConnClosed) {
		t.Fatalf("a second Claim: %v; want ErrConnClosed", err)
	}
}

// Complete may be called again after an error whose outcome is unknown:
// once the sink has the claim's result, a second call finishes the rest
// and succeeds. Retries after ErrUnavailable were told ErrDone, or that
// the lease was released, for results they had recorded (found by an
// outside client). Another result than the one recorded is ErrDone.
func TestCompleteAgainAfterItsResultIsRecorded(t *testing.T) {
	srv, st := kvleasetest.NewStore(t)
	js := kvleasetest.JetStream(t, kvleasetest.Connect(t, srv.ClientURL()))
	ctx := t.Context()
	q, err := workqueue.Open(ctx, js, st, "again")
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if err := q.Add(ctx, "item-1", nil); err != nil {
		t.Fatal(err)
	}
	c, err := q.Claim(ctx, "w1", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// A first Complete whose write went unanswered orphans the claim
	// (renewed no more); the retry must still release it.
	c.Orphan()
	for i := range 2 {
		if err := c.Complete(ctx, []byte("ok")); err != nil {
			t.Fatalf("Complete #%d: %v", i+1, err)
		}
		if rec, err := st.Get(ctx, "claim.again.item-1"); !errors.Is(err, kvlease.ErrNotFound) {
			t.Fatalf("after Complete #%d the claim is %+v, %v; want it released", i+1, rec, err)
		}
	}
	if err := c.Complete(ctx, []byte("other")); !errors.Is(err, workqueue.ErrDone) {
		t.Fatalf("Complete with another result: %v, want ErrDone", err)
	}
	done, worker, token, result, err := q.Result(ctx, "item-1")
	if err != nil || !done || worker != "w1" || token != c.Token() || string(result) != "ok" {
		t.Fatalf("sink: %v %q %d %q %v", done, worker, token, result, err)
	}
}

// A work queue keeps its results: Open refuses an existing results bucket
// whose entries expire (ErrBucket), as fence.OpenKV does, but not an
// items bucket with a TTL, where an item that expires is dropped as not
// found (found in review: both were refused).
func TestOpenRefusesResultsThatExpire(t *testing.T) {
	srv, st := kvleasetest.NewStore(t)
	js := kvleasetest.JetStream(t, kvleasetest.Connect(t, srv.ClientURL()))
	ctx := t.Context()
	for _, b := range []string{"aging-items", "kept-items", "kept-done"} {
		cfg := jetstream.KeyValueConfig{Bucket: b}
		if b != "kept-done" {
			cfg.TTL = time.Hour
		}
		if _, err := js.CreateKeyValue(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	if q, err := workqueue.Open(ctx, js, st, "kept"); err != nil {
		t.Errorf("Open with an items bucket that expires its entries: %v", err)
	} else {
		q.Close()
	}
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "aging-done", TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if _, err := workqueue.Open(ctx, js, st, "aging"); !errors.Is(err, kvlease.ErrBucket) {
		t.Errorf("Open with a results bucket that expires its entries: %v, want ErrBucket", err)
	}
}

// An Add whose item is completed between its check and its create says
// ErrDone and leaves nothing pending: it said nil, and the next claim found
// the item done and dropped it, its payload never worked (found by an
// outside client: 7 of 300 racing Adds).
func TestAddRacingCompleteSaysDone(t *testing.T) {
	srv, st := kvleasetest.NewStore(t)
	js := kvleasetest.JetStream(t, kvleasetest.Connect(t, srv.ClientURL()))
	ctx := t.Context()
	q, err := workqueue.Open(ctx, js, st, "race")
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if err := q.Add(ctx, "item", []byte("first")); err != nil {
		t.Fatal(err)
	}
	c, err := q.Claim(ctx, "w", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	q.SetBeforeCreate(func() {
		if err := c.Complete(ctx, []byte("done")); err != nil {
			t.Errorf("complete: %v", err)
		}
	})
	if err := q.Add(ctx, "item", []byte("again")); !errors.Is(err, workqueue.ErrDone) {
		t.Fatalf("Add racing the item's Complete: %v; want ErrDone", err)
	}
	q.SetBeforeCreate(nil)
	items, err := js.KeyValue(ctx, "race-items")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := items.Get(ctx, "item"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("the item after the refused Add: %v; want it gone", err)
	}
}

// An Add whose second look at the sink fails says so (ErrUnavailable),
// not nil: the item was added, and a Complete it may have raced would drop
// it unseen (found in review). The sink's bucket deleted under it is the
// failure here.
func TestAddWhoseSecondLookFailsSaysSo(t *testing.T) {
	srv, st := kvleasetest.NewStore(t)
	js := kvleasetest.JetStream(t, kvleasetest.Connect(t, srv.ClientURL()))
	ctx := t.Context()
	q, err := workqueue.Open(ctx, js, st, "blind")
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	q.SetBeforeCreate(func() {
		if err := js.DeleteKeyValue(ctx, "blind-done"); err != nil {
			t.Errorf("delete the sink: %v", err)
		}
	})
	if err := q.Add(ctx, "item", []byte("x")); !errors.Is(err, kvlease.ErrUnavailable) {
		t.Fatalf("Add with its second look failing: %v; want ErrUnavailable", err)
	}
}

// A claim revoked with the default hold is taken by a waiting worker once
// the hold ends, and at once if its holder releases it first: the end of
// a hold makes no event, and a release after a revocation counted as a new
// claim, so a waiting Claim never took the item of an idle queue (found by
// an outside client, 5 of 5 times).
func TestClaimTakesARevokedClaimsItem(t *testing.T) {
	srv, st := kvleasetest.NewStore(t, kvlease.WithGrantorMargin(0))
	js := kvleasetest.JetStream(t, kvleasetest.Connect(t, srv.ClientURL()))
	ctx := t.Context()
	q, err := workqueue.Open(ctx, js, st, "revoked")
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	for _, c := range []struct {
		name    string
		d       time.Duration
		release bool // the revoked holder releases, freeing the lease
	}{
		{"paused holder: the hold ends", 2 * time.Second, false},
		{"the revoked holder releases", time.Minute, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			id := strings.ReplaceAll(c.name, " ", "-")
			id = strings.NewReplacer(":", "").Replace(id)
			if err := q.Add(ctx, id, nil); err != nil {
				t.Fatal(err)
			}
			first, err := q.Claim(ctx, "first", c.d)
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan *workqueue.Claim, 1)
			cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
			defer cancel()
			go func() {
				next, _ := q.Claim(cctx, "next", c.d)
				got <- next
			}()
			if !c.release {
				first.Orphan() // paused: it renews no more
			}
			if _, err := st.Revoke(ctx, "claim.revoked."+id, "test"); err != nil {
				t.Fatal(err)
			}
			if c.release {
				if err := first.Close(ctx); err != nil {
					t.Fatal(err)
				}
			}
			next := <-got
			if next == nil {
				t.Fatal("the waiting claim did not take the revoked claim's item within 15 s")
			}
			if next.Item != id || next.Token() <= first.Token() {
				t.Fatalf("waiting claim got %s (token %d); want %s with a token above %d", next.Item, next.Token(), id, first.Token())
			}
			if err := next.Complete(ctx, nil); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A result too large for one message is refused before it is sent, and the
// claim is kept: Close releases it (orphaned, it stayed claimed for its
// TTL: found by an outside client).
func TestCompleteTooLargeKeepsTheClaim(t *testing.T) {
	srv, st := kvleasetest.NewStore(t)
	nc := kvleasetest.Connect(t, srv.ClientURL())
	js := kvleasetest.JetStream(t, nc)
	ctx := t.Context()
	q, err := workqueue.Open(ctx, js, st, "big")
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if err := q.Add(ctx, "item", nil); err != nil {
		t.Fatal(err)
	}
	c, err := q.Claim(ctx, "w", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Complete(ctx, make([]byte, nc.MaxPayload())); !errors.Is(err, kvlease.ErrTooLarge) {
		t.Fatalf("Complete with a result over max_payload: %v; want ErrTooLarge", err)
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Get(ctx, "claim.big.item"); !errors.Is(err, kvlease.ErrNotFound) {
		t.Fatalf("the claim after Close: %v; want it released", err)
	}
}

// A claim outlives the ctx of the Claim that made it (ctx bounds the wait
// only), unlike kvlease.Keep's lease, which its ctx's end releases; Close
// frees the item at once. The doc said neither (found by an outside client,
// who expected a claim made under a cancelled ctx to have been released).
func TestClaimOutlivesItsContext(t *testing.T) {
	srv, st := kvleasetest.NewStore(t)
	js := kvleasetest.JetStream(t, kvleasetest.Connect(t, srv.ClientURL()))
	q, err := workqueue.Open(t.Context(), js, st, "q")
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if err := q.Add(t.Context(), "item-1", nil); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	c, err := q.Claim(ctx, "w1", time.Second)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	// Renewed past its first deadline, with ctx long gone.
	first := c.Lease().Deadline()
	for deadline := time.Now().Add(10 * time.Second); !c.Lease().Deadline().After(first.Add(time.Second)); {
		select {
		case <-c.Done():
			t.Fatalf("the claim ended with its Claim's ctx: %v", c.Err())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the claim was not renewed after its Claim's ctx ended (renewals %d)", c.Stats().Renewals)
		}
	}
	if err := c.Lease().Check(); err != nil {
		t.Fatalf("the claim, renewed: %v", err)
	}
	// Given up: free at once for the next worker, not at the lease's lapse.
	if err := c.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel = context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	next, err := q.Claim(ctx, "w2", time.Second)
	if err != nil || next.Item != "item-1" || next.Token() <= c.Token() {
		t.Fatalf("claim after Close: %v, %v", next, err)
	}
	_ = next.Close(t.Context())
}

// A Complete that fails stops renewing the claim, so that a claim not
// completed again lapses; a worker that then gives the item up with Close
// frees it at once, as Close does any claim. Close released nothing after
// such a Complete: the item stayed claimed until the claim lapsed, d and
// the grantor margin later (found by an outside client: 6 s for a 5 s
// claim, 6 ms without the failed Complete).
func TestCloseAfterAFailedCompleteFreesTheItem(t *testing.T) {
	srv, st := kvleasetest.NewStore(t)
	js := kvleasetest.JetStream(t, kvleasetest.Connect(t, srv.ClientURL()))
	ctx := t.Context()
	q, err := workqueue.Open(ctx, js, st, "giveup")
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if err := q.Add(ctx, "item", nil); err != nil {
		t.Fatal(err)
	}
	c, err := q.Claim(ctx, "w1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	gone, cancel := context.WithCancel(ctx)
	cancel()
	if err := c.Complete(gone, []byte("r")); !errors.Is(err, kvlease.ErrUnavailable) {
		t.Fatalf("Complete under a cancelled ctx: %v; want ErrUnavailable", err)
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if rec, err := st.Get(ctx, "claim.giveup.item"); !errors.Is(err, kvlease.ErrNotFound) {
		t.Fatalf("the claim after Close: %+v, %v; want it released", rec, err)
	}
	wait, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	next, err := q.Claim(wait, "w2", time.Minute)
	if err != nil || next.Item != "item" || next.Token() <= c.Token() {
		t.Fatalf("claim after Close: %v, %v", next, err)
	}
	// Refused for a newer claim (this one's revoked and freed at once),
	// Close releases nothing of the newer claim's, and says nothing of it.
	if _, err := st.Revoke(ctx, "claim.giveup.item", "test", kvlease.FreeNow()); err != nil {
		t.Fatal(err)
	}
	newer, err := q.Claim(wait, "w3", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := next.Complete(ctx, []byte("r2")); !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("Complete after a newer claim: %v; want ErrStaleToken", err)
	}
	if err := next.Close(ctx); err != nil {
		t.Fatalf("Close after a Complete refused for a newer claim: %v", err)
	}
	if err := newer.Complete(ctx, []byte("r3")); err != nil {
		t.Fatal(err)
	}
}

// A Claim's cost does not grow with the queue: it took a snapshot of every
// pending item, and shuffled it, to claim one, so that draining n items
// cost n² (found by an outside client: at 10,000 items the snapshots took
// 2.7 times the CPU of the claims themselves). Measured by what one Claim
// allocates with 20,000 items pending: the snapshot alone was 320 KB and
// more.
func TestClaimCostDoesNotGrowWithTheQueue(t *testing.T) {
	const items = 20000
	srv := kvleasetest.NewServer(t, kvleasetest.WithUnsafeSync())
	nc := kvleasetest.Connect(t, srv.ClientURL())
	js := kvleasetest.JetStream(t, nc)
	st := kvleasetest.OpenStoreOn(t, nc)
	ctx := t.Context()
	q, err := workqueue.Open(ctx, js, st, "long")
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	// Put straight into the items bucket, as Add would, without its reads,
	// a thousand at a time (nats.go stalls past 4,000 unacknowledged).
	for i := 0; i < items; i += 1000 {
		acks := make([]jetstream.PubAckFuture, 0, 1000)
		for j := i; j < i+1000; j++ {
			a, err := js.PublishAsync(fmt.Sprintf("$KV.long-items.item-%d", j), nil)
			if err != nil {
				t.Fatal(err)
			}
			acks = append(acks, a)
		}
		for _, a := range acks {
			select {
			case <-a.Ok():
			case err := <-a.Err():
				t.Fatal(err)
			case <-ctx.Done():
				t.Fatal(ctx.Err())
			}
		}
	}
	if p, _, err := q.WaitStateSize(ctx, func(p, _ int) bool { return p == items }); err != nil {
		t.Fatalf("%d pending items, want %d: %v", p, items, err)
	}
	var before, after runtime.MemStats
	for i := range 3 {
		runtime.ReadMemStats(&before)
		c, err := q.Claim(ctx, "w", 10*time.Second)
		runtime.ReadMemStats(&after)
		if err != nil {
			t.Fatal(err)
		}
		// The first claim of a store sets it up (about 500 KB whatever the
		// queue's length).
		n := after.TotalAlloc - before.TotalAlloc
		t.Logf("claim %d of %d pending items allocated %d KB", i+1, items, n>>10)
		if i > 0 && n > 160<<10 {
			t.Errorf("claim %d of %d pending items allocated %d KB", i+1, items, n>>10)
		}
		if err := c.Complete(ctx, nil); err != nil {
			t.Fatal(err)
		}
	}
}

// A queue whose items or results bucket is the lease store's own is
// refused with ErrBucket. The results bucket was (its entries expire); an
// items bucket that was the lease bucket took each item as a raw value
// there (the lease of that name then unusable: "not a lease record") and
// the claims' lease records for items (found by an outside client).
func TestOpenRefusesTheLeaseBucket(t *testing.T) {
	srv := kvleasetest.NewServer(t)
	nc := kvleasetest.Connect(t, srv.ClientURL())
	js := kvleasetest.JetStream(t, nc)
	for _, c := range []struct{ queue, bucket string }{{"a", "a-items"}, {"b", "b-done"}} {
		t.Run(c.bucket, func(t *testing.T) {
			st := kvleasetest.OpenStoreOn(t, nc, kvlease.WithBucket(c.bucket))
			q, err := workqueue.Open(t.Context(), js, st, c.queue)
			if !errors.Is(err, kvlease.ErrBucket) {
				if q != nil {
					q.Close()
				}
				t.Fatalf("Open of queue %s on the lease bucket %s: %v; want ErrBucket", c.queue, c.bucket, err)
			}
		})
	}
}

// A completed item leaves nothing in the items bucket once its marker has
// lapsed: one marker per completed item stayed for good, and the bucket
// (on disk, and in the NATS server's index of subjects) grew with every
// item ever done. A completed id is still refused, by the sink.
func TestCompletedItemsLeaveNothingBehind(t *testing.T) {
	defer workqueue.SetItemMarkerTTL(time.Second)()
	srv, st := kvleasetest.NewStore(t)
	ctx := t.Context()
	js := kvleasetest.JetStream(t, kvleasetest.Connect(t, srv.ClientURL()))
	// A queue made before the markers lapsed: its items bucket allows no
	// per-message TTL, and Open allows it.
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "old-items", History: 1}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"new", "old"} {
		q, err := workqueue.Open(ctx, js, st, name)
		if err != nil {
			t.Fatal(err)
		}
		defer q.Close()
		for i := range 5 {
			if err := q.Add(ctx, fmt.Sprint("item-", i), nil); err != nil {
				t.Fatal(err)
			}
		}
		for range 5 {
			c, err := q.Claim(ctx, "w", 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Complete(ctx, nil); err != nil {
				t.Fatal(err)
			}
		}
		stream, err := js.Stream(ctx, kvlease.StreamName(name+"-items"))
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		var state jetstream.StreamState // as last read
		for {
			info, err := stream.Info(wctx)
			if err == nil {
				state = info.State
			}
			if err == nil && state.Msgs == 0 && state.NumSubjects == 0 {
				break
			}
			if wctx.Err() != nil {
				t.Fatalf("queue %s: the items bucket still holds %d messages, %d subjects (%v) after its markers' TTL", name, state.Msgs, state.NumSubjects, err)
			}
			<-time.After(100 * time.Millisecond) // polling the server's state: it announces no lapse
		}
		cancel()
		if err := q.Add(ctx, "item-0", nil); !errors.Is(err, workqueue.ErrDone) {
			t.Fatalf("queue %s: re-adding a completed item once its marker lapsed: %v, want ErrDone", name, err)
		}
	}
}

// WithResultRetention makes the sink forget: its bucket keeps records for
// the retention, a queue opened otherwise is refused, and once a record
// has gone (deleted here, as its age would) its id is taken again, and a
// claim whose bar went with it cannot complete.
func TestResultRetention(t *testing.T) {
	srv, st := kvleasetest.NewStore(t)
	ctx := t.Context()
	js := kvleasetest.JetStream(t, kvleasetest.Connect(t, srv.ClientURL()))
	if _, err := workqueue.Open(ctx, js, st, "r", workqueue.WithResultRetention(time.Minute)); !errors.Is(err, kvlease.ErrInvalidOption) {
		t.Fatalf("a retention of a minute: %v, want ErrInvalidOption", err)
	}
	q, err := workqueue.Open(ctx, js, st, "r", workqueue.WithResultRetention(2*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	done, err := js.KeyValue(ctx, "r-done")
	if err != nil {
		t.Fatal(err)
	}
	if status, err := done.Status(ctx); err != nil || status.TTL() != 2*time.Hour {
		t.Fatalf("the sink bucket's TTL: %v, %v; want 2h", status, err)
	}
	for _, opts := range [][]workqueue.OpenOption{nil, {workqueue.WithResultRetention(3 * time.Hour)}} {
		if _, err := workqueue.Open(ctx, js, st, "r", opts...); !errors.Is(err, kvlease.ErrBucket) || !strings.Contains(err.Error(), "2h0m0s") {
			t.Fatalf("open with another retention (%d options): %v, want ErrBucket naming the sink's 2h", len(opts), err)
		}
	}

	if err := q.Add(ctx, "a", nil); err != nil {
		t.Fatal(err)
	}
	c, err := q.Claim(ctx, "w", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Complete(ctx, []byte("one")); err != nil {
		t.Fatal(err)
	}
	if err := done.Purge(ctx, "a"); err != nil { // its age past the retention
		t.Fatal(err)
	}
	if err := q.Add(ctx, "a", nil); err != nil {
		t.Fatalf("adding an id whose result has gone: %v, want it taken again", err)
	}
	c, err = q.Claim(ctx, "w", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := done.Purge(ctx, "a"); err != nil { // the bar gone while the claim works
		t.Fatal(err)
	}
	var stale *fence.StaleTokenError
	if err := c.Complete(ctx, []byte("two")); !errors.As(err, &stale) {
		t.Fatalf("completing a claim whose bar has gone: %v, want a StaleTokenError", err)
	}
	if isDone, _, _, _, err := q.Result(ctx, "a"); err != nil && !errors.Is(err, kvlease.ErrNotFound) || isDone {
		t.Fatalf("result after the refused completion: done %v, %v", isDone, err)
	}
}

// A NATS user that may not update streams opens a queue whose items bucket
// was made before its markers lapsed, which Open updates to allow them: the
// update gets no answer, only a permissions violation on the connection's
// error handler, and it took all of Open's ctx, which then failed to open
// the sink, as unavailable, every time (found by an outside client). Open
// goes on, and the queue works, its markers kept for good.
func TestOpenOldQueueWithoutStreamUpdatePermission(t *testing.T) {
	ns := kvleasetest.NewServer(t, kvleasetest.WithUsers(
		&server.User{Username: "admin", Password: "admin"},
		&server.User{Username: "worker", Password: "worker", Permissions: kvleasetest.PublishExcept("$JS.API.STREAM.UPDATE.>")},
	))
	ctx := t.Context()
	admin := kvleasetest.JetStream(t, kvleasetest.Connect(t, ns.ClientURL(), nats.UserInfo("admin", "admin")))
	if _, err := admin.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "old-items", History: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := kvlease.Open(ctx, admin); err != nil { // the lease bucket, as its operator makes it
		t.Fatal(err)
	}
	violations := make(chan error, 16)
	js := kvleasetest.JetStream(t, kvleasetest.Connect(t, ns.ClientURL(), nats.UserInfo("worker", "worker"),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case violations <- err:
			default:
			}
		})))
	st, err := kvlease.Open(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	octx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	q, err := workqueue.Open(octx, js, st, "old")
	if err != nil {
		t.Fatalf("open of a queue made before its markers lapsed, by a user that may not update it: %v", err)
	}
	defer q.Close()
	select {
	case err := <-violations:
		if !errors.Is(err, nats.ErrPermissionViolation) || !strings.Contains(err.Error(), "STREAM.UPDATE.KV_old-items") {
			t.Fatalf("connection error: %v, want the update's permissions violation", err)
		}
	case <-time.After(10 * time.Second): // reported at once, on nats.go's callback goroutine
		t.Fatal("the update was not refused: the test tests nothing")
	}
	if err := q.Add(ctx, "item", nil); err != nil {
		t.Fatal(err)
	}
	c, err := q.Claim(ctx, "w", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Complete(ctx, nil); err != nil {
		t.Fatalf("complete with markers kept: %v", err)
	}
}

// A queue is its lease bucket's: its claims are leases there, and the
// sink's bar compares their tokens. Opened with a store of another bucket,
// a worker's claims were leases in that one: two workers held a claim on
// the same item at once and both worked it, and the tokens of one bucket's
// claims, compared with the other's at the sink, refused the lower
// bucket's workers every item the other had touched, for good (found by an
// outside client: workers started with two lease buckets on one cluster).
// Open with another bucket's store is refused with ErrBucket.
func TestOpenRefusesAnotherLeaseBucket(t *testing.T) {
	srv := kvleasetest.NewServer(t)
	nc := kvleasetest.Connect(t, srv.ClientURL())
	js := kvleasetest.JetStream(t, nc)
	ctx := t.Context()
	stA := kvleasetest.OpenStoreOn(t, nc, kvlease.WithBucket("leases-a"))
	stB := kvleasetest.OpenStoreOn(t, nc, kvlease.WithBucket("leases-b"))
	qA, err := workqueue.Open(ctx, js, stA, "jobs")
	if err != nil {
		t.Fatal(err)
	}
	defer qA.Close()
	if err := qA.Add(ctx, "item", nil); err != nil {
		t.Fatal(err)
	}
	c, err := qA.Claim(ctx, "wa", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close(context.WithoutCancel(ctx)) }()
	qB, err := workqueue.Open(ctx, js, stB, "jobs")
	if err == nil {
		defer qB.Close()
		wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if cb, err := qB.Claim(wctx, "wb", 10*time.Second); err == nil {
			_ = cb.Close(ctx)
			t.Fatalf("a second claim on %s (token %d, bucket leases-b) while wa holds one (token %d, bucket leases-a)", cb.Item, cb.Token(), c.Token())
		}
	}
	if !errors.Is(err, kvlease.ErrBucket) {
		t.Fatalf("Open of queue jobs with the store of leases-b, made with leases-a's: %v; want ErrBucket", err)
	}
	// The store of its own bucket opens it again.
	qA2, err := workqueue.Open(ctx, js, stA, "jobs")
	if err != nil {
		t.Fatalf("Open again with the store of leases-a: %v", err)
	}
	qA2.Close()
}

// A lease bucket made anew below the tokens the queue's sink has seen
// gives claims below an item's bar: Claim says so (ErrBucket, with the
// stale token), at once. It granted and released the item's claim, woken
// by its own events, until the bucket's tokens reached the bar: 1,000
// tenures and 3 s for a bar 2,000 revisions up (found by an outside
// client).
func TestClaimRefusesTokensBelowTheSinks(t *testing.T) {
	srv := kvleasetest.NewServer(t)
	nc := kvleasetest.Connect(t, srv.ClientURL())
	js := kvleasetest.JetStream(t, nc)
	ctx := t.Context()
	st := kvleasetest.OpenStoreOn(t, nc, kvlease.WithBucket("tb"))
	for range 50 { // the bucket's tokens move on
		l, err := kvlease.Acquire(ctx, st, "other", "x", 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	q, err := workqueue.Open(ctx, js, st, "jobs")
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Add(ctx, "item", nil); err != nil {
		t.Fatal(err)
	}
	c, err := q.Claim(ctx, "w1", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	bar := c.Token() // raised at the sink
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	q.Close()
	if err := js.DeleteKeyValue(ctx, "tb"); err != nil {
		t.Fatal(err)
	}
	st2 := kvleasetest.OpenStoreOn(t, nc, kvlease.WithBucket("tb")) // anew, from token 1
	q2, err := workqueue.Open(ctx, js, st2, "jobs")
	if err != nil {
		t.Fatal(err)
	}
	defer q2.Close()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c2, err := q2.Claim(cctx, "w2", 5*time.Second)
	if err == nil {
		_ = c2.Close(ctx)
		t.Fatalf("claimed with token %d, bar %d: want ErrBucket at once", c2.Token(), bar)
	}
	if !errors.Is(err, kvlease.ErrBucket) || !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("Claim under a bar of %d on a bucket made anew: %v; want ErrBucket wrapping a stale token", bar, err)
	}
	// Nothing granted but the one claim, released: the item is free.
	if l, err := kvlease.Acquire(ctx, st2, "claim.jobs.item", "probe", 5*time.Second); err != nil {
		t.Fatalf("the item's claim after the refused Claim: %v", err)
	} else {
		_ = l.Release(ctx)
	}
}

// An item that no claim completes, a poison message that crashes every
// worker that takes it, was claimed again for good. With WithMaxClaims(2)
// its third Claim gives it up: it is recorded at the sink with its
// payload, removed from the queue and its claim released, Result says so
// with a *GaveUpError, Add refuses the id, and the next item is claimed.
func TestMaxClaimsGivesAnItemUp(t *testing.T) {
	srv, st := kvleasetest.NewStore(t)
	js := kvleasetest.JetStream(t, kvleasetest.Connect(t, srv.ClientURL()))
	ctx := t.Context()
	if _, err := workqueue.Open(ctx, js, st, "poison", workqueue.WithMaxClaims(0)); !errors.Is(err, kvlease.ErrInvalidOption) {
		t.Fatalf("WithMaxClaims(0): %v; want ErrInvalidOption", err)
	}
	q, err := workqueue.Open(ctx, js, st, "poison", workqueue.WithMaxClaims(2))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if err := q.Add(ctx, "bad", []byte("crashes its worker")); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		c, err := q.Claim(ctx, fmt.Sprintf("w%d", i), 10*time.Second)
		if err != nil || c.Item != "bad" {
			t.Fatalf("claim %d: %v, %v", i+1, c, err)
		}
		if err := c.Close(ctx); err != nil { // the worker gave the item back: not completed
			t.Fatal(err)
		}
	}
	giveUpByAClaim(t, q, "w2")
	_, _, _, _, err = q.Result(ctx, "bad")
	var gave *workqueue.GaveUpError
	if !errors.As(err, &gave) || !errors.Is(err, workqueue.ErrGaveUp) || gave.Item != "bad" || gave.Claims != 2 ||
		string(gave.Payload) != "crashes its worker" {
		t.Fatalf("Result of the item given up: %v (%+v); want a GaveUpError after 2 claims, with the payload", err, gave)
	}
	if err := q.Add(ctx, "bad", []byte("again")); !errors.Is(err, workqueue.ErrGaveUp) {
		t.Fatalf("Add of the id given up: %v; want ErrGaveUp", err)
	}
	if _, err := st.Get(ctx, "claim.poison.bad"); !errors.Is(err, kvlease.ErrNotFound) {
		t.Fatalf("the claim of the item given up: %v; want released", err)
	}
	if err := q.Add(ctx, "good", []byte("fine")); err != nil {
		t.Fatal(err)
	}
	c, err := q.Claim(ctx, "w3", 10*time.Second)
	if err != nil || c.Item != "good" {
		t.Fatalf("the next item: %v, %v", c, err)
	}
	if err := c.Complete(ctx, []byte("done")); err != nil {
		t.Fatal(err)
	}
	if done, _, _, _, err := q.Result(ctx, "good"); !done || err != nil {
		t.Fatalf("the next item: done %v, %v", done, err)
	}
}

// The Claim that gives an item up says so where an operator looks: a
// warning on the Store's logger, naming the queue, the item and its
// claims, and leased.workqueue.items_given_up on the Store's meter
// provider, by queue. Before, a dead letter showed only to a caller of
// Result that knew its id.
func TestMaxClaimsLogsAndCountsTheGiveUp(t *testing.T) {
	var logs kvleasetest.Logs
	reader := sdkmetric.NewManualReader()
	srv, st := kvleasetest.NewStore(t, kvlease.WithLogger(slog.New(slog.NewJSONHandler(&logs, nil))),
		kvlease.WithStoreMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
	js := kvleasetest.JetStream(t, kvleasetest.Connect(t, srv.ClientURL()))
	ctx := t.Context()
	q, err := workqueue.Open(ctx, js, st, "letters", workqueue.WithMaxClaims(1))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if err := q.Add(ctx, "poison", []byte("crashes its worker")); err != nil {
		t.Fatal(err)
	}
	c, err := q.Claim(ctx, "w0", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if n := telemetrytest.Sum(t, reader, telemetry.MetricItemsGivenUp); n != 0 {
		t.Fatalf("items given up after one claim of one allowed: %d, want 0", n)
	}
	giveUpByAClaim(t, q, "w1")
	s, ok := telemetrytest.Metric(t, reader, telemetry.MetricItemsGivenUp).(metricdata.Sum[int64])
	if !ok || len(s.DataPoints) != 1 || s.DataPoints[0].Value != 1 {
		t.Fatalf("%s: %+v; want one item given up", telemetry.MetricItemsGivenUp, s)
	}
	if v, _ := s.DataPoints[0].Attributes.Value(telemetry.AttrQueue); v.AsString() != "letters" {
		t.Errorf("%s by %s: %q, want the queue's name", telemetry.MetricItemsGivenUp, telemetry.AttrQueue, v.AsString())
	}
	var line string
	for l := range strings.Lines(logs.String()) {
		if strings.Contains(l, `"msg":"work item given up"`) {
			line = l
		}
	}
	for _, want := range []string{`"level":"WARN"`, `"queue":"letters"`, `"item":"poison"`, `"claims":1`} {
		if !strings.Contains(line, want) {
			t.Errorf("the give-up's log line %q: want %s in it; the log:\n%s", line, want, logs.String())
		}
	}
}

// giveUpByAClaim runs a Claim by worker on q, whose one item has been
// claimed as often as q allows: the Claim gives it up and, the queue then
// empty, waits, until the test cancels it.
func giveUpByAClaim(t *testing.T, q *workqueue.Queue, worker string) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	claimed := make(chan error, 1)
	go func() {
		c, err := q.Claim(ctx, worker, 10*time.Second)
		if err == nil {
			err = fmt.Errorf("claimed %q (token %d)", c.Item, c.Token())
		}
		claimed <- err
	}()
	wctx, wcancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer wcancel()
	if pending, claims, err := q.WaitStateSize(wctx, func(pending, claimed int) bool { return pending == 0 && claimed == 0 }); err != nil {
		t.Fatalf("the item given up: still %d pending, %d claimed", pending, claims)
	}
	cancel()
	if err := <-claimed; !errors.Is(err, context.Canceled) {
		t.Fatalf("the Claim past the claims allowed: %v; want to wait on (the item given up), until its ctx ended", err)
	}
}

// An item given up whose payload does not fit beside its sink record (a
// record holds it encoded, larger than the item) is given up all the same,
// without it: a GaveUpError whose Payload is nil.
func TestMaxClaimsGivesUpALargePayloadWithoutIt(t *testing.T) {
	srv, st := kvleasetest.NewStore(t)
	nc := kvleasetest.Connect(t, srv.ClientURL())
	js := kvleasetest.JetStream(t, nc)
	ctx := t.Context()
	q, err := workqueue.Open(ctx, js, st, "large", workqueue.WithMaxClaims(1))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	payload := make([]byte, nc.MaxPayload()*7/8) // fits; base64 in JSON does not
	if err := q.Add(ctx, "big", payload); err != nil {
		t.Fatal(err)
	}
	c, err := q.Claim(ctx, "w0", 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.Orphan() // the worker crashed: its claim lapses
	cctx, cancel := context.WithCancel(ctx)
	claimed := make(chan error, 1)
	go func() { _, err := q.Claim(cctx, "w1", 10*time.Second); claimed <- err }()
	wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
	defer wcancel()
	if pending, claims, err := q.WaitStateSize(wctx, func(pending, claimed int) bool { return pending == 0 && claimed == 0 }); err != nil {
		t.Fatalf("the item given up: still %d pending, %d claimed", pending, claims)
	}
	cancel()
	<-claimed
	_, _, _, _, err = q.Result(ctx, "big")
	var gave *workqueue.GaveUpError
	if !errors.As(err, &gave) || gave.Claims != 1 || gave.Payload != nil {
		t.Fatalf("Result: %v (%+v); want a GaveUpError after 1 claim, without the payload", err, gave)
	}
}

// A Claim whose ctx ends once its claim is made hands the claim over, as
// Campaign does a won election: ctx bounds the wait only. It returned
// ctx's error instead, after the sink had counted the claim, so a worker
// whose Claim timed out at that moment used up one of WithMaxClaims'
// claims on an item it never got (found by an outside client: 24 of 40
// items given up, by MaxClaims 1, that no worker had ever held, claimed
// under deadlines of a few ms).
func TestClaimWhoseContextEndsAsItIsMadeHandsItOver(t *testing.T) {
	srv, st := kvleasetest.NewStore(t)
	js := kvleasetest.JetStream(t, kvleasetest.Connect(t, srv.ClientURL()))
	ctx := t.Context()
	q, err := workqueue.Open(ctx, js, st, "q", workqueue.WithMaxClaims(1))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if err := q.Add(ctx, "item-1", []byte("p")); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	q.SetAfterRaise(cancel) // the worker's Claim timed out just then
	c, err := q.Claim(cctx, "w0", 10*time.Second)
	q.SetAfterRaise(nil)
	if err != nil {
		wctx, wcancel := context.WithTimeout(ctx, 2*time.Second)
		defer wcancel()
		next, nerr := q.Claim(wctx, "w1", 10*time.Second)
		_, _, _, _, rerr := q.Result(ctx, "item-1")
		t.Fatalf("Claim whose ctx ended as its claim was made: %v; want the claim. "+
			"The next Claim: %v, %v; the item: %v", err, next, nerr, rerr)
	}
	if c.Item != "item-1" || c.Lease().Check() != nil {
		t.Fatalf("claimed %q: %v", c.Item, c.Lease().Check())
	}
	if err := c.Complete(ctx, []byte("done")); err != nil {
		t.Fatal(err)
	}
	if done, worker, _, _, err := q.Result(ctx, "item-1"); !done || worker != "w0" || err != nil {
		t.Fatalf("Result: done %v by %q, %v", done, worker, err)
	}
}

// A claim that ended uncompleted (its worker paused past its deadline, or
// gave it back) and completes late, after the next Claim gave the item up,
// is told that the item was given up: it was told ErrDone ("another claim
// completed it"), and a worker took its work for recorded.
func TestCompleteOfAnItemGivenUpSaysSo(t *testing.T) {
	srv, st := kvleasetest.NewStore(t)
	js := kvleasetest.JetStream(t, kvleasetest.Connect(t, srv.ClientURL()))
	ctx := t.Context()
	q, err := workqueue.Open(ctx, js, st, "late", workqueue.WithMaxClaims(1))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if err := q.Add(ctx, "x", []byte("p")); err != nil {
		t.Fatal(err)
	}
	c, err := q.Claim(ctx, "w0", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Lease().Release(ctx); err != nil { // ended under its worker (as a lapse would)
		t.Fatal(err)
	}
	giveUpByAClaim(t, q, "w1")
	// An earlier Complete had sent its result and failed (unanswered): this
	// one reads the sink, which says the item was given up. (One that never
	// sent is refused at once with the claim's expiry, nothing read.)
	c.MarkSent()
	err = c.Complete(ctx, []byte("r"))
	var gave *workqueue.GaveUpError
	if !errors.As(err, &gave) || errors.Is(err, workqueue.ErrDone) || gave.Item != "x" {
		t.Fatalf("Complete of the item given up: %v; want a *GaveUpError, not ErrDone", err)
	}
}

// A give-up whose write lands at the sink but whose reply is lost (the
// outcome unknown, kvlease.ErrUnavailable) is logged and counted all the
// same: the Claim reads the sink and finds its own give-up there. It was
// neither (the Claim returned ErrUnavailable, and the next one, finding
// the item given up, removed it without a word): an item given up that
// the warning and leased.workqueue.items_given_up never showed.
func TestMaxClaimsCountsAGiveUpWhoseReplyIsLost(t *testing.T) {
	var logs kvleasetest.Logs
	reader := sdkmetric.NewManualReader()
	srv, st := kvleasetest.NewStore(t, kvlease.WithLogger(slog.New(slog.NewJSONHandler(&logs, nil))),
		kvlease.WithStoreMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
	proxy := kvleasetest.NewProxy(t, srv.Addr())
	js := kvleasetest.JetStream(t, kvleasetest.Connect(t, proxy.URL(), kvlease.ConnOptions()...))
	ctx := t.Context()
	q, err := workqueue.Open(ctx, js, st, "letters", workqueue.WithMaxClaims(1))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if err := q.Add(ctx, "poison", []byte("crashes its worker")); err != nil {
		t.Fatal(err)
	}
	c, err := q.Claim(ctx, "w0", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// The give-up's write goes to the server, and every reply from then
	// on is dropped, until the queue's connection asks the sink again.
	var armed atomic.Bool
	q.SetBeforeGiveUp(func() {
		if armed.CompareAndSwap(false, true) {
			proxy.DropReplies()
		}
	})
	kvleasetest.Subscribe(t, kvleasetest.Connect(t, srv.ClientURL()), "$JS.API.STREAM.MSG.GET.KV_letters-done", func(*nats.Msg) {
		if armed.Load() {
			proxy.Heal()
		}
	})
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	claimed := make(chan error, 1)
	go func() {
		c, err := q.Claim(cctx, "w1", 2*time.Second)
		if err == nil {
			err = fmt.Errorf("claimed %q (token %d)", c.Item, c.Token())
		}
		claimed <- err
	}()
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		_, _, _ = q.WaitStateSize(cctx, func(pending, claimed int) bool { return pending == 0 && claimed == 0 })
	}()
	select {
	case err := <-claimed:
		t.Logf("the Claim that gave the item up, its reply lost: %v", err)
	case <-gone: // given up, the item removed; the Claim waits on
	case <-time.After(20 * time.Second):
		t.Fatal("the Claim neither returned nor gave the item up in 20 s")
	}
	proxy.Heal()
	if !armed.Load() {
		t.Fatal("the Claim gave nothing up")
	}
	if n := telemetrytest.Sum(t, reader, telemetry.MetricItemsGivenUp); n != 1 {
		t.Errorf("%s after a give-up whose reply was lost: %d, want 1", telemetry.MetricItemsGivenUp, n)
	}
	if !strings.Contains(logs.String(), `"msg":"work item given up"`) {
		t.Errorf("no warning \"work item given up\" for a give-up whose reply was lost; the log:\n%s", logs.String())
	}
}
