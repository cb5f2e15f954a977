package election_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/election"
	"github.com/leased/leased/kvlease/kvleasetest"
	"github.com/leased/leased/telemetry"
)

type campaignResult struct {
	l   *election.Leadership
	who string
	err error
}

// campaign starts candidate's campaign and returns where its result arrives.
func campaign(ctx context.Context, e *election.Election, who string, d time.Duration) <-chan campaignResult {
	out := make(chan campaignResult, 1)
	go func() {
		l, err := e.Campaign(ctx, who, d)
		out <- campaignResult{l, who, err}
	}()
	return out
}

func TestElectionHandOverOnResign(t *testing.T) {
	_, st := kvleasetest.NewStore(t)
	ctx := t.Context()
	e, err := election.New(st, "leader.jobs")
	if err != nil {
		t.Fatal(err)
	}
	changes, err := e.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c := <-changes; c.Leader != nil {
		t.Fatalf("first observation %v, want vacant", c)
	}
	results := make(chan campaignResult, 3)
	for _, who := range []string{"a", "b", "c"} {
		go func() { results <- <-campaign(ctx, e, who, 5*time.Second) }()
	}
	var prev kvlease.Token
	leaders := map[string]bool{}
	for range 3 {
		var r campaignResult
		select {
		case r = <-results:
		case <-time.After(10 * time.Second):
			t.Fatal("no candidate took over")
		}
		if r.err != nil {
			t.Fatal(r.err)
		}
		if leaders[r.who] {
			t.Fatalf("%s led twice", r.who)
		}
		leaders[r.who] = true
		if r.l.Token() <= prev {
			t.Fatalf("token %d after %d", r.l.Token(), prev)
		}
		prev = r.l.Token()
		if got, err := e.Leader(ctx); err != nil || got.Holder != r.who {
			t.Fatalf("Leader() = %+v, %v; want %s", got, err, r.who)
		}
		if c := <-changes; c.Leader == nil || c.Leader.Holder != r.who || c.Leader.Token != r.l.Token() {
			t.Fatalf("observed %v, want %s", c, r.who)
		}
		start := time.Now()
		if err := r.l.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		if r.l.Context().Err() == nil {
			t.Fatal("the resigned leader's context is live")
		}
		if c := <-changes; c.Leader != nil || c.Cause != kvlease.EventReleased {
			t.Fatalf("observed %v after resign, want vacant by release", c)
		}
		t.Logf("%s resigned; %v", r.who, time.Since(start))
	}
	if _, err := e.Leader(ctx); !errors.Is(err, kvlease.ErrNotFound) {
		t.Fatalf("Leader() after all resigned: %v", err)
	}
}

// A leader that stops renewing (it crashed, or hangs) is replaced once its
// lease lapses, as the server's expiry marker arrives: no polling.
func TestElectionFailoverOnExpiry(t *testing.T) {
	const d, mg = time.Second, 200 * time.Millisecond
	_, st := kvleasetest.NewStore(t, kvlease.WithGrantorMargin(mg))
	ctx := t.Context()
	e, _ := election.New(st, "leader.db")
	first := <-campaign(ctx, e, "first", d)
	if first.err != nil {
		t.Fatal(first.err)
	}
	next := campaign(ctx, e, "second", d)
	stopped := time.Now()
	first.l.Orphan() // the leader stops renewing, without releasing
	var r campaignResult
	select {
	case r = <-next:
	case <-time.After(5 * time.Second):
		t.Fatal("no failover")
	}
	took := time.Since(stopped)
	if r.err != nil || r.l.Token() <= first.l.Token() {
		t.Fatalf("failover: %v, token %v", r.err, r.l)
	}
	defer r.l.Orphan()
	if err := first.l.Lease().Check(); !errors.Is(err, kvlease.ErrExpired) {
		t.Fatalf("old leader's check: %v", err)
	}
	if limit := kvlease.ServerTTL(d, mg) + 300*time.Millisecond; took > limit {
		t.Fatalf("failover took %v, limit %v", took, limit)
	}
	t.Logf("failover %v after the leader stopped renewing", took)
}

// A revoked leader's Context ends at once, as the bucket's stream shows
// the revocation, not at its next renewal (D/3 later).
func TestElectionRevokedLeaderLosesAtOnce(t *testing.T) {
	_, st := kvleasetest.NewStore(t)
	ctx := t.Context()
	e, _ := election.New(st, "leader.revoked")
	r := <-campaign(ctx, e, "leader", 30*time.Second)
	if r.err != nil {
		t.Fatal(r.err)
	}
	if _, err := st.Revoke(ctx, e.Name(), "test"); err != nil {
		t.Fatal(err)
	}
	revoked := time.Now()
	select {
	case <-r.l.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("revoked leader still leads 5 s later (its first renewal is due 10 s after the grant)")
	}
	if !errors.Is(r.l.Err(), kvlease.ErrNotFound) && !errors.Is(r.l.Err(), kvlease.ErrNotHolder) {
		t.Fatalf("revoked leader's loss: %v", r.l.Err())
	}
	t.Logf("leadership lost %v after the revocation", time.Since(revoked))
}

