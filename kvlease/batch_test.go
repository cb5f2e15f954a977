package kvlease_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/kvleasetest"
)

// sendLog records what a store's group commit sends (kvlease.SetSendHook).
type sendLog struct {
	mu      sync.Mutex
	batches [][]string
	singles []string
	// hold, if set, is called before the first send, and may block it.
	hold func()
}

func (l *sendLog) hook(batch bool, names []string) {
	l.mu.Lock()
	hold := l.hold
	l.hold = nil
	if batch {
		l.batches = append(l.batches, names)
	} else {
		l.singles = append(l.singles, names...)
	}
	l.mu.Unlock()
	if hold != nil {
		hold()
	}
}

func (l *sendLog) sent(name string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, b := range l.batches {
		for _, n := range b {
			if n == name {
				return true
			}
		}
	}
	for _, n := range l.singles {
		if n == name {
			return true
		}
	}
	return false
}

func (l *sendLog) batchCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.batches)
}

// holdUntilQueued returns a hold that keeps the first write from going out
// until n requests wait behind it, so that they go out together next. It
// closes holding when the hold begins. It sets st's queue hook.
func holdUntilQueued(t *testing.T, st *kvlease.Store, n int, holding chan struct{}) func() {
	enough := make(chan struct{})
	var once sync.Once
	kvlease.SetQueueHook(st, func(queued int) {
		if queued >= n {
			once.Do(func() { close(enough) })
		}
	})
	return func() {
		if holding != nil {
			close(holding)
		}
		select {
		case <-enough:
		case <-time.After(10 * time.Second):
			t.Errorf("only %d requests queued, want %d", kvlease.QueueLen(st), n)
		}
	}
}

// hookWithBatchSignal makes log record st's sends, and returns a channel
// closed as the first atomic batch goes out.
func hookWithBatchSignal(st *kvlease.Store, log *sendLog) <-chan struct{} {
	batchSent := make(chan struct{})
	var once sync.Once
	kvlease.SetSendHook(st, func(batch bool, names []string) {
		log.hook(batch, names)
		if batch {
			once.Do(func() { close(batchSent) })
		}
	})
	return batchSent
}

// forcedBatching batches from 2 messages, one write in flight.
func forcedBatching() kvlease.Option {
	return kvlease.WithBatchLimits(kvlease.BatchLimits{Enabled: true, MinMessages: 2, MaxMessages: 1000,
		MaxInFlight: 1, Timeout: 5 * time.Second})
}

// Concurrent grants, renewals and releases go out as atomic batches;
// every revision a caller is given is the one the server stored for its
// key, and each release's tombstone rolls up its tenure.
func TestBatchRevisionsAreStored(t *testing.T) {
	t.Run("R1", func(t *testing.T) { testBatchRevisions(t, kvleasetest.NewServer(t).ClientURL(), 1) })
	// On R3 a batch is one raft proposal, and the server refuses (10164) a
	// key with another write in flight: the store never sends one.
	t.Run("R3", func(t *testing.T) { testBatchRevisions(t, kvleasetest.NewCluster(t, 3)[0].ClientURL(), 3) })
}

