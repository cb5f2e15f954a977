package kvlease_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/kvleasetest"
	"github.com/leased/leased/telemetry"
	"github.com/leased/leased/telemetry/telemetrytest"
)

// lingering batches from 4 messages, one write in flight, and lingers up
// to linger.
func lingering(linger time.Duration) kvlease.Option {
	return kvlease.WithBatchLimits(kvlease.BatchLimits{Enabled: true, MinMessages: 4, MaxMessages: 1000,
		MaxInFlight: 1, Linger: linger, Timeout: 5 * time.Second})
}

func grantNamed(ctx context.Context, st *kvlease.Store, name string) error {
	_, err := st.Grant(ctx, kvlease.GrantRequest{Name: name, Holder: "holder-" + name, Duration: 10 * time.Second})
	return err
}

// A slot that has answered a write waits for that caller's next request
// before it sends what queued meanwhile, so callers writing in a loop go
// out as one batch instead of two cohorts that each pay a batch's fixed
// cost. Without the linger, the queued batch goes out without it.
func TestLingerMergesCohorts(t *testing.T) {
	for _, linger := range []time.Duration{0, time.Second} {
		t.Run(fmt.Sprintf("linger=%v", linger), func(t *testing.T) {
			reader := sdkmetric.NewManualReader()
			st := kvleasetest.OpenStore(t, kvleasetest.NewServer(t).ClientURL(), lingering(linger),
				kvlease.WithStoreMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
			holding := make(chan struct{})
			log := &sendLog{hold: holdUntilQueued(t, st, 5, holding)}
			batchSent := hookWithBatchSignal(st, log)
			ctx := t.Context()
			var wg sync.WaitGroup
			start := time.Now()
			// a writes in a loop: its first grant goes out alone and is
			// held until the others have queued behind it.
			wg.Go(func() {
				if err := grantNamed(ctx, st, "a.1"); err != nil {
					t.Error(err)
					return
				}
				if linger == 0 {
					select {
					case <-batchSent:
					case <-time.After(10 * time.Second):
						t.Error("the queued batch did not go out while a.2 was not written")
					}
				}
				if err := grantNamed(ctx, st, "a.2"); err != nil {
					t.Error(err)
				}
			})
			<-holding
			for i := range 5 {
				wg.Go(func() {
					if err := grantNamed(ctx, st, fmt.Sprintf("b.%d", i)); err != nil {
						t.Error(err)
					}
				})
			}
			wg.Wait()
			took := time.Since(start)
			kvlease.WaitWrites(st) // and the linger after the batch, for its callers' next requests
			log.mu.Lock()
			defer log.mu.Unlock()
			if len(log.batches) != 1 {
				t.Fatalf("batches %v, want one", log.batches)
			}
			got := slices.Sorted(slices.Values(log.batches[0]))
			want := []string{"b.0", "b.1", "b.2", "b.3", "b.4"}
			if linger > 0 {
				want = append([]string{"a.2"}, want...)
				// Woken by a.2's arrival, not by the linger's end.
				if took > linger/2 {
					t.Errorf("took %v: the slot waited out its linger", took)
				}
			}
			if !slices.Equal(got, want) {
				t.Errorf("batch %v, want %v", got, want)
			}
			// The store's write metric: a.1 alone, the batch, and a.2
			// alone unless it joined the batch.
			wantWrites := map[string]telemetrytest.HistogramTotal{"single": {Count: 2, Sum: 2}, "batch": {Count: 1, Sum: 5}}
			if linger > 0 {
				wantWrites = map[string]telemetrytest.HistogramTotal{"single": {Count: 1, Sum: 1}, "batch": {Count: 1, Sum: 6}}
			}
			if got := telemetrytest.Histogram(t, reader, telemetry.MetricStoreWrites, telemetry.AttrWriteKind); !maps.Equal(got, wantWrites) {
				t.Errorf("%s: %v, want %v", telemetry.MetricStoreWrites, got, wantWrites)
			}
		})
	}
}

// A linger ends at its bound when no one comes, and a request whose
// context ends while the slot lingers is not sent.
func TestLingerEndsAtItsBound(t *testing.T) {
	const linger = 300 * time.Millisecond
	st := kvleasetest.OpenStore(t, kvleasetest.NewServer(t).ClientURL(), lingering(linger))
	holding := make(chan struct{})
	log := &sendLog{hold: holdUntilQueued(t, st, 5, holding)}
	gone, cancel := context.WithCancel(t.Context())
	var lingerAt atomic.Pointer[time.Time]
	kvlease.SetLingerHook(st, func(queued, want int) {
		now := time.Now()
		if !lingerAt.CompareAndSwap(nil, &now) {
			return // the linger after the batch, for its callers' next requests
		}
		if queued != 5 || want != 6 {
			t.Errorf("lingering with %d queued for %d, want 5 for 6", queued, want)
		}
		cancel()
	})
	var sentAt atomic.Pointer[time.Time]
	kvlease.SetSendHook(st, func(batch bool, names []string) {
		if batch {
			now := time.Now()
			sentAt.Store(&now)
		}
		log.hook(batch, names)
	})
	ctx := t.Context()
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := grantNamed(ctx, st, "a.1"); err != nil {
			t.Error(err)
		}
	})
	<-holding
	for i := range 5 {
		wg.Go(func() {
			c := ctx
			if i == 2 {
				c = gone
			}
			err := grantNamed(c, st, fmt.Sprintf("b.%d", i))
			switch {
			case i == 2 && !errors.Is(err, context.Canceled):
				t.Errorf("b.2, cancelled while the slot lingered: %v, want context.Canceled", err)
			case i != 2 && err != nil:
				t.Error(err)
			}
		})
	}
	wg.Wait()
	kvlease.WaitWrites(st)
	if log.sent("b.2") {
		t.Error("b.2 was sent after its context ended")
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.batches) != 1 || len(log.batches[0]) != 4 {
		t.Fatalf("batches %v, want one of the 4 live requests", log.batches)
	}
	l, s := lingerAt.Load(), sentAt.Load()
	if l == nil || s == nil {
		t.Fatal("no linger or no batch seen")
	}
	if d := s.Sub(*l); d < linger {
		t.Errorf("batch sent %v after the linger began, want at least %v", d, linger)
	}
}

