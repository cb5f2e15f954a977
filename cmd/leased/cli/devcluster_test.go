package cli

import (
	"testing"
	"time"
)

// dev-cluster --restart backs off from 1 s, doubling to 30 s, while a node
// keeps dying within a minute, and starts again from 1 s after a long run.
func TestRestartBackoff(t *testing.T) {
	for _, tc := range []struct {
		fails int
		want  time.Duration
	}{
		{1, time.Second}, {2, 2 * time.Second}, {3, 4 * time.Second}, {4, 8 * time.Second},
		{5, 16 * time.Second}, {6, 30 * time.Second}, {60, 30 * time.Second},
	} {
		if got := restartDelay(tc.fails); got != tc.want {
			t.Errorf("restartDelay(%d) = %v, want %v", tc.fails, got, tc.want)
		}
	}
	for _, tc := range []struct {
		name  string
		fails int
		ran   time.Duration
		want  int
	}{
		{"first death, early", 0, time.Second, 1},
		{"first death, late", 0, time.Hour, 0},
		{"again, early", 3, 10 * time.Second, 4},
		{"after a long run", 4, restartStable, 0},
	} {
		if got := nextFails(tc.fails, tc.ran); got != tc.want {
			t.Errorf("%s: nextFails(%d, %v) = %d, want %d", tc.name, tc.fails, tc.ran, got, tc.want)
		}
	}
}

// A node of an embedded cluster waits for its JetStream as long as its
// peers take to come up; a single node, or one on a NATS of --nats-url,
// gives up after natsWaitLimit.
func TestJetStreamWaitLimit(t *testing.T) {
	for _, c := range []struct {
		name     string
		f        serveFlags
		embedded bool
		want     time.Duration
	}{
		{"one node", serveFlags{}, true, natsWaitLimit},
		{"a node of a cluster", serveFlags{clusterName: "leased"}, true, 0},
		{"on a NATS of --nats-url", serveFlags{natsURL: "nats://a:4222"}, false, natsWaitLimit},
	} {
		if got := c.f.jetStreamWaitLimit(c.embedded); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
