package cli

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leased/leased/grantor/history"
	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/kvleasetest"
)

// unreadyJS answers its first KeyValue calls as a cluster whose JetStream
// has no metadata leader yet does: no answer.
type unreadyJS struct {
	jetstream.JetStream
	unanswered atomic.Int32
}

func (j *unreadyJS) KeyValue(ctx context.Context, bucket string) (jetstream.KeyValue, error) {
	if j.unanswered.Add(-1) >= 0 {
		return nil, nats.ErrTimeout
	}
	return j.JetStream.KeyValue(ctx, bucket)
}

// A lease bucket serve makes anew under its history begins above the
// history's last record even when JetStream does not answer at first, as
// a cluster's does while it starts (all its serves started at once): the
// history was read once, before serve waited for JetStream, and a failed
// read was taken for "no history", the new bucket's tokens beginning at 1
// again below those the history recorded (found in review).
func TestServeMakesABucketAnewAboveItsHistoryWhileJetStreamStarts(t *testing.T) {
	srv := kvleasetest.NewServer(t)
	js := kvleasetest.JetStream(t, kvleasetest.Connect(t, srv.ClientURL()))
	h, err := history.Open(t.Context(), js, kvlease.DefaultBucket, history.Options{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Append(t.Context(), history.Record{Kind: history.KindGranted, Name: "old.x", Holder: "h", Token: 1000,
		Revision: 1000, Time: time.Now()}); err != nil {
		t.Fatal(err)
	}
	unready := &unreadyJS{JetStream: js}
	unready.unanswered.Store(1)
	f := &serveFlags{bucket: kvlease.DefaultBucket}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	st, err := f.openStore(ctx, unready, slog.New(slog.DiscardHandler), kvlease.WithBucket(f.bucket))
	if err != nil {
		t.Fatal(err)
	}
	rec, err := st.Grant(t.Context(), kvlease.GrantRequest{Name: "new.y", Holder: "h", Duration: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if rec.Token <= 1000 {
		t.Fatalf("the bucket made anew granted token %d, not above its history's 1000", rec.Token)
	}
}