// A slot that has answered a batch keeps lingering when nothing has
// queued behind it: its callers' next requests, on their way, go out as
// one batch, not the first alone and the rest after it.
func TestLingerAfterABatchWithNothingQueued(t *testing.T) {
	const linger = time.Second
	st := kvleasetest.OpenStore(t, kvleasetest.NewServer(t).ClientURL(), lingering(linger))
	kvlease.SetLingerGap(st, linger) // the c.* may come back far apart on a loaded machine
	log, took := batchThenNext(t, st, func(int) bool { return true })
	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.batches) != 2 || len(log.batches[0]) != 5 || len(log.batches[1]) != 5 {
		t.Fatalf("batches %v, singles %v; want two of 5 (b.*, then c.*)", log.batches, log.singles)
	}
	for i, prefix := range []string{"b.", "c."} {
		for _, name := range log.batches[i] {
			if !strings.HasPrefix(name, prefix) {
				t.Errorf("batch %d: %v, want only %s*", i+1, log.batches[i], prefix)
			}
		}
	}
	// Woken by the fifth c.* arriving, not by the linger's end.
	if took > linger/2 {
		t.Errorf("the c.* took %v: the slot waited out its linger", took)
	}
}

// A slot lingering for its callers' next requests stops waiting once they
// have begun to come back and then pause (lingerGap): two of five callers
// write again, and their requests go out without waiting out the linger.
func TestLingerEndsWhenArrivalsStop(t *testing.T) {
	const linger = time.Second
	st := kvleasetest.OpenStore(t, kvleasetest.NewServer(t).ClientURL(), lingering(linger))
	var wants []int
	var mu sync.Mutex
	kvlease.SetLingerHook(st, func(_, want int) {
		mu.Lock()
		defer mu.Unlock()
		wants = append(wants, want)
	})
	log, took := batchThenNext(t, st, func(i int) bool { return i < 2 })
	again := log.sent("c.0") && log.sent("c.1")
	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.batches) != 1 || len(log.batches[0]) != 5 || !again {
		t.Fatalf("batches %v, singles %v; want one of the 5 b.*, then c.0 and c.1", log.batches, log.singles)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Contains(wants, 5) {
		t.Fatalf("lingers waited for %v, want one for the 5 callers the batch answered", wants)
	}
	if took > linger/2 {
		t.Errorf("c.0 and c.1 took %v: the slot waited out its linger for callers that had stopped", took)
	}
}

