package grantor

import (
	"testing"

	"github.com/leased/leased/grantor/history"
	"github.com/leased/leased/kvlease"
)

func TestEndCause(t *testing.T) {
	for _, c := range []struct {
		ev   kvlease.Event
		want string
	}{
		{kvlease.Event{Type: kvlease.EventReleased}, history.EndReleased},
		{kvlease.Event{Type: kvlease.EventExpired}, history.EndExpired},
		{kvlease.Event{Type: kvlease.EventRevoked, Reason: "stuck"}, history.EndRevoked},
		{kvlease.Event{Type: kvlease.EventRevoked, Reason: history.GossipReasonPrefix + "node declared dead: web-1"}, history.EndRemoved},
	} {
		if got := endCause(c.ev); got != c.want {
			t.Errorf("endCause(%v %q) = %s, want %s", c.ev.Type, c.ev.Reason, got, c.want)
		}
	}
}