func TestCampaignEndsWithContext(t *testing.T) {
	_, st := kvleasetest.NewStore(t)
	e, _ := election.New(st, "leader.x")
	holder := <-campaign(t.Context(), e, "holder", 10*time.Second)
	if holder.err != nil {
		t.Fatal(holder.err)
	}
	defer holder.l.Orphan()
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	if _, err := e.Campaign(ctx, "waiter", 10*time.Second); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("campaign past its context: %v", err)
	}
	if _, err := election.New(st, "bad name"); !errors.Is(err, kvlease.ErrInvalidName) {
		t.Fatalf("bad election name: %v", err)
	}
}

// A Campaign on a closed connection fails at once, not at its context's
// end (found in review: with context.Background() it never returned).
func TestCampaignOnAClosedConnectionFailsAtOnce(t *testing.T) {
	srv := kvleasetest.NewServer(t)
	nc := kvleasetest.Connect(t, srv.ClientURL())
	st, err := kvlease.Open(t.Context(), kvleasetest.JetStream(t, nc))
	if err != nil {
		t.Fatal(err)
	}
	e, _ := election.New(st, "leader.closed")
	nc.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, err := e.Campaign(ctx, "c1", 5*time.Second); !errors.Is(err, kvlease.ErrConnClosed) || ctx.Err() != nil {
		t.Fatalf("Campaign: %v (ctx %v); want ErrConnClosed before its ctx ends", err, ctx.Err())
	}
}

// A leader's own renew-now hints (kvlease.WithRenewNow among its keeper
// options) are heard beside the election's: the election's option
// replaced the caller's, whose hints were never read (found by an outside
// client).
func TestCampaignHearsTheCallersRenewNow(t *testing.T) {
	_, st := kvleasetest.NewStore(t)
	ctx := t.Context()
	e, err := election.New(st, "leader.hints")
	if err != nil {
		t.Fatal(err)
	}
	hint := make(chan struct{})
	renewed := make(chan struct{}, 16)
	l, err := e.Campaign(ctx, "c", 30*time.Second, kvlease.WithKeeper(kvlease.WithRenewNow(hint),
		kvlease.WithOnRenew(func(kvlease.Record, time.Time) { renewed <- struct{}{} })))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Resign(context.Background())
	for i := range 3 {
		select {
		case hint <- struct{}{}:
		case <-time.After(10 * time.Second):
			t.Fatalf("hint %d: the keeper does not read the caller's renew-now channel", i)
		}
		select {
		case <-renewed:
		case <-time.After(10 * time.Second):
			t.Fatalf("hint %d: no renewal (the lease renews every 10 s on its own)", i)
		}
	}
}

// A revoked leader that never hears of it (here: no keeper, so no one
// renews or releases) holds the lease until its deadline; a candidate
// waits that out, from the refusal's HeldBack (no event marks the hold's
// end), and wins then, not before.
func TestCampaignWaitsOutARevocation(t *testing.T) {
	_, st := kvleasetest.NewStore(t, kvlease.WithGrantorMargin(100*time.Millisecond))
	ctx := t.Context()
	e, err := election.New(st, "leader.revoked")
	if err != nil {
		t.Fatal(err)
	}
	const d = 2 * time.Second
	deaf, err := kvlease.Acquire(ctx, st, "leader.revoked", "deaf", d)
	if err != nil {
		t.Fatal(err)
	}
	result := campaign(ctx, e, "next", d)
	revoked := time.Now()
	if _, err := st.Revoke(ctx, "leader.revoked", "stuck"); err != nil {
		t.Fatal(err)
	}
	var r campaignResult
	select {
	case r = <-result:
	case <-time.After(10 * time.Second):
		t.Fatal("the candidate did not win after the revoked leader's hold")
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer func() { _ = r.l.Resign(context.WithoutCancel(ctx)) }()
	if won := time.Since(revoked); won < kvlease.ServerTTL(d, 100*time.Millisecond) {
		t.Fatalf("won %v after the revocation, inside the revoked leader's hold", won)
	}
	if !deaf.Deadline().Before(time.Now()) {
		t.Fatal("won while the revoked leader's deadline had not passed")
	}
}

// A revoked leader that has stopped and released frees the lease at once,
// and a candidate waiting out the hold hears of it (EventFreed) and wins
// then, long before the hold would have ended.
func TestCampaignWinsWhenARevokedLeaderReleases(t *testing.T) {
	heldBack := make(heldBackRefusals, 1)
	srv := kvleasetest.NewServer(t)
	st := kvleasetest.OpenStore(t, srv.ClientURL(),
		kvlease.WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(heldBack))))
	ctx := t.Context()
	e, err := election.New(st, "leader.freed")
	if err != nil {
		t.Fatal(err)
	}
	const d = 20 * time.Second
	old, err := kvlease.Acquire(ctx, st, "leader.freed", "old", d)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Revoke(ctx, "leader.freed", "stuck"); err != nil {
		t.Fatal(err)
	}
	result := campaign(ctx, e, "next", d)
	select { // the candidate was refused, held back, before the old leader stops
	case <-heldBack:
	case <-time.After(10 * time.Second):
		t.Fatal("the candidate was not refused during the hold")
	}
	freed := time.Now()
	if err := old.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var r campaignResult
	select {
	case r = <-result:
	case <-time.After(d / 2):
		t.Fatal("the candidate did not win after the revoked leader released")
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	_ = r.l.Resign(ctx)
	t.Logf("won %v after the revoked leader's release", time.Since(freed))
}

