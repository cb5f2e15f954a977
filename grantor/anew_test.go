package grantor_test

import (
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
}
