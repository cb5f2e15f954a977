package registry

import (
	"testing"
	"time"

	"github.com/leased/leased/membership"
)

// cutOff: most other members in trouble at once says this node is cut off.
func TestCutOff(t *testing.T) {
	type other struct {
		state     membership.State
		silent    time.Duration // how long before the judged node's last heartbeat it fell silent
		suspicion float64
		heard     bool // heard from just now (an alive member's heartbeats)
	}
	var (
		alive   = other{state: membership.StateAlive, suspicion: 0.5, heard: true}
		late    = other{state: membership.StateAlive, suspicion: 0.5, silent: -600 * time.Millisecond} // heard 0.4 s ago
		quiet   = other{state: membership.StateAlive, suspicion: 1.3}                                  // silent with the judged node
		plain   = other{state: membership.StateAlive}                                                  // plain memberlist: no heartbeats
		suspect = other{state: membership.StateSuspect}
		dead    = other{state: membership.StateDead}
		left    = other{state: membership.StateLeft}
		before  = other{state: membership.StateDead, silent: time.Minute} // died in its turn, still listed
		after   = other{state: membership.StateDead, silent: -time.Minute}
		near    = other{state: membership.StateDead, silent: atOnce}
	)
	for _, tc := range []struct {
		name    string
		others  []other // the first is the judged node
		bad, of int
		cut     bool
	}{
		{"one other, dead: no majority to judge", []other{dead}, 1, 1, false},
		{"one of three dead", []other{dead, alive, alive}, 1, 3, false},
		{"half is no majority", []other{dead, alive}, 1, 2, false},
		{"two of three dead", []other{dead, dead, alive}, 2, 3, true},
		{"suspects count", []other{dead, suspect, alive}, 2, 3, true},
		{"all dead", []other{dead, dead, dead}, 3, 3, true},
		{"silent within atOnce", []other{dead, near, alive}, 2, 3, true},
		{"the left do not count", []other{dead, left, left, alive}, 1, 2, false},
		{"the left leave one to judge", []other{dead, left}, 1, 1, false},
		{"earlier deaths do not count", []other{dead, before, before, alive}, 1, 2, false},
		{"earlier deaths leave one to judge", []other{dead, before}, 1, 1, false},
		{"later deaths do not count", []other{dead, after, alive}, 1, 2, false},
		{"earlier deaths do not dilute", []other{dead, before, before, before, dead, dead}, 3, 3, true},
		{"silent with it, not yet suspect", []other{dead, quiet, alive}, 2, 3, true},
		{"silent with it, all", []other{dead, quiet, quiet}, 3, 3, true},
		{"late, not silent", []other{dead, late, alive}, 1, 3, false},
		{"plain memberlist members are never silent", []other{dead, plain, plain}, 1, 3, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			heard := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
			now := heard.Add(time.Second) // the judged node's verdict came after 1 s of silence
			ms := []membership.Member{{Name: "self", State: membership.StateAlive, LastHeard: now}}
			for i, o := range tc.others {
				m := membership.Member{Name: string(rune('a' + i)), State: o.state, Suspicion: o.suspicion, LastHeard: heard.Add(-o.silent)}
				if o.heard {
					m.LastHeard = now.Add(-50 * time.Millisecond)
				}
				if o.state == membership.StateDead {
					m.Suspicion = membership.MaxSuspicion
				}
				ms = append(ms, m)
			}
			// at, the verdict's time, is later than the judged node's last heartbeat: cutOff uses the latter.
			bad, of, cut := cutOff(ms, "self", "a", now, now)
			if bad != tc.bad || of != tc.of || cut != tc.cut {
				t.Fatalf("cutOff = %d of %d, %v; want %d of %d, %v", bad, of, cut, tc.bad, tc.of, tc.cut)
			}
		})
	}
	t.Run("judged node not listed: at", func(t *testing.T) {
		at := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
		ms := []membership.Member{{Name: "b", State: membership.StateDead, LastHeard: at}, {Name: "c", State: membership.StateDead, LastHeard: at}}
		if bad, of, cut := cutOff(ms, "self", "a", at, at.Add(time.Second)); !cut || bad != 2 || of != 2 {
			t.Fatalf("cutOff = %d of %d, %v; want 2 of 2, true", bad, of, cut)
		}
	})
}
