package membership

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
)

func ev(t EventType, name string) Event { return Event{Type: t, Member: Member{Name: name}} }

// short renders events as "join a, dead b" for comparisons.
func short(evs []Event) string {
	s := make([]string, len(evs))
	for i, e := range evs {
		s[i] = e.Type.String() + " " + e.Member.Name
	}
	return strings.Join(s, ", ")
}

func drain(q *eventQueue) []Event {
	var evs []Event
	for {
		e, ok := q.pop()
		if !ok {
			return evs
		}
		evs = append(evs, e)
	}
}

func TestEventQueue(t *testing.T) {
	tests := []struct {
		name    string
		limit   int
		push    []Event
		want    string
		dropped uint64
	}{
		{"in order", 4,
			[]Event{ev(EventJoin, "a"), ev(EventSuspect, "a"), ev(EventRecover, "a")},
			"join a, suspect a, recover a", 0},
		{"drops the oldest", 2,
			[]Event{ev(EventJoin, "a"), ev(EventJoin, "b"), ev(EventJoin, "c")},
			"join b, join c", 1},
		{"skips dead and leave when dropping", 3,
			[]Event{ev(EventDead, "a"), ev(EventJoin, "b"), ev(EventLeave, "c"), ev(EventUpdate, "d")},
			"dead a, leave c, update d", 1},
		{"a droppable event does not displace dead ones", 2,
			[]Event{ev(EventDead, "a"), ev(EventLeave, "b"), ev(EventSuspect, "c")},
			"dead a, leave b", 1},
		{"dead and leave are never dropped", 2,
			[]Event{ev(EventDead, "a"), ev(EventLeave, "b"), ev(EventDead, "c"), ev(EventJoin, "d"), ev(EventDead, "e")},
			"dead a, leave b, dead c, dead e", 1},
		{"drops suspect and recover too", 2,
			[]Event{ev(EventSuspect, "a"), ev(EventRecover, "a"), ev(EventDead, "a")},
			"recover a, dead a", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := newEventQueue(tt.limit)
			for _, e := range tt.push {
				q.push(e)
			}
			if got := short(drain(q)); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
			if q.droppedCount() != tt.dropped {
				t.Errorf("dropped %d, want %d", q.droppedCount(), tt.dropped)
			}
		})
	}
}

// TestEventQueueRun checks the dispatcher: order, a push never blocks on a
// reader that does not read, stop closes the channel, and pushes after stop
// are ignored.
func TestEventQueueRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newEventQueue(3)
		out := make(chan Event)
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() { defer close(done); q.run(out, stop) }()

		q.push(ev(EventJoin, "0"))
		synctest.Wait()           // the dispatcher holds "join 0", blocked on out
		for i := 1; i < 10; i++ { // nobody reads: push must not block
			q.push(ev(EventJoin, fmt.Sprint(i)))
		}
		q.push(ev(EventDead, "x"))
		synctest.Wait()
		// The queue kept the newest droppable events and the dead one.
		var got []Event
		for range 4 {
			got = append(got, <-out)
		}
		if want := "join 0, join 8, join 9, dead x"; short(got) != want {
			t.Errorf("got %q, want %q", short(got), want)
		}
		if d := q.droppedCount(); d != 7 {
			t.Errorf("dropped %d, want 7", d)
		}

		q.push(ev(EventJoin, "late"))
		synctest.Wait() // dispatcher blocked on out with "late" in hand
		close(stop)
		<-done
		if _, ok := <-out; ok {
			t.Error("channel not closed after stop")
		}
		q.push(ev(EventDead, "after"))
		if evs := drain(q); len(evs) != 0 {
			t.Errorf("queue accepted %v after close", evs)
		}
	})
}

func TestStringers(t *testing.T) {
	var got []string
	for s := range State(5) {
		got = append(got, s.String())
	}
	for e := range EventType(7) {
		got = append(got, e.String())
	}
	got = append(got, ProfileLAN.String(), ProfileTest.String(), Profile(9).String())
	want := []string{"alive", "suspect", "dead", "left", "State(4)",
		"join", "leave", "dead", "update", "suspect", "recover", "EventType(6)",
		"lan", "test", "Profile(9)"}
	if !slices.Equal(got, want) {
		t.Errorf("got %q", got)
	}
}
