package grantor_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leased/leased/grantor"
	"github.com/leased/leased/grantor/history"
	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/kvleasetest"
)

// wholeBucketWatches counts the consumers of st's stream that watch the
// whole bucket.
func wholeBucketWatches(t *testing.T, st *kvlease.Store) int {
	t.Helper()
	stream, err := st.JetStream().Stream(t.Context(), "KV_"+st.Bucket())
	if err != nil {
		t.Fatal(err)
	}
	all := "$KV." + st.Bucket() + ".>"
	n := 0
	infos := stream.ListConsumers(t.Context())
	for ci := range infos.Info() {
		if ci.Config.FilterSubject == all || len(ci.Config.FilterSubjects) == 1 && ci.Config.FilterSubjects[0] == all {
			n++
		}
	}
	if err := infos.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}

// feedLog records the observer's moves onto and off the service's watch.
type feedLog struct {
	on   chan struct{} // one per move onto the feed
	cuts atomic.Int64
}

func newFeedLog() *feedLog { return &feedLog{on: make(chan struct{}, 1024)} }

func (l *feedLog) hook(on bool) {
	if on {
		l.on <- struct{}{}
	} else {
		l.cuts.Add(1)
	}
}

func (l *feedLog) waitOn(t *testing.T) {
	t.Helper()
	select {
	case <-l.on:
	case <-time.After(15 * time.Second):
		t.Fatal("the observer never moved to the service's watch")
	}
}

// An observing node watches the bucket once: once caught up, the observer
// follows the service's own watch (the holder index's) instead of one of
// its own, and still records every change.
func TestObserverSharesTheServiceWatch(t *testing.T) {
	srv := kvleasetest.NewServer(t)
	nc := kvleasetest.Connect(t, srv.ClientURL())
	deleted := kvleasetest.ConsumerDeletions(t, nc, "KV_"+kvlease.DefaultBucket)
	feed := newFeedLog()
	f := startOn(t, srv.ClientURL(), grantor.DefaultConfig(), grantor.WithFeedHook(0, feed.hook))
	ctx := t.Context()
	feed.waitOn(t)
	// The observer's watch is stopped as it moves; its consumer goes soon after.
	for n := wholeBucketWatches(t, f.store); n != 1; n = wholeBucketWatches(t, f.store) {
		select {
		case <-deleted:
		case <-time.After(10 * time.Second):
			t.Fatalf("%d watches of the whole bucket, want 1", n)
		}
	}
	rec, err := f.client.Grant(ctx, kvlease.GrantRequest{Name: "shared.a", Holder: "h", Duration: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.client.Release(ctx, kvlease.ReleaseRequest{Name: rec.Name, Holder: rec.Holder, Token: rec.Token,
		Revision: rec.Revision, Secret: rec.Secret}); err != nil {
		t.Fatal(err)
	}
	ts := history.Fold(waitRecords(t, f.svc.History(), "shared.", 2))
	if len(ts) != 1 || ts[0].Token != uint64(rec.Token) || ts[0].EndedBy != history.EndReleased {
		t.Errorf("tenures %+v, want the one granted, released", ts)
	}
	if c := feed.cuts.Load(); c != 0 {
		t.Errorf("%d cut-offs with nothing to fall behind on", c)
	}
}

// An observer the feed cuts off (here a buffer of one event, under bursts
// of batched writes) catches up on a watch of its own and moves back:
// every tenure still has its begin and its end in the history, once each.
func TestObserverCutOffLosesNothing(t *testing.T) {
	feed := newFeedLog()
	f := start(t, grantor.DefaultConfig(), grantor.WithFeedHook(1, feed.hook))
	ctx := t.Context()
	feed.waitOn(t)
	const n, workers = 300, 16
	recs := make([]kvlease.Record, n)
	each := func(op func(i int) error) {
		t.Helper()
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for w := range workers {
			wg.Go(func() {
				for i := w; i < n; i += workers {
					if err := op(i); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}
	// Grants, then releases: within each phase no entry replaces another,
	// so a watch that catches up late still finds every change.
	each(func(i int) (err error) {
		recs[i], err = f.client.Grant(ctx, kvlease.GrantRequest{Name: fmt.Sprintf("cut.%03d", i), Holder: "h",
			Duration: time.Minute})
		return err
	})
	waitRecords(t, f.svc.History(), "cut.", n)
	each(func(i int) error {
		r := recs[i]
		return f.client.Release(ctx, kvlease.ReleaseRequest{Name: r.Name, Holder: r.Holder, Token: r.Token,
			Revision: r.Revision, Secret: r.Secret})
	})
	all := waitRecords(t, f.svc.History(), "cut.", 2*n)
	if feed.cuts.Load() == 0 {
		t.Fatal("the feed never cut the observer off: nothing here tested catching up")
	}
	kinds := map[kvlease.Token][]string{}
	for _, r := range all {
		kinds[kvlease.Token(r.Token)] = append(kinds[kvlease.Token(r.Token)], r.Kind+"/"+r.EndedBy)
	}
	for _, r := range recs {
		if got := kinds[r.Token]; len(got) != 2 || got[0] != history.KindGranted+"/" || got[1] != history.KindEnded+"/"+history.EndReleased {
			t.Errorf("%s token %d: records %v, want granted then ended by release", r.Name, r.Token, got)
		}
	}
	t.Logf("%d cut-offs", feed.cuts.Load())
}