// The same when the callers' next requests queue before the slot has
// begun to linger: their arrival woke no one, so the slot waited out the
// whole linger (seen under load in TestLingerEndsWhenArrivalsStop). Here
// the slot is held after the batch's answers until c.0 and c.1 have
// queued.
func TestLingerEndsWhenArrivalsCameFirst(t *testing.T) {
	const linger = time.Second
	st := kvleasetest.OpenStore(t, kvleasetest.NewServer(t).ClientURL(), lingering(linger))
	var batchOut atomic.Bool
	aSent, fiveQueued, twoBack := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var once5, once2 sync.Once
	kvlease.SetQueueHook(st, func(queued int) {
		switch {
		case !batchOut.Load() && queued >= 5:
			once5.Do(func() { close(fiveQueued) })
		case batchOut.Load() && queued >= 2:
			once2.Do(func() { close(twoBack) })
		}
	})
	kvlease.SetSendHook(st, func(batch bool, names []string) {
		switch {
		case batch:
			batchOut.Store(true)
		case names[0] == "a":
			close(aSent)
			<-fiveQueued // so that the b.* go out as one batch
		}
	})
	var once sync.Once
	kvlease.SetWrittenHook(st, func() {
		once.Do(func() {
			select {
			case <-twoBack:
			case <-time.After(10 * time.Second):
				t.Error("c.0 and c.1 did not queue")
			}
		})
	})
	if took := grantsThenNext(t, st, aSent, func(i int) bool { return i < 2 }); took > linger/2 {
		t.Errorf("c.0 and c.1 took %v: the slot waited out its linger for callers that had come back before it", took)
	}
}

// batchThenNext grants a, held as it goes out until b.0…b.4 have queued
// behind it, so that the b.* go out as one batch; then each b.i caller
// for which again(i) grants c.i. It returns the store's sends and the time
// from the first b.* answer until the c.* were answered.
func batchThenNext(t *testing.T, st *kvlease.Store, again func(i int) bool) (*sendLog, time.Duration) {
	t.Helper()
	holding := make(chan struct{})
	log := &sendLog{hold: holdUntilQueued(t, st, 5, holding)}
	kvlease.SetSendHook(st, log.hook)
	return log, grantsThenNext(t, st, holding, again)
}

// grantsThenNext grants a, then, once a is held going out (holding
// closed: the caller's send hook holds it), b.0…b.4, and each b.i caller
// for which again(i) grants c.i. It returns the time from the first b.*
// answer until the c.* were answered, and waits for st's writes to end.
func grantsThenNext(t *testing.T, st *kvlease.Store, holding <-chan struct{}, again func(i int) bool) time.Duration {
	t.Helper()
	ctx := t.Context()
	var first, second sync.WaitGroup
	first.Go(func() {
		if err := grantNamed(ctx, st, "a"); err != nil {
			t.Error(err)
		}
	})
	<-holding
	var start atomic.Pointer[time.Time]
	for i := range 5 {
		second.Go(func() {
			if err := grantNamed(ctx, st, fmt.Sprintf("b.%d", i)); err != nil {
				t.Error(err)
				return
			}
			now := time.Now()
			start.CompareAndSwap(nil, &now)
			if !again(i) {
				return
			}
			if err := grantNamed(ctx, st, fmt.Sprintf("c.%d", i)); err != nil {
				t.Error(err)
			}
		})
	}
	first.Wait()
	second.Wait()
	took := time.Since(*start.Load())
	kvlease.WaitWrites(st)
	return took
}

// A request that finds the slot free is never delayed, and a slot does not
// linger when waiting cannot reach the break-even.
func TestLingerNeverDelaysALoneRequest(t *testing.T) {
	st := kvleasetest.OpenStore(t, kvleasetest.NewServer(t).ClientURL(), lingering(time.Second))
	var lingers atomic.Int64
	kvlease.SetLingerHook(st, func(int, int) { lingers.Add(1) })
	ctx := t.Context()
	// One caller in a loop, then two (2 < the break-even of 4): with a
	// second's linger, any wait would show in the hook.
	for c := range 2 {
		var wg sync.WaitGroup
		for j := range c + 1 {
			wg.Go(func() {
				for i := range 20 {
					if err := grantNamed(ctx, st, fmt.Sprintf("c%d.%d.%d", c, j, i)); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
	}
	if n := lingers.Load(); n != 0 {
		t.Errorf("%d lingers, want none", n)
	}
}
