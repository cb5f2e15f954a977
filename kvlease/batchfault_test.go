package kvlease_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/atomicbatch"
	"github.com/leased/leased/kvlease/kvleasetest"
)

// slowTimeoutBatching is forcedBatching with the server's longest batch
// timeout (10 s, R1's default), so that a slot held until the timeout
// shows.
func slowTimeoutBatching() kvlease.Option {
	return kvlease.WithBatchLimits(kvlease.BatchLimits{Enabled: true, MinMessages: 2, MaxMessages: 1000,
		MaxInFlight: 1, Timeout: kvlease.ServerMaxBatchTimeout})
}

// batchWithLostAck sends n grants (callers with contexts from ctxFor) as
// one atomic batch through proxy, after a first grant that takes the
// store's one slot, and drops every reply from the batch on: the batch
// reaches the server, and its ack never reaches the store. It returns once
// the commit has reached the server, with a wait for the grants' results.
func batchWithLostAck(t *testing.T, srv *kvleasetest.Server, proxy *kvleasetest.Proxy, st *kvlease.Store, n int,
	ctxFor func() (context.Context, context.CancelFunc)) (results func() []error, log *sendLog) {
	t.Helper()
	committed := make(chan struct{})
	var once sync.Once
	kvleasetest.Subscribe(t, kvleasetest.Connect(t, srv.ClientURL()), "$KV."+kvlease.DefaultBucket+".>", func(m *nats.Msg) {
		if m.Header.Get(atomicbatch.HeaderCommit) != "" {
			once.Do(func() { close(committed) })
		}
	})
	log = &sendLog{}
	holding := make(chan struct{})
	log.hold = holdUntilQueued(t, st, n, holding)
	kvlease.SetSendHook(st, func(batch bool, names []string) {
		if batch {
			proxy.DropReplies()
		}
		log.hook(batch, names)
	})
	errs := make([]error, n+1)
	var wg sync.WaitGroup
	for i := range n + 1 {
		if i == 1 {
			<-holding // x.0 holds the slot: the rest queue for one batch
		}
		wg.Go(func() {
			ctx, cancel := ctxFor()
			defer cancel()
			_, errs[i] = st.Grant(ctx, kvlease.GrantRequest{Name: fmt.Sprintf("x.%d", i), Holder: "h", Duration: 30 * time.Second})
		})
	}
	select {
	case <-committed:
	case <-time.After(10 * time.Second):
		t.Fatalf("the batch's commit never reached the server (sent: %v)", log.batches)
	}
	return func() []error { wg.Wait(); return errs[1:] }, log
}