func testBatchRevisions(t *testing.T, url string, replicas int) {
	st := kvleasetest.OpenStore(t, url, forcedBatching(), kvlease.WithReplicas(replicas))
	js := kvleasetest.JetStream(t, kvleasetest.Connect(t, url))
	stream, err := js.Stream(t.Context(), "KV_"+kvlease.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	// stream's reads are direct gets, which an R3 follower may serve
	// behind: there the store's own reads (through the leader) decide.
	direct := replicas == 1
	log := &sendLog{}
	kvlease.SetSendHook(st, log.hook)
	const n = 50
	recs := make([]kvlease.Record, n)
	run := func(op func(i int) (kvlease.Record, error)) {
		t.Helper()
		log.mu.Lock()
		log.hold = holdUntilQueued(t, st, n-1, nil)
		log.mu.Unlock()
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { recs[i], errs[i] = op(i) })
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		for i, rec := range recs {
			if direct {
				m, err := stream.GetMsg(t.Context(), rec.Revision)
				if err != nil || m.Subject != "$KV."+kvlease.DefaultBucket+"."+rec.Name {
					t.Fatalf("record %d %q at revision %d: stored %v, %v", i, rec.Name, rec.Revision, m, err)
				}
			}
			got, err := st.Get(t.Context(), rec.Name)
			if err != nil || got.Revision != rec.Revision || got.Token != rec.Token || got.TTL != rec.TTL {
				t.Fatalf("get %q = %+v, %v; want revision %d token %d", rec.Name, got, err, rec.Revision, rec.Token)
			}
		}
	}
	run(func(i int) (kvlease.Record, error) {
		return st.Grant(t.Context(), kvlease.GrantRequest{Name: fmt.Sprintf("b.%d", i), Holder: "h", Duration: 20 * time.Second})
	})
	run(func(i int) (kvlease.Record, error) {
		r := recs[i]
		return st.Renew(t.Context(), kvlease.RenewRequest{Name: r.Name, Holder: r.Holder, Token: r.Token, Revision: r.Revision})
	})
	// Releases in one batch: each tombstone rolls up its key's tenure.
	log.mu.Lock()
	log.hold = holdUntilQueued(t, st, n-1, nil)
	log.mu.Unlock()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		r := recs[i]
		wg.Go(func() {
			errs[i] = st.Release(t.Context(), kvlease.ReleaseRequest{Name: r.Name, Holder: r.Holder, Token: r.Token, Revision: r.Revision})
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if _, err := st.Get(t.Context(), r.Name); !errors.Is(err, kvlease.ErrNotFound) {
			t.Fatalf("%q after release: %v, want ErrNotFound", r.Name, err)
		}
		if !direct {
			continue
		}
		if _, err := stream.GetMsg(t.Context(), r.Revision); err == nil {
			t.Fatalf("%q: revision %d is still stored after the release's rollup", r.Name, r.Revision)
		}
		m, err := stream.GetLastMsgForSubject(t.Context(), "$KV."+kvlease.DefaultBucket+"."+r.Name)
		if err != nil || m.Header.Get("KV-Operation") != "PURGE" {
			t.Fatalf("%q: last message %v, %v; want its release tombstone", r.Name, m, err)
		}
	}
	if c := log.batchCount(); c < 3 {
		t.Fatalf("%d batches sent, want at least one each for the grants, renewals and releases", c)
	}
	log.mu.Lock()
	for _, b := range log.batches {
		if len(b) != n-1 {
			t.Errorf("a batch of %d, want %d (all that queued)", len(b), n-1)
		}
	}
	log.mu.Unlock()
}

// One request whose expectation fails (a renewal of a revision another
// store has replaced) rejects the whole batch at the server; the store
// then finds each request its own answer. Requests the store knows to be
// stale (a grant of a lease it granted) never go into a batch.
func TestBatchIsolation(t *testing.T) {
	srv := kvleasetest.NewServer(t)
	st := kvleasetest.OpenStore(t, srv.ClientURL(), forcedBatching())
	other := kvleasetest.OpenStore(t, srv.ClientURL(), kvlease.WithoutBatching())
	ctx := t.Context()
	const n = 40
	recs := make([]kvlease.Record, n)
	for i := range recs {
		var err error
		if recs[i], err = st.Grant(ctx, kvlease.GrantRequest{Name: fmt.Sprintf("iso.%d", i), Holder: "h", Duration: 20 * time.Second}); err != nil {
			t.Fatal(err)
		}
	}
	// Another store renews iso.7: st still has the old revision.
	moved, err := other.Renew(ctx, kvlease.RenewRequest{Name: "iso.7", Holder: "h", Token: recs[7].Token, Revision: recs[7].Revision})
	if err != nil {
		t.Fatal(err)
	}

	log := &sendLog{}
	kvlease.SetSendHook(st, log.hook)
	// iso.0's renewal goes out alone and is held until the other n−1 and a
	// grant queue behind it.
	holding := make(chan struct{})
	log.hold = holdUntilQueued(t, st, n, holding)
	errs := make([]error, n)
	got := make([]kvlease.Record, n)
	var grantErr error
	var wg sync.WaitGroup
	for i := range n {
		if i == 1 {
			<-holding
		}
		wg.Go(func() {
			r := recs[i]
			got[i], errs[i] = st.Renew(ctx, kvlease.RenewRequest{Name: r.Name, Holder: r.Holder, Token: r.Token, Revision: r.Revision})
		})
	}
	wg.Go(func() {
		_, grantErr = st.Grant(ctx, kvlease.GrantRequest{Name: "iso.3", Holder: "thief", Duration: 20 * time.Second})
	})
	wg.Wait()

	var stale *kvlease.StaleRevisionError
	for i := range n {
		switch {
		case i == 7:
			if !errors.As(errs[i], &stale) || stale.Revision != moved.Revision {
				t.Errorf("stale renewal of iso.7: %v, want StaleRevisionError at %d", errs[i], moved.Revision)
			}
		case errs[i] != nil:
			t.Errorf("renewal of iso.%d failed because of another: %v", i, errs[i])
		default:
			cur, err := st.Get(ctx, got[i].Name)
			if err != nil || cur.Revision != got[i].Revision {
				t.Errorf("iso.%d renewed to %d, stored %+v, %v", i, got[i].Revision, cur, err)
			}
		}
	}
	var held *kvlease.HeldError
	if !errors.As(grantErr, &held) || held.Holder != "h" {
		t.Errorf("grant of a held lease: %v, want HeldError by h", grantErr)
	}
	if log.batchCount() < 2 {
		t.Errorf("%d batches: want the rejected one and the retries after it", log.batchCount())
	}
	log.mu.Lock()
	var sizes []int
	for _, b := range log.batches {
		sizes = append(sizes, len(b))
	}
	t.Logf("batches of %v, %d single publishes", sizes, len(log.singles))
	for _, b := range log.batches {
		seen := map[string]bool{}
		for _, name := range b {
			if seen[name] {
				t.Errorf("%q twice in one batch", name)
			}
			seen[name] = true
		}
	}
	log.mu.Unlock()
}

// A renewal queued behind a slow batch whose context ends (the holder's
// deadline) before its turn is never sent: the lease keeps the revision
// it had, and no write of it leaves the store.
func TestQueuedRenewalPastDeadlineIsNotSent(t *testing.T) {
	srv := kvleasetest.NewServer(t)
	proxy := kvleasetest.NewProxy(t, srv.Addr())
	st := kvleasetest.OpenStore(t, proxy.URL(), kvlease.WithBatchLimits(kvlease.BatchLimits{Enabled: true,
		MinMessages: 2, MaxMessages: 1000, MaxInFlight: 1, Timeout: 2 * time.Second}))
	direct := kvleasetest.OpenStore(t, srv.ClientURL(), kvlease.WithoutBatching())
	ctx := t.Context()
	rec, err := st.Grant(ctx, kvlease.GrantRequest{Name: "held", Holder: "h", Duration: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}

	const n = 10
	log := &sendLog{}
	holding := make(chan struct{})
	log.hold = holdUntilQueued(t, st, n-1, holding)
	batchSent := hookWithBatchSignal(st, log)
	proxy.Cut()
	// The first grant goes out alone into the cut and times out; the nine
	// queued behind it go out as a batch, which hangs until its timeout.
	var wg sync.WaitGroup
	for i := range n {
		if i == 1 {
			<-holding
		}
		wg.Go(func() {
			d := 5 * time.Second
			if i == 0 {
				d = 500 * time.Millisecond
			}
			gctx, cancel := context.WithTimeout(ctx, d)
			defer cancel()
			if _, err := st.Grant(gctx, kvlease.GrantRequest{Name: fmt.Sprintf("slow.%d", i), Holder: "h", Duration: 20 * time.Second}); !errors.Is(err, kvlease.ErrUnavailable) {
				t.Errorf("grant into a partition: %v, want ErrUnavailable", err)
			}
		})
	}
	select {
	case <-batchSent:
	case <-time.After(10 * time.Second):
		t.Fatal("no batch went out")
	}
	rctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err = st.Renew(rctx, kvlease.RenewRequest{Name: "held", Holder: "h", Token: rec.Token, Revision: rec.Revision})
	cancel()
	if !errors.Is(err, kvlease.ErrUnavailable) {
		t.Fatalf("renewal past its deadline: %v, want ErrUnavailable", err)
	}
	proxy.Heal()
	wg.Wait()
	kvlease.WaitWrites(st) // the batch's timeout, then the queue is taken
	if log.sent("held") {
		t.Fatal("the renewal was sent after its context ended")
	}
	cur, err := direct.Get(ctx, "held")
	if err != nil || cur.Revision != rec.Revision {
		t.Fatalf("held = %+v, %v; want still at revision %d", cur, err, rec.Revision)
	}
}

// Open allows atomic batches on a bucket it creates, and on an existing
// bucket that lacks them (keeping its entries and revisions); without
// batching it leaves an existing bucket as it is.
func TestOpenAllowsAtomicPublish(t *testing.T) {
	srv := kvleasetest.NewServer(t)
	js := kvleasetest.JetStream(t, kvleasetest.Connect(t, srv.ClientURL()))
	ctx := t.Context()
	allowed := func(bucket string) bool {
		t.Helper()
		s, err := js.Stream(ctx, "KV_"+bucket)
		if err != nil {
			t.Fatal(err)
		}
		return s.CachedInfo().Config.AllowAtomicPublish
	}

	kvleasetest.OpenStore(t, srv.ClientURL(), kvlease.WithBucket("fresh"))
	if !allowed("fresh") {
		t.Error("a new bucket does not allow atomic publish")
	}
	kvleasetest.OpenStore(t, srv.ClientURL(), kvlease.WithBucket("fresh-unbatched"), kvlease.WithoutBatching())
	if !allowed("fresh-unbatched") {
		t.Error("a new bucket opened without batching does not allow atomic publish (a later store could not batch)")
	}

	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "old", History: 1, LimitMarkerTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	rev, err := kv.Put(ctx, "keep", []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	kvleasetest.OpenStore(t, srv.ClientURL(), kvlease.WithBucket("old"), kvlease.WithoutBatching())
	if allowed("old") {
		t.Error("opening without batching changed an existing bucket")
	}
	kvleasetest.OpenStore(t, srv.ClientURL(), kvlease.WithBucket("old"))
	if !allowed("old") {
		t.Error("an existing bucket was not updated to allow atomic publish")
	}
	if e, err := kv.Get(ctx, "keep"); err != nil || e.Revision() != rev {
		t.Fatalf("entry after the update: %v, %v; want revision %d kept", e, err, rev)
	}
}

// What the store is sure of can be undone by another store: it granted a
// lease (sure the key has a message for the TTL), another store released
// it, and the release's tombstone lapsed (marker TTL 1 s), leaving the key
// empty. A grant must then not be screened as stale: it succeeds.
func TestGrantAfterAnotherStoreEmptiedTheKey(t *testing.T) {
	srv := kvleasetest.NewServer(t)
	st := kvleasetest.OpenStore(t, srv.ClientURL(), kvlease.WithMarkerTTL(time.Second))
	other := kvleasetest.OpenStore(t, srv.ClientURL(), kvlease.WithMarkerTTL(time.Second), kvlease.WithoutBatching())
	ctx := t.Context()
	rec, err := st.Grant(ctx, kvlease.GrantRequest{Name: "k", Holder: "h", Duration: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Release(ctx, kvlease.ReleaseRequest{Name: "k", Holder: "h", Token: rec.Token, Revision: rec.Revision}); err != nil {
		t.Fatal(err)
	}
	js := kvleasetest.JetStream(t, kvleasetest.Connect(t, srv.ClientURL()))
	stream, err := js.Stream(ctx, "KV_"+kvlease.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	// The tombstone lapses (1 s), then the marker that replaces it (1 s).
	deadline := time.Now().Add(15 * time.Second)
	for {
		_, err := stream.GetLastMsgForSubject(ctx, "$KV."+kvlease.DefaultBucket+".k")
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if time.Now().After(deadline) {
			m, _ := stream.GetLastMsgForSubject(ctx, "$KV."+kvlease.DefaultBucket+".k")
			t.Fatalf("key k not empty after 15 s: %v %+v", err, m)
		}
		time.Sleep(50 * time.Millisecond) // the server's expiry has no event for an emptied key
	}
	next, err := st.Grant(ctx, kvlease.GrantRequest{Name: "k", Holder: "h2", Duration: 5 * time.Second})
	if err != nil || next.Token <= rec.Token {
		t.Fatalf("grant of the emptied key: %+v, %v; want a new tenure above %d", next, err, rec.Token)
	}
}

// Below the break-even, queued requests go out as single publishes whose
// answers the write slot does not wait for: a request that comes while
// one of them is still unanswered goes out at once. When the slot waited
// for a whole group of singles, the server sat idle between groups, and
// 16 callers wrote slower than without batching (0.87-0.90 of raw writes
// against 0.94-0.96). Here one of a group is held before it is sent; a
// later request must be answered meanwhile.
func TestSinglesDoNotHoldTheSlot(t *testing.T) {
	st := kvleasetest.OpenStore(t, kvleasetest.NewServer(t).ClientURL(),
		kvlease.WithBatchLimits(kvlease.BatchLimits{Enabled: true, MinMessages: 1000, MaxMessages: 1000,
			MaxInFlight: 1, Timeout: 5 * time.Second}))
	holdFirst := holdUntilQueued(t, st, 3, nil)
	slowHeld, release := make(chan struct{}), make(chan struct{})
	firstSent := make(chan struct{})
	kvlease.SetSendHook(st, func(batch bool, names []string) {
		switch names[0] {
		case "first":
			close(firstSent)
			holdFirst()
		case "slow":
			close(slowHeld)
			<-release
		}
	})
	ctx := t.Context()
	var wg sync.WaitGroup
	grant := func(name string) {
		wg.Go(func() {
			if err := grantNamed(ctx, st, name); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		})
	}
	grant("first")
	<-firstSent
	for _, name := range []string{"slow", "x.1", "x.2"} {
		grant(name)
	}
	select {
	case <-slowHeld:
	case <-time.After(10 * time.Second):
		close(release)
		t.Fatal("the queued group did not go out")
	}
	late := make(chan error, 1)
	go func() { late <- grantNamed(ctx, st, "late") }()
	select {
	case err := <-late:
		if err != nil {
			t.Errorf("late: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("a request behind a group of singles waited for the group's last answer")
	}
	close(release)
	wg.Wait()
	kvlease.WaitWrites(st)
}

// Where batches do not form (a few callers: what queues behind a write
// stays below the break-even), queueing only costs: each queued request
// waited for the write ahead of it, and 4 to 16 callers wrote 10-15%
// slower than without batching (`leased bench --direct --compare`). After
// passThroughAfter such writes the store passes requests through as
// single publishes at once; with callers enough for a batch it queues
// again. Four callers here queue at most 4 requests (one each) for each
// of the 8 writes taken from the queue before the switch, and none after
// it (456 of 600 queued before passing through was built); 64 then make
// a batch.
func TestPassThroughWhereBatchesDoNotForm(t *testing.T) {
	st := kvleasetest.OpenStore(t, kvleasetest.NewServer(t).ClientURL())
	var queued atomic.Int64
	kvlease.SetQueueHook(st, func(int) { queued.Add(1) })
	batched := make(chan struct{})
	var once sync.Once
	kvlease.SetSendHook(st, func(batch bool, _ []string) {
		if batch {
			once.Do(func() { close(batched) })
		}
	})
	ctx := t.Context()
	loop := func(callers, each int, stop <-chan struct{}) {
		var wg sync.WaitGroup
		for c := range callers {
			wg.Go(func() {
				for i := 0; i < each; i++ {
					select {
					case <-stop:
						return
					default:
					}
					if err := grantNamed(ctx, st, fmt.Sprintf("c%d.%d.%d", callers, c, i)); err != nil {
						t.Errorf("caller %d: %v", c, err)
						return
					}
				}
			})
		}
		wg.Wait()
	}
	const callers, rounds = 4, 150
	loop(callers, rounds, nil)
	if n := queued.Load(); n > callers*kvlease.PassThroughAfter {
		t.Errorf("%d of %d requests from %d callers queued; want at most %d before requests pass through",
			n, callers*rounds, callers, callers*kvlease.PassThroughAfter)
	}
	select {
	case <-batched:
		t.Fatal("4 callers made a batch (the break-even is 24)")
	default:
	}
	done := make(chan struct{})
	go func() { defer close(done); loop(64, 1000, batched) }()
	select {
	case <-batched:
	case <-time.After(30 * time.Second):
		t.Error("64 callers made no batch in 30 s after the store had passed requests through")
	}
	<-done
}

// b's grant of k queues behind the batch that grants k to a; once that
// batch is answered b's grant is stale, but the cache learns of a's
// revision only when a's caller has its answer, after the key is free:
// the slot sent b's grant with the next batch, of unrelated x.*, and the
// server refused that whole batch (bisected, each got its answer, at the
// cost of three more writes). The writer now screens what its own writes
// made stale (found in review, 8 runs in 8).
func TestWriterScreensWhatItsWritesMadeStale(t *testing.T) {
	st := kvleasetest.OpenStore(t, kvleasetest.NewServer(t).ClientURL(), forcedBatching())
	ctx := t.Context()
	var mu sync.Mutex
	var batches [][]string
	stage := []chan struct{}{make(chan struct{}), make(chan struct{})}
	phase := 0
	kvlease.SetQueueHook(st, func(n int) {
		mu.Lock()
		defer mu.Unlock()
		if (phase == 0 && n == 4) || (phase == 1 && n == 5) {
			close(stage[phase])
		}
	})
	zOut, batchOut := make(chan struct{}), make(chan struct{})
	kvlease.SetSendHook(st, func(batch bool, names []string) {
		mu.Lock()
		if batch {
			batches = append(batches, names)
		}
		n := len(batches)
		mu.Unlock()
		switch {
		case names[0] == "z": // alone, held until a and y.* queue
			close(zOut)
			<-stage[0]
		case batch && n == 1: // [a's k, y.*], held until b's k and x.* queue
			mu.Lock()
			phase = 1
			mu.Unlock()
			close(batchOut)
			<-stage[1]
		}
	})
	var wg sync.WaitGroup
	grant := func(name, holder string) {
		wg.Go(func() {
			_, err := st.Grant(ctx, kvlease.GrantRequest{Name: name, Holder: holder, Duration: 20 * time.Second})
			if (err != nil) != (holder == "b") {
				t.Errorf("%s by %s: %v", name, holder, err)
			}
		})
	}
	grant("z", "z")
	<-zOut
	grant("k", "a")
	for i := range 3 {
		grant(fmt.Sprintf("y.%d", i), "y")
	}
	<-batchOut
	grant("k", "b")
	for i := range 4 {
		grant(fmt.Sprintf("x.%d", i), "x")
	}
	wg.Wait()
	kvlease.WaitWrites(st)
	mu.Lock()
	defer mu.Unlock()
	if len(batches) != 2 {
		t.Errorf("batches %v: want [k y.*] then [x.*], the stale grant of k screened out", batches)
	}
}
