package registry

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/leased/leased/grantor/api"
	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/kvleasetest"
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

// staticGossip is a member list that does not change.
type staticGossip []membership.Member

func (g staticGossip) Name() string                    { return g[0].Name }
func (g staticGossip) Members() []membership.Member    { return g }
func (g staticGossip) Events() <-chan membership.Event { return nil }
func (g staticGossip) Member(n string) (membership.Member, bool) {
	for _, m := range g {
		if m.Name == n {
			return m, true
		}
	}
	return membership.Member{}, false
}

// The removals a cut-off holds back are only those there are: a node with
// no registrations on it (another grantor, a gossip member that registers
// nothing) held nothing back, yet its death logged "this grantor is likely
// cut off" every ten seconds (found by a review). A node with one still
// logs it, and its registration is left to its TTL.
func TestCutOffWarnsOnlyOfRegistrationsHeldBack(t *testing.T) {
	_, st := kvleasetest.NewStore(t)
	heard := time.Now().Add(-5 * time.Second)
	g := staticGossip{{Name: "grantor", State: membership.StateAlive, LastHeard: time.Now()}}
	for _, n := range []string{"web-1", "web-2", "web-3"} {
		g = append(g, membership.Member{Name: n, State: membership.StateDead, Suspicion: membership.MaxSuspicion, LastHeard: heard})
	}
	var logged bytes.Buffer
	r, err := New(st, WithGossip(g, 8), WithLogger(slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, cut := cutOff(g, "grantor", "web-1", heard, time.Now()); !cut {
		t.Fatal("three of three others dead at once: want cut off")
	}
	r.removeNode("web-1", reasonDead, heard)
	if logged.Len() > 0 {
		t.Errorf("the death of a node with no registrations logged: %s", logged.String())
	}
	reg := api.Registration{Service: "web", Instance: "i2", Addr: "127.0.0.1:1", Node: "web-2"}
	r.instances["web"] = map[string]kvlease.Record{"i2": {Name: reg.LeaseName(), Holder: "web-2", Token: 7,
		Attributes: reg.Attributes(), GrantedAt: heard.Add(-time.Minute)}}
	r.removeNode("web-2", reasonDead, heard)
	if !strings.Contains(logged.String(), "this grantor is likely cut off") {
		t.Errorf("the death of a node with a registration, cut off: logged %q, want the warning", logged.String())
	}
	if tok, ok := r.removed[reg.LeaseName()]; ok {
		t.Errorf("registration marked removed (token %d), want it left to its TTL", tok)
	}
}