// heldBackRefusals receives when a grant to "next" is refused because a
// revocation holds the lease.
type heldBackRefusals chan struct{}

func (h heldBackRefusals) OnEnd(s sdktrace.ReadOnlySpan) {
	for _, a := range s.Attributes() {
		if a.Key == telemetry.AttrHolder && a.Value.AsString() == "next" && s.Name() == "lease.grant" &&
			strings.Contains(s.Status().Description, "stays held") {
			select {
			case h <- struct{}{}:
			default:
			}
		}
	}
}

func (heldBackRefusals) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (heldBackRefusals) Shutdown(context.Context) error                  { return nil }
func (heldBackRefusals) ForceFlush(context.Context) error                { return nil }

// A candidate started while JetStream has no quorum waits for it, as one
// already waiting does, until its context ends; it used to return the
// watch's "JetStream system temporarily unavailable" at once (found by an
// outside client: `leased elect` exited 1 within milliseconds).
func TestCampaignWaitsForAQuorum(t *testing.T) {
	servers := kvleasetest.NewCluster(t, 3)
	st := kvleasetest.OpenStore(t, servers[0].ClientURL(), kvlease.WithReplicas(3))
	e, err := election.New(st, "leader.quorum")
	if err != nil {
		t.Fatal(err)
	}
	servers[1].Shutdown()
	servers[2].Shutdown()
	// Until the node left knows it has no quorum, requests hang rather
	// than fail: wait for it to say so.
	for answered := false; !answered; {
		rctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		sent := time.Now()
		_, err := st.LastRevision(rctx)
		cancel()
		answered = errors.Is(err, kvlease.ErrUnavailable) && !errors.Is(err, context.DeadlineExceeded) && time.Since(sent) < time.Second
		if t.Context().Err() != nil {
			t.Fatal(t.Context().Err())
		}
	}
	const wait = 1500 * time.Millisecond
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	waits := 0
	start := time.Now()
	_, err = e.Campaign(ctx, "c", 5*time.Second, kvlease.WithOnUnavailable(func(error) { waits++ }))
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) < wait || waits == 0 {
		t.Fatalf("campaign without a quorum: %v after %v, %d waits; want the context's end after %v, waiting", err, time.Since(start), waits, wait)
	}
}

// A Campaign ends with its ctx while the server does not answer: the
// watch it starts first read the bucket for up to 2 s whatever ctx allowed
// (a campaign of 200 ms against a SIGSTOPped server returned after 2 s;
// found by an outside client).
func TestCampaignEndsWithContextWhileTheServerIsSilent(t *testing.T) {
	st, p := proxiedStore(t)
	e, _ := election.New(st, "leader.silent")
	p.Cut()
	defer p.Heal()
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := e.Campaign(ctx, "c1", 5*time.Second)
	if took := time.Since(start); !errors.Is(err, context.DeadlineExceeded) || took > time.Second {
		t.Fatalf("Campaign: %v after %v; want its ctx's error within a second", err, took)
	}
}