// A batch whose ack is lost with the connection holds the store's write
// slot no longer than the connection: once the store has reconnected, a
// renewal goes out at once. It held the slot for the whole batch timeout
// (10 s), and every write of the store queued behind it.
func TestBatchWhoseAckIsLostWithTheConnection(t *testing.T) {
	srv := kvleasetest.NewServer(t)
	proxy := kvleasetest.NewProxy(t, srv.Addr())
	nc := kvleasetest.Connect(t, proxy.URL(), kvlease.ConnOptions()...)
	st := kvleasetest.OpenStoreOn(t, nc, slowTimeoutBatching())
	ctx := t.Context()
	held, err := st.Grant(ctx, kvlease.GrantRequest{Name: "held", Holder: "h", Duration: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	results, _ := batchWithLostAck(t, srv, proxy, st, 8, func() (context.Context, context.CancelFunc) {
		return context.WithCancel(ctx) // callers that wait as long as it takes
	})
	back := nc.StatusChanged(nats.CONNECTED)
	proxy.Heal() // closes the connection: the store reconnects
	select {
	case <-back:
	case <-time.After(10 * time.Second):
		t.Fatal("the store did not reconnect")
	}
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := st.Renew(rctx, kvlease.RenewRequest{Name: "held", Holder: "h", Token: held.Token, Revision: held.Revision}); err != nil {
		t.Errorf("renewal after the reconnect: %v (the lost batch still holds the slot?)", err)
	}
	for i, err := range results() {
		if !errors.Is(err, kvlease.ErrUnavailable) {
			t.Errorf("grant x.%d of the batch whose ack was lost: %v, want ErrUnavailable (outcome unknown)", i+1, err)
		}
	}
}

// A batch whose ack does not come holds the slot only while one of its
// callers still waits for the answer: once all have given up, the next
// write goes out, on a connection that looks healthy throughout.
func TestBatchWhoseCallersAllGaveUp(t *testing.T) {
	srv := kvleasetest.NewServer(t)
	proxy := kvleasetest.NewProxy(t, srv.Addr())
	nc := kvleasetest.Connect(t, proxy.URL()) // nats.go's pings: 2 minutes apart
	st := kvleasetest.OpenStoreOn(t, nc, slowTimeoutBatching())
	ctx := t.Context()
	held, err := st.Grant(ctx, kvlease.GrantRequest{Name: "held", Holder: "h", Duration: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	results, log := batchWithLostAck(t, srv, proxy, st, 8, func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(ctx, 300*time.Millisecond)
	})
	results() // all gave up
	renewed := make(chan struct{})
	var once sync.Once
	kvlease.SetSendHook(st, func(batch bool, names []string) {
		log.hook(batch, names)
		if names[0] == "held" {
			once.Do(func() { close(renewed) })
		}
	})
	rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	go func() {
		_, _ = st.Renew(rctx, kvlease.RenewRequest{Name: "held", Holder: "h", Token: held.Token, Revision: held.Revision})
	}()
	select {
	case <-renewed:
	case <-time.After(2 * time.Second):
		t.Error("the renewal was not sent within 2 s: the batch nobody waits for still holds the slot")
	}
	cancel()
	proxy.Heal()
}

// A write too large for the server is refused by the store with its own
// error, and does not sink the batch it would have joined (the others
// were all answered ErrUnavailable, though none was stored).
func TestTooLargeWriteIsRefusedAlone(t *testing.T) {
	srv := kvleasetest.NewServer(t, kvleasetest.WithMaxPayload(4096))
	st := kvleasetest.OpenStore(t, srv.ClientURL(), forcedBatching())
	ctx := t.Context()
	big := map[string]string{"big": strings.Repeat("x", 5000)}
	_, err := st.Grant(ctx, kvlease.GrantRequest{Name: "alone", Holder: "h", Duration: 20 * time.Second, Attributes: big})
	if !errors.Is(err, kvlease.ErrTooLarge) || !strings.Contains(err.Error(), "max_payload of 4096") {
		t.Errorf("a lone grant too large for the server: %v, want ErrTooLarge naming max_payload", err)
	}
	const n = 10
	log := &sendLog{}
	holding := make(chan struct{})
	log.hold = holdUntilQueued(t, st, n-1, holding) // the big one is refused before it queues
	batchSent := hookWithBatchSignal(st, log)
	errs := make([]error, n+1)
	var wg sync.WaitGroup
	for i := range n + 1 {
		if i == 1 {
			<-holding
		}
		wg.Go(func() {
			req := kvlease.GrantRequest{Name: fmt.Sprintf("p.%d", i), Holder: "h", Duration: 20 * time.Second}
			if i == 5 {
				req.Attributes = big
			}
			_, errs[i] = st.Grant(ctx, req)
		})
	}
	wg.Wait()
	<-batchSent
	for i, err := range errs {
		switch {
		case i == 5 && !errors.Is(err, kvlease.ErrTooLarge):
			t.Errorf("grant p.5, too large: %v, want ErrTooLarge", err)
		case i != 5 && err != nil:
			t.Errorf("grant p.%d: %v (failed because p.5 was in its batch?)", i, err)
		}
	}
	if _, err := st.Get(ctx, "p.5"); !errors.Is(err, kvlease.ErrNotFound) {
		t.Errorf("p.5 after its refusal: %v, want ErrNotFound", err)
	}
}

// Renew refuses to send a renewal that would reach the server within the
// guard before the revision's expiry (DESIGN §2 item 8); one that queued
// behind a slow write while it was still in time is checked again as it
// goes out, as its context is. A caller whose context has no deadline
// (one that ignores its holder's) got it sent 950 ms into a 1 s TTL.
func TestQueuedRenewalTooLateIsNotSent(t *testing.T) {
	_, st := kvleasetest.NewStore(t, kvlease.WithGrantorMargin(0), forcedBatching())
	ctx := t.Context() // no deadline
	sent := time.Now()
	rec, err := st.Grant(ctx, kvlease.GrantRequest{Name: "edge", Holder: "h", Duration: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	blocking := make(chan struct{})
	var mu sync.Mutex
	var renewalSent bool
	kvlease.SetSendHook(st, func(_ bool, names []string) {
		for _, n := range names {
			switch n {
			case "blocker":
				// A slow write holds the one slot until the renewal,
				// queued in time, would land 50 ms before the expiry.
				close(blocking)
				time.Sleep(time.Until(sent.Add(950 * time.Millisecond)))
			case "edge":
				mu.Lock()
				renewalSent = true
				mu.Unlock()
			}
		}
	})
	go func() {
		_, _ = st.Grant(ctx, kvlease.GrantRequest{Name: "blocker", Holder: "b", Duration: time.Minute})
	}()
	<-blocking
	_, err = st.Renew(ctx, kvlease.RenewRequest{Name: "edge", Holder: "h", Token: rec.Token, Revision: rec.Revision})
	if !errors.Is(err, kvlease.ErrNotFound) || !strings.Contains(err.Error(), "too late to renew") {
		t.Errorf("renewal queued until 50 ms before the expiry: %v, want too late (ErrNotFound)", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if renewalSent {
		t.Error("the renewal was sent inside the guard")
	}
}

// A write JetStream refuses for its storage limit says so (ErrStoreFull,
// with ErrUnavailable): grants and renewals failed with "insufficient
// resources" alone, which left users guessing (found filling a server's
// max_file_store).
func TestFullStoreIsSaidSo(t *testing.T) {
	srv := kvleasetest.NewServer(t, kvleasetest.WithMaxStore(64<<10))
	st := kvleasetest.OpenStore(t, srv.ClientURL())
	ctx := t.Context()
	first, err := st.Grant(ctx, kvlease.GrantRequest{Name: "first", Holder: "h", Duration: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	grantUntilFull(t, st, "into a full store")
	_, err = st.Renew(ctx, kvlease.RenewRequest{Name: "first", Holder: "h", Token: first.Token, Revision: first.Revision, Duration: time.Minute})
	if !errors.Is(err, kvlease.ErrStoreFull) {
		t.Errorf("renewal in a full store: %v, want ErrStoreFull", err)
	}
}

// An account's storage limit reached is said as the server's is
// (ErrStoreFull, with ErrUnavailable), as README Safety says: nats-server
// answers it 10002 ("resource limits exceeded for account", a 400), which
// was ErrBucket, a refusal, and a keeper gave its lease up at the first
// renewal it refused, though a renewal passes again once room is made
// (found in review).
func TestAccountStoreFullIsSaidSo(t *testing.T) {
	srv := kvleasetest.NewServer(t)
	st := kvleasetest.OpenStore(t, srv.ClientURL())
	ctx := t.Context()
	first, err := st.Grant(ctx, kvlease.GrantRequest{Name: "first", Holder: "h", Duration: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	srv.LimitAccountStore(t, 64<<10)
	grantUntilFull(t, st, "past the account's limit")
	srv.LimitAccountStore(t, 1<<10) // under what is stored: the renewal's few bytes fit no more
	_, err = st.Renew(ctx, kvlease.RenewRequest{Name: "first", Holder: "h", Token: first.Token, Revision: first.Revision, Duration: time.Minute})
	if !errors.Is(err, kvlease.ErrStoreFull) || !errors.Is(err, kvlease.ErrUnavailable) {
		t.Fatalf("renewal past the account's limit: %v, want ErrStoreFull and ErrUnavailable", err)
	}
	srv.LimitAccountStore(t, -1)
	if _, err := st.Renew(ctx, kvlease.RenewRequest{Name: "first", Holder: "h", Token: first.Token, Revision: first.Revision, Duration: time.Minute}); err != nil {
		t.Errorf("renewal once the limit is raised: %v", err)
	}
}

// grantUntilFull grants leases of 1 KiB of attributes on st until one is
// refused, which must be for a full store (ErrStoreFull, with
// ErrUnavailable), within 1000 grants; where says where the store is full.
func grantUntilFull(t *testing.T, st *kvlease.Store, where string) {
	t.Helper()
	pad := map[string]string{"pad": strings.Repeat("x", 1000)}
	for i := range 1000 {
		_, err := st.Grant(t.Context(), kvlease.GrantRequest{Name: fmt.Sprintf("fill.%d", i), Holder: "h", Duration: time.Minute, Attributes: pad})
		if err == nil {
			continue
		}
		if !errors.Is(err, kvlease.ErrStoreFull) || !errors.Is(err, kvlease.ErrUnavailable) {
			t.Fatalf("grant %d %s: %v, want ErrStoreFull and ErrUnavailable", i, where, err)
		}
		return
	}
	t.Fatalf("1000 grants of 1 KiB %s, and none refused", where)
}

// StorageFull goes by the order the answers came in: a refusal for the
// storage limit answered before an acceptance, whose writer notes it after
// (scheduled late), is not what it says. It said the storage full, and
// serve's /healthz 503 for a minute on a node whose writes were accepted
// since, if none came after (found in review).
func TestStorageFullGoesByTheAnswersOrder(t *testing.T) {
	srv := kvleasetest.NewServer(t)
	st := kvleasetest.OpenStore(t, srv.ClientURL())
	ctx := t.Context()
	var recs []kvlease.Record
	for _, name := range []string{"refused", "accepted"} {
		rec, err := st.Grant(ctx, kvlease.GrantRequest{Name: name, Holder: "h", Duration: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, rec)
	}
	renew := func(r kvlease.Record) error {
		_, err := st.Renew(ctx, kvlease.RenewRequest{Name: r.Name, Holder: "h", Token: r.Token, Revision: r.Revision, Duration: time.Minute})
		return err
	}
	refused, resume := make(chan struct{}), make(chan struct{})
	var once sync.Once
	kvlease.SetWroteHook(st, func(err error) {
		if errors.Is(err, kvlease.ErrStoreFull) {
			once.Do(func() { close(refused); <-resume })
		}
	})
	srv.LimitAccountStore(t, 1) // under what is stored: nothing more fits
	done := make(chan error, 1)
	go func() { done <- renew(recs[0]) }()
	select {
	case <-refused:
	case err := <-done:
		t.Fatalf("renewal past the account's storage limit: %v, want ErrStoreFull", err)
	}
	srv.LimitAccountStore(t, -1)
	if err := renew(recs[1]); err != nil {
		t.Fatalf("renewal once the limit is lifted: %v", err)
	}
	close(resume)
	if err := <-done; !errors.Is(err, kvlease.ErrStoreFull) {
		t.Fatalf("renewal past the account's storage limit: %v, want ErrStoreFull", err)
	}
	if full := st.StorageFull(); !full.IsZero() {
		t.Errorf("StorageFull after a refusal answered before an acceptance: %v ago, want none", time.Since(full))
	}
}
