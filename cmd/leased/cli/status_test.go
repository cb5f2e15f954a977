package cli

import (
	"testing"
	"time"
)

// A follower the stream leader has not heard from is unreachable, whatever
// stale lag or "current" flag the leader still reports for it.
func TestPeerState(t *testing.T) {
	for _, tc := range []struct {
		name    string
		offline bool
		current bool
		lag     uint64
		active  time.Duration
		want    string
	}{
		{"live and current", false, true, 0, 800 * time.Millisecond, "current (seen 800ms ago)"},
		{"live and catching up", false, false, 5, 300 * time.Millisecond, "behind by 5 (seen 300ms ago)"},
		{"at the bound", false, false, 5, peerSeenWithin, "behind by 5 (seen 5s ago)"},
		// A new leader elected after the follower died never heard from it:
		// nats-server reports Active 0 and the lag of an index it never learned.
		{"dead, never seen by this leader", false, false, 5, 0, "unreachable (not seen by this leader)"},
		// The leader of the follower's last answer still counts it current
		// (no writes since) until nats-server's own 10 s.
		{"dead, still flagged current", false, true, 0, 7 * time.Second, "unreachable (seen 7s ago)"},
		{"dead, behind", false, false, 3, 12 * time.Second, "unreachable (seen 12s ago)"},
		{"offline", true, false, 0, 0, "unreachable (offline)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := PeerStatus{Name: "n3", Current: tc.current, Lag: tc.lag, Active: tc.active, Offline: tc.offline,
				Unreachable: peerUnreachable(tc.offline, tc.current, tc.active)}
			if got := peerState(p); got != tc.want {
				t.Errorf("peerState(%+v) = %q, want %q", p, got, tc.want)
			}
		})
	}
}
