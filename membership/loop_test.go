package membership

import (
	"testing"
	"testing/synctest"
	"time"
)

// TestEvaluatorLoop runs the Node's evaluator, event dispatcher and
// delegates without memberlist, in a synctest bubble: time is fake, so the
// timings are exact. A peer heartbeats every 100 ms, falls silent, and comes
// back.
func TestEvaluatorLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, err := newNode(TestConfig("a"))
		if err != nil {
			t.Fatal(err)
		}
		n.wg.Add(2)
		go func() { defer n.wg.Done(); n.queue.run(n.events, n.stop) }()
		go n.evaluateLoop(n.cfg.HeartbeatInterval / 2)
		d := &delegates{n: n}

		start := time.Now()
		d.NotifyJoin(node("a", 100*ms, nil)) // the local node: no event
		d.NotifyJoin(node("b", 100*ms, map[string]string{"role": "grantor"}))
		if e := <-n.events; e.Type != EventJoin || e.Member.Name != "b" || !e.Time.Equal(start) {
			t.Fatalf("first event %+v", e)
		}

		// Heartbeats from b for 2 s, then 1 s of silence, then again.
		var seq uint64
		beat := func(until time.Duration) {
			for time.Since(start) < until {
				time.Sleep(100 * ms)
				seq++
				d.NotifyMsg(encodeHeartbeat("b", 99, seq))
			}
		}
		go func() {
			beat(2 * time.Second)
			time.Sleep(time.Second)
			beat(4 * time.Second)
		}()

		sus := <-n.events
		if sus.Type != EventSuspect || sus.Member.State != StateSuspect || sus.Member.Suspicion < DefaultPhiThreshold {
			t.Fatalf("second event %+v", sus)
		}
		// Last heartbeat at 2 s; suspect at the first evaluation 380.6 ms
		// or more later.
		if got := sus.Time.Sub(start); got != 2400*ms {
			t.Errorf("suspect at %v, want 2.4s", got)
		}
		if got := sus.Member.LastHeard.Sub(start); got != 2*time.Second {
			t.Errorf("last heard at %v, want 2s", got)
		}
		if m, _ := n.Member("b"); m.State != StateSuspect {
			t.Errorf("Member(b) = %+v", m)
		}

		rec := <-n.events
		if rec.Type != EventRecover || rec.Member.State != StateAlive {
			t.Fatalf("third event %+v", rec)
		}
		if got := rec.Time.Sub(start); got != 3100*ms { // the first heartbeat after the silence
			t.Errorf("recovered at %v, want 3.1s", got)
		}

		// Heartbeats stop for good at 4 s. The 1.1 s gap is now part of the
		// history (mean 134 ms, stddev 182 ms over 29 intervals), so the
		// detector has become more lenient: suspect after 1.2 s of silence.
		again := <-n.events
		if again.Type != EventSuspect {
			t.Fatalf("fourth event %+v", again)
		}
		if got := again.Time.Sub(start); got != 5200*ms {
			t.Errorf("suspect again at %v, want 5.2s", got)
		}
		synctest.Wait()
		select {
		case e := <-n.events:
			t.Errorf("unexpected %+v at %v", e, e.Time.Sub(start))
		default:
		}
		close(n.stop)
		n.wg.Wait()
		if _, ok := <-n.events; ok {
			t.Error("events channel open after stop")
		}
	})
}
