package kvleasetest

import (
	"testing"
	"time"

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