// A candidate already waiting for a leader's lease, its watch running,
// ends with its ctx too when the server falls silent: it waited for its
// watch to stop, whose consumer's deletion waits up to a second for the
// server (a 1.5 s campaign against a serve SIGSTOPped 0.5 s in returned
// after 2.5 s; found by an outside client).
func TestWaitingCampaignEndsWithContextWhenTheServerFallsSilent(t *testing.T) {
	st, p := proxiedStore(t)
	e, _ := election.New(st, "leader.falls-silent")
	lead, err := e.Campaign(t.Context(), "c1", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer lead.Orphan()
	ctx, cancel := context.WithTimeout(t.Context(), 1500*time.Millisecond)
	defer cancel()
	time.AfterFunc(500*time.Millisecond, p.Cut)
	defer p.Heal()
	start := time.Now()
	_, err = e.Campaign(ctx, "c2", 10*time.Second)
	// Before: 2.5 s, the ctx's 1.5 s and a second waiting for the server.
	if took := time.Since(start); !errors.Is(err, context.DeadlineExceeded) || took > 2200*time.Millisecond {
		t.Fatalf("Campaign: %v after %v; want its ctx's error at 1.5 s", err, took)
	}
}

// proxiedStore opens a Store on a server reached through a proxy that the
// test can cut.
func proxiedStore(t *testing.T) (*kvlease.Store, *kvleasetest.Proxy) {
	t.Helper()
	srv := kvleasetest.NewServer(t)
	p := kvleasetest.NewProxy(t, srv.Addr())
	st, err := kvlease.Open(t.Context(), kvleasetest.JetStream(t, kvleasetest.Connect(t, p.URL())))
	if err != nil {
		t.Fatal(err)
	}
	return st, p
}

// A candidate already waiting, its watch running, whose grantor falls
// silent says so through WithOnUnavailable as its grant goes unanswered,
// not only one that starts without a grantor: Acquire tried its grant
// again until the campaign's ctx ended and never returned to the
// campaign's retry loop, so the callback was never called and `leased
// elect` said nothing through an outage (found by an outside client: a
// waiting elect silent for 15 s with its serve SIGKILLed).
func TestWaitingCampaignSaysTheGrantorDoesNotAnswer(t *testing.T) {
	srv, st := kvleasetest.NewStore(t)
	p := kvleasetest.NewProxy(t, srv.Addr())
	far := kvleasetest.OpenStore(t, p.URL())
	ctx := t.Context()
	e, _ := election.New(st, "leader.silent-wait")
	lead, err := e.Campaign(ctx, "a", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer lead.Orphan()
	fe, _ := election.New(far, "leader.silent-wait")
	unavailable := make(chan error, 1)
	done := make(chan error, 1)
	cctx, cancel := context.WithCancel(ctx)
	defer func() { cancel(); <-done }()
	go func() {
		l, err := fe.Campaign(cctx, "b", time.Second, kvlease.WithOnUnavailable(func(err error) {
			select {
			case unavailable <- err:
			default:
			}
		}))
		if err == nil {
			l.Orphan()
		}
		done <- err
	}()
	// Waiting: the leader, on its own connection, is seen through b's watch.
	changes, err := fe.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for ch := range changes {
		if ch.Leader != nil && ch.Leader.Holder == "a" {
			break
		}
	}
	p.Cut()
	defer p.Heal()
	lead.Orphan() // the lease lapses; b's grant goes unanswered
	select {
	case err := <-unavailable:
		if !errors.Is(err, kvlease.ErrUnavailable) {
			t.Fatalf("OnUnavailable got %v; want an error wrapping ErrUnavailable", err)
		}
	case err := <-done:
		t.Fatalf("campaign ended while the grantor was cut off: %v", err)
	case <-time.After(15 * time.Second):
		t.Fatal("OnUnavailable not called in 15 s of a silent grantor")
	}
}

// A leader whose watch is cut off from the stream (it lost its consumer
// and cannot make another: a cluster whose meta leader died, here the
// stream's limit on consumers) renews at once, and every second while the
// watch is interrupted: a revocation meanwhile ends leadership then, not
// at the next renewal (a third of the TTL later) or when the watch is
// back. Its watchEnd did not look at the watch's interruptions, as the
// candidate's waitVacant does, and heard of the revocation at neither
// (found by an outside client).
func TestLeaderRenewsWhileItsWatchIsInterrupted(t *testing.T) {
	srv, st := kvleasetest.NewStore(t)
	ctx := t.Context()
	e, _ := election.New(st, "leader.interrupted")
	renewed := make(chan struct{}, 16)
	lead, err := e.Campaign(ctx, "a", time.Minute, kvlease.WithKeeper(kvlease.WithOnRenew(func(kvlease.Record, time.Time) {
		select {
		case renewed <- struct{}{}:
		default:
		}
	})))
	if err != nil {
		t.Fatal(err)
	}
	defer lead.Orphan()
	nc := kvleasetest.Connect(t, srv.ClientURL())
	js := kvleasetest.JetStream(t, nc)
	stream := kvlease.StreamName(kvlease.DefaultBucket)
	consumers := kvleasetest.ConsumerNames(t, js, stream) // the leader's watch's
	if len(consumers) != 1 {
		t.Fatalf("consumers of %s: %v, want the leader's watch's", stream, consumers)
	}
	// No consumer can be made once the watch's is gone.
	if err := srv.NATS().GlobalAccount().UpdateJetStreamLimits(map[string]server.JetStreamAccountLimits{
		"": {MaxMemory: -1, MaxStore: -1, MaxStreams: -1, MaxConsumers: 1, MaxAckPending: -1}}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateConsumer(ctx, stream, jetstream.ConsumerConfig{Durable: "blocker", AckPolicy: jetstream.AckNonePolicy}); !errors.Is(err, jetstream.ErrMaximumConsumersLimit) {
		t.Fatalf("a second consumer: %v, want ErrMaximumConsumersLimit", err)
	}
	// Take the watch's place, so that its attempts to make another are
	// refused; it may make one first: take that one's place then.
	for {
		for _, c := range kvleasetest.ConsumerNames(t, js, stream) {
			if err := js.DeleteConsumer(ctx, stream, c); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
				t.Fatal(err)
			}
		}
		_, err := js.CreateConsumer(ctx, stream, jetstream.ConsumerConfig{Durable: "blocker", AckPolicy: jetstream.AckNonePolicy})
		if err == nil {
			break
		}
		if !errors.Is(err, jetstream.ErrMaximumConsumersLimit) {
			t.Fatal(err)
		}
	}
	// Two heartbeats missed, and the interrupt's renewal, or the next
	// recheck's if the watch was interrupted already: long before the next
	// one due (20 s).
	for len(renewed) > 0 {
		<-renewed
	}
	select {
	case <-renewed:
	case <-time.After(3*kvlease.WatchHeartbeat + 5*time.Second):
		t.Fatal("the leader did not renew as its watch was interrupted")
	}
	revoked := time.Now()
	if _, err := st.Revoke(ctx, e.Name(), "test", kvlease.FreeNow()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lead.Done():
		t.Logf("leadership ended %v after the revocation", time.Since(revoked).Round(time.Millisecond))
	case <-time.After(5 * time.Second):
		t.Fatal("leadership outlived its revocation by 5 s while the leader's watch was interrupted")
	}
	if c := kvleasetest.ConsumerNames(t, js, stream); len(c) != 1 || c[0] != "blocker" {
		t.Fatal("the watch made a consumer: it was not interrupted throughout")
	}
}

// A leader whose connection is down does not try renewals as its watch
// is interrupted: they would not be sent, only fail, each one logged and
// counted by `leased elect` where a short outage between two renewals
// cost nothing. Once back it hears of a revocation from its watch.
func TestLeaderWithoutAConnectionDoesNotRenewOnInterrupts(t *testing.T) {
	srv := kvleasetest.NewServer(t, kvleasetest.WithPort(kvleasetest.FreePort(t)))
	lost := make(chan struct{}, 1)
	nc := kvleasetest.Connect(t, srv.ClientURL(), append(kvlease.ConnOptions(),
		nats.DisconnectErrHandler(func(*nats.Conn, error) {
			select {
			case lost <- struct{}{}:
			default:
			}
		}))...)
	st := kvleasetest.OpenStoreOn(t, nc)
	ctx := t.Context()
	e, _ := election.New(st, "leader.disconnected")
	failed := make(chan error, 16)
	lead, err := e.Campaign(ctx, "a", time.Minute, kvlease.WithKeeper(kvlease.WithOnRenewFailure(func(err error, _ time.Duration) {
		select {
		case failed <- err:
		default:
		}
	})))
	if err != nil {
		t.Fatal(err)
	}
	defer lead.Orphan()
	srv.Shutdown()
	<-lost
	// The interrupt comes with the disconnect, a recheck a second later:
	// a renewal each would have failed by now.
	select {
	case err := <-failed:
		t.Fatalf("a renewal was tried without a connection: %v", err)
	case <-time.After(2*interruptedRecheck + 500*time.Millisecond):
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	if _, err := kvleasetest.OpenStore(t, srv.ClientURL()).Revoke(ctx, e.Name(), "test", kvlease.FreeNow()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lead.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("leadership outlived its revocation by 10 s once the server was back")
	}
}

// interruptedRecheck is election's: how often an interrupted watch's
// leader renews.
const interruptedRecheck = time.Second
