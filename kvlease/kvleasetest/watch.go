package kvleasetest

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leased/leased/kvlease"
)

// Watch starts a watch of the leases under prefix on st, waits until it
// has caught up ([kvlease.Watcher.Synced]), and stops it on cleanup. The
// replayed events stay in its channel.
func Watch(tb testing.TB, st *kvlease.Store, prefix string) *kvlease.Watcher {
	tb.Helper()
	w, err := st.Watch(tb.Context(), prefix)
	if err != nil {
		tb.Fatalf("watch: %v", err)
	}
	tb.Cleanup(w.Stop)
	<-w.Synced()
	return w
}

// NextEvent waits for the next event on w matching want (skipping others),
// failing the test after timeout or if the watcher ends.
func NextEvent(tb testing.TB, w *kvlease.Watcher, timeout time.Duration, want func(kvlease.Event) bool) kvlease.Event {
	tb.Helper()
	tm := time.NewTimer(timeout)
	defer tm.Stop()
	for {
		select {
		case ev, ok := <-w.Events():
			if !ok {
				tb.Fatalf("watcher closed: %v", w.Err())
			}
			if want(ev) {
				return ev
			}
		case <-tm.C:
			tb.Fatalf("no matching event within %v", timeout)
		}
	}
}

// OfType matches the events of type typ for the lease name, for
// [NextEvent].
func OfType(name string, typ kvlease.EventType) func(kvlease.Event) bool {
	return func(ev kvlease.Event) bool { return ev.Name == name && ev.Type == typ }
}

// WaitEmpty waits until lease name of st's default bucket has no message
// left (its expiry marker or tombstone lapsed by its own TTL), failing the
// test after timeout. The server says nothing when a marker lapses: it
// looks every 50 ms.
func WaitEmpty(tb testing.TB, st *kvlease.Store, name string, timeout time.Duration) {
	tb.Helper()
	stream, err := st.JetStream().Stream(tb.Context(), kvlease.StreamName(kvlease.DefaultBucket))
	if err != nil {
		tb.Fatal(err)
	}
	for deadline := time.Now().Add(timeout); ; time.Sleep(50 * time.Millisecond) {
		_, err := stream.GetLastMsgForSubject(tb.Context(), "$KV."+kvlease.DefaultBucket+"."+name)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("the last message of %s did not lapse within %v: %v", name, timeout, err)
		}
	}
}
