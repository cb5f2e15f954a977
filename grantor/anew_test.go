package grantor_test

import (
	"errors"
	"testing"
	"time"

	"github.com/leased/leased/grantor"
	"github.com/leased/leased/grantor/history"
	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/kvleasetest"
)

// A bucket made anew under its history by another program (tokens from 1
// again, below the history's last record): the observer still records
// the new tenures. It took the history's last revision as reported and
// left out every tenure below it.
func TestObserverRecordsABucketMadeAnewBelowItsHistory(t *testing.T) {
	srv := kvleasetest.NewServer(t)
	nc := kvleasetest.Connect(t, srv.ClientURL())
	begunInHistory(t, nc, kvlease.Record{Name: "old.x", Holder: "h", Token: 1000, Revision: 1000,
		Duration: time.Minute, GrantedAt: time.Now().Add(-time.Hour)})
	f := startOnConn(t, nc, grantor.DefaultConfig())
	rec, err := f.store.Grant(t.Context(), kvlease.GrantRequest{Name: "new.y", Holder: "h", Duration: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if rec.Token >= 1000 {
		t.Fatalf("token %d: the bucket did not begin below its history", rec.Token)
	}
	h, err := history.Open(t.Context(), kvleasetest.JetStream(t, nc), kvlease.DefaultBucket, history.Options{})
	if err != nil {
		t.Fatal(err)
	}
	recordsThrough(t, h, "new.", func(r history.Record) bool {
		return r.Kind == history.KindGranted && r.Token == uint64(rec.Token)
	})
	// The old bucket's tenure ended with it: it showed held for the
	// history's whole retention.
	recordsThrough(t, h, "old.", func(r history.Record) bool {
		return r.Kind == history.KindEnded && r.Token == 1000 && r.EndedBy == history.EndUnknown &&
			r.Reason == history.BucketGoneReason
	})
}

// A grantor whose bucket is deleted and stays missing must be stopped, as
// one whose bucket is made anew is: its watch of the bucket ends (the
// stream gone), and with it the holder index (per-holder limits, lists
// and counts) and the observer's feed, for good. It ran on, answering
// every list "unavailable", and when a restarted node made the bucket
// anew it still served it with the old bucket's index (found deleting the
// bucket under a cluster and restarting one node, as README says).
func TestServiceFailsWhenItsBucketIsDeleted(t *testing.T) {
	f := start(t, grantor.DefaultConfig())
	if _, err := f.store.Grant(t.Context(), kvlease.GrantRequest{Name: "gone.a", Holder: "h", Duration: time.Minute}); err != nil {
		t.Fatal(err)
	}
	js := kvleasetest.JetStream(t, kvleasetest.Connect(t, f.url))
	if err := js.DeleteKeyValue(t.Context(), kvlease.DefaultBucket); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-f.svc.Failed():
		if !errors.Is(err, kvlease.ErrUnavailable) {
			t.Fatalf("Failed: %v, want kvlease.ErrUnavailable (the bucket gone)", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the service's bucket was deleted 30 s ago and Failed delivered nothing")
	}
}
