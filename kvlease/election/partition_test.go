package election_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/election"
	"github.com/leased/leased/kvlease/kvleasetest"
)

// partitionedLapse starts a leader of name on a direct connection and
// returns a store on a connection through a proxy, then: it cuts the
// proxy (the caller has started what it watches through it first, in
// start), lets the leader's lease lapse, waits until the server has
// removed the expiry marker too (1 s marker TTL), and heals the proxy.
// The end of the tenure is then nowhere in the stream: a watch resumed
// after the partition gets no event for it.
func partitionedLapse(t *testing.T, name string, start func(e *election.Election)) {
	t.Helper()
	srv, st := kvleasetest.NewStore(t, kvlease.WithMarkerTTL(time.Second))
	p := kvleasetest.NewProxy(t, srv.Addr())
	far := kvleasetest.OpenStore(t, p.URL(), kvlease.WithMarkerTTL(time.Second))
	ctx := t.Context()
	e, _ := election.New(st, name)
	lead, err := e.Campaign(ctx, "a", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	w, err := st.Watch(ctx, name, kvlease.ExactName(), kvlease.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	fe, _ := election.New(far, name)
	start(fe)
	p.Cut()
	lead.Orphan() // it lapses at the server about 2 s from its last renewal
	for ev := range w.Events() {
		if ev.Type == kvlease.EventExpired {
			break
		}
	}
	kvleasetest.WaitEmpty(t, st, name, 10*time.Second) // the marker lapses by its own TTL
	if _, err := st.Get(ctx, name); !errors.Is(err, kvlease.ErrNotFound) {
		t.Fatalf("Leader before the partition heals: %v; want ErrNotFound", err)
	}
	p.Heal()
}

// healedWithin bounds how long after the partition heals the election
// must be seen vacant (or won): the client reconnects, then looks again
// every second (lapseRecheck). "For good" was the defect. Its bound was
// raised from 10 s after a failure blamed on a loaded machine; the cause
// was a campaign whose watch had not yet shown the tenure that refused
// it when the partition came (1 run in 12 waited for good; see Campaign).
const healedWithin = 30 * time.Second

// An observer cut off from the server while the leader's lease lapsed,
// and until the expiry marker had lapsed too, showed the old leader as
// leading for good once it could reach the server again, while Leader
// said no one leads: its watch resumes after the last message it had,
// and nothing in the stream says the tenure ended (found in review).
func TestObserveSeesALapseMissedInAPartition(t *testing.T) {
	ctx := t.Context()
	var changes <-chan election.LeaderChange
	partitionedLapse(t, "leader.obs-partition", func(e *election.Election) {
		var err error
		if changes, err = e.Observe(ctx); err != nil {
			t.Fatal(err)
		}
		if c := <-changes; c.Leader == nil || c.Leader.Holder != "a" {
			t.Fatalf("first change: %v, want a leading", c)
		}
	})
	select {
	case c := <-changes:
		if c.Leader != nil || c.Cause != kvlease.EventExpired {
			t.Fatalf("after the partition: %v, want vacant (expired)", c)
		}
	case <-time.After(healedWithin):
		t.Fatalf("the observer still shows a as leading %v after the partition healed; the election is vacant", healedWithin)
	}
}

// A candidate waiting for the leader's lease while cut off from the
// server, until the lease and its expiry marker had lapsed, waited for
// good once it could reach the server again: no event was to come, and
// the election stayed vacant (found in review).
func TestCampaignWinsALapseMissedInAPartition(t *testing.T) {
	ctx := t.Context()
	var won <-chan campaignResult
	refused := make(refusedAcquires, 1)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(refused))
	partitionedLapse(t, "leader.campaign-partition", func(e *election.Election) {
		out := make(chan campaignResult, 1)
		go func() {
			l, err := e.Campaign(ctx, "b", time.Second, kvlease.WithLease(kvlease.WithHolderTracerProvider(tp)))
			out <- campaignResult{l, "b", err}
		}()
		won = out
		select { // b was refused while a led: it waits for a's end
		case <-refused:
		case <-time.After(10 * time.Second):
			t.Fatal("b's grant was not refused while a led")
		}
	})
	select {
	case r := <-won:
		if r.err != nil {
			t.Fatalf("b's campaign: %v", r.err)
		}
		defer r.l.Orphan()
	case <-time.After(healedWithin):
		t.Fatalf("b still waits %v after the partition healed; the election is vacant", healedWithin)
	}
}

// refusedAcquires receives when an Acquire (the holder's span) ends in
// an error.
type refusedAcquires chan struct{}

func (r refusedAcquires) OnEnd(s sdktrace.ReadOnlySpan) {
	if s.Name() == "lease.holder.acquire" && s.Status().Code == codes.Error {
		select {
		case r <- struct{}{}:
		default:
		}
	}
}

func (refusedAcquires) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (refusedAcquires) Shutdown(context.Context) error                  { return nil }
func (refusedAcquires) ForceFlush(context.Context) error                { return nil }
