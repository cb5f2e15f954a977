package kvcas_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/internal/kvcas"
	"github.com/leased/leased/kvlease/kvleasetest"
)

type counter struct {
	N int `json:"n"`
}

func newDoc(t *testing.T) kvcas.Doc[counter] {
	t.Helper()
	s := kvleasetest.NewServer(t)
	js := kvleasetest.JetStream(t, kvleasetest.Connect(t, s.ClientURL()))
	kv, err := js.CreateKeyValue(t.Context(), jetstream.KeyValueConfig{Bucket: "docs", History: 1})
	if err != nil {
		t.Fatal(err)
	}
	return kvcas.Doc[counter]{KV: kv, JS: js, ReadOp: "read doc", WriteOp: "write doc", Corrupt: "test: doc"}
}

// Writers that race on one key each land exactly once: a lost
// compare-and-set is decided again on the winner's document.
func TestUpdateRetriesLostCompareAndSet(t *testing.T) {
	d := newDoc(t)
	ctx := t.Context()
	const writers, each = 8, 5
	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() {
			for range each {
				if err := d.Update(ctx, "k", func(c counter) (counter, error) { c.N++; return c, nil }); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	got, rev, err := d.Get(ctx, "k")
	if err != nil || got.N != writers*each || rev == 0 {
		t.Fatalf("Get = %+v at %d, %v; want n = %d", got, rev, err, writers*each)
	}
}

// decide sees the zero document for a missing key; its error writes
// nothing; a value that is not JSON is reported, not overwritten.
func TestUpdateDecideAndCorrupt(t *testing.T) {
	d := newDoc(t)
	ctx := t.Context()
	if got, rev, err := d.Get(ctx, "k"); err != nil || rev != 0 || got != (counter{}) {
		t.Fatalf("Get of a missing key = %+v at %d, %v", got, rev, err)
	}
	refused := errors.New("refused")
	if err := d.Update(ctx, "k", func(counter) (counter, error) { return counter{N: 1}, refused }); err != refused {
		t.Fatalf("Update = %v, want decide's error", err)
	}
	if _, rev, _ := d.Get(ctx, "k"); rev != 0 {
		t.Fatalf("decide's error wrote revision %d", rev)
	}
	if err := d.Update(ctx, "k", func(c counter) (counter, error) {
		if c != (counter{}) {
			t.Errorf("decide saw %+v for a missing key", c)
		}
		return counter{N: 1}, nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.KV.Put(ctx, "bad", []byte("{")); err != nil {
		t.Fatal(err)
	}
	called := false
	err := d.Update(ctx, "bad", func(c counter) (counter, error) { called = true; return c, nil })
	if !errors.Is(err, kvlease.ErrBucket) || called {
		t.Fatalf("Update of a corrupt document = %v (decide called: %v), want ErrBucket before decide", err, called)
	}
	var syntax *json.SyntaxError
	if _, _, err := d.Get(ctx, "bad"); !errors.Is(err, kvlease.ErrBucket) || !errors.As(err, &syntax) {
		t.Fatalf("Get of a corrupt document = %v, want ErrBucket with the decoder's error", err)
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if err := d.Update(canceled, "k", func(c counter) (counter, error) { return c, nil }); !errors.Is(err, kvlease.ErrUnavailable) {
		t.Fatalf("Update with ctx ended = %v, want ErrUnavailable", err)
	}
}

// A key that was deleted is written over its delete marker by revision:
// a create there is checked by nats.go with a direct get, which a lagging
// R3 replica answers with the deleted value, and Update tried again until
// it caught up (found in review). The write reads no replica, and Get says
// the key has no document until then.
func TestUpdateOverADeletedKey(t *testing.T) {
	d := newDoc(t)
	ctx := t.Context()
	if err := d.Update(ctx, "k", func(c counter) (counter, error) { c.N = 7; return c, nil }); err != nil {
		t.Fatal(err)
	}
	if err := d.KV.Delete(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if got, rev, err := d.Get(ctx, "k"); err != nil || rev != 0 || got != (counter{}) {
		t.Fatalf("Get of a deleted key = %+v at %d, %v; want none", got, rev, err)
	}
	var direct atomic.Int64
	kvleasetest.Subscribe(t, d.JS.Conn(), "$JS.API.DIRECT.GET.>", func(*nats.Msg) { direct.Add(1) })
	if err := d.Update(ctx, "k", func(c counter) (counter, error) {
		if c != (counter{}) {
			t.Errorf("decide saw %+v over the delete marker; want the zero document", c)
		}
		c.N = 1
		return c, nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := d.JS.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	if got, _, err := d.Get(ctx, "k"); err != nil || got.N != 1 || direct.Load() != 0 {
		t.Fatalf("after the write over the marker: %+v, %v, %d direct gets; want n = 1 and none", got, err, direct.Load())
	}
}
