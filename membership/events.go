package membership

import (
	"fmt"
	"sync"
	"time"
)

// State is this node's view of a member.
type State int

const (
	// StateAlive: memberlist counts the member as alive and its suspicion
	// is below the threshold.
	StateAlive State = iota
	// StateSuspect: memberlist still counts the member as alive, but its
	// suspicion is at or above the threshold (it has been silent for
	// longer than its heartbeat history makes plausible).
	StateSuspect
	// StateDead: memberlist declared the member dead (it failed probes and
	// did not refute the suspicion in time).
	StateDead
	// StateLeft: the member announced that it was leaving and then left.
	StateLeft
)

func (s State) String() string {
	switch s {
	case StateAlive:
		return "alive"
	case StateSuspect:
		return "suspect"
	case StateDead:
		return "dead"
	case StateLeft:
		return "left"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// Gone reports whether the state is StateDead or StateLeft.
func (s State) Gone() bool { return s == StateDead || s == StateLeft }

// Member is a snapshot of one member as this node sees it.
type Member struct {
	// Name is the member's unique node name.
	Name string
	// Addr is its gossip address, host:port (the address it advertises).
	Addr string
	// Meta is its metadata, a copy the caller may keep and modify. Nil for
	// a member that runs plain memberlist rather than this package (see
	// "Gossip-only members" in the package documentation).
	Meta map[string]string
	// State is StateSuspect whenever Suspicion ≥ the threshold while
	// memberlist still says alive.
	State State
	// Suspicion is the member's phi, discounted by the local node's health
	// (see the package documentation); 0 for the local node and for plain
	// memberlist members; exactly MaxSuspicion once memberlist declared it
	// dead or it left.
	Suspicion float64
	// LastHeard is when its last heartbeat arrived (local clock), or when
	// it joined if none has yet. For the local node: the time of the call.
	LastHeard time.Time
}

// EventType says what happened to a member.
type EventType int

const (
	// EventJoin: a member joined, or rejoined after being dead or gone.
	EventJoin EventType = iota
	// EventLeave: a member left gracefully (it announced it, then
	// memberlist saw it go).
	EventLeave
	// EventDead: memberlist declared a member dead. Also sent instead of
	// EventLeave when the member's leave announcement was lost. It is sent
	// by the first evaluation at least 25 ms after the verdict (in case the
	// announcement arrives just behind it); Event.Time is the verdict's.
	EventDead
	// EventUpdate: a member's metadata changed.
	EventUpdate
	// EventSuspect: a member's suspicion rose to the threshold or above
	// while memberlist still counts it as alive.
	EventSuspect
	// EventRecover: a suspect member's suspicion fell back below the
	// threshold (usually: its heartbeats arrived again).
	EventRecover
)

func (t EventType) String() string {
	switch t {
	case EventJoin:
		return "join"
	case EventLeave:
		return "leave"
	case EventDead:
		return "dead"
	case EventUpdate:
		return "update"
	case EventSuspect:
		return "suspect"
	case EventRecover:
		return "recover"
	}
	return fmt.Sprintf("EventType(%d)", int(t))
}

// droppable reports whether a lagging reader may lose events of this type.
// Dead and Leave are never dropped: they are the events a consumer acts on
// and cannot rediscover from a later snapshot once the member is forgotten.
func (t EventType) droppable() bool { return t != EventDead && t != EventLeave }

// Event is a change in this node's view of a member. Events never concern
// the local node.
type Event struct {
	Type EventType
	// Member is the member as seen when the event happened.
	Member Member
	// Time is when this node noticed the change (local clock).
	Time time.Time
}

// EventQueueSize bounds the events waiting behind [Node.Events] for a
// reader that lags (see [Node.Events] for what happens beyond it).
const EventQueueSize = 256

// eventQueue decouples event producers (memberlist's goroutines, the
// evaluator) from the reader. push never blocks; run moves events to the
// reader's channel in order.
type eventQueue struct {
	mu      sync.Mutex
	pending []Event
	limit   int
	dropped uint64
	closed  bool
	wake    chan struct{} // capacity 1: "pending is not empty"
}

func newEventQueue(limit int) *eventQueue {
	return &eventQueue{limit: limit, wake: make(chan struct{}, 1)}
}

// push appends ev. When limit events are already waiting, the oldest
// droppable event among them and ev is discarded first; if there is none
// (all are Dead or Leave) the queue grows.
func (q *eventQueue) push(ev Event) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return
	}
	if len(q.pending) >= q.limit {
		i := 0
		for i < len(q.pending) && !q.pending[i].Type.droppable() {
			i++
		}
		switch {
		case i < len(q.pending):
			q.pending = append(q.pending[:i], q.pending[i+1:]...)
			q.dropped++
		case ev.Type.droppable():
			q.dropped++
			return
		}
	}
	q.pending = append(q.pending, ev)
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// Dropped returns how many events were discarded.
func (q *eventQueue) droppedCount() uint64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.dropped
}

func (q *eventQueue) pop() (Event, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.pending) == 0 {
		return Event{}, false
	}
	ev := q.pending[0]
	q.pending[0] = Event{}
	q.pending = q.pending[1:]
	return ev, true
}

func (q *eventQueue) close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	q.pending = nil
}

// run delivers events to out in the order they were pushed until stop is
// closed; then it discards what is left, refuses further pushes and closes
// out.
func (q *eventQueue) run(out chan<- Event, stop <-chan struct{}) {
	defer close(out)
	defer q.close()
	for {
		ev, ok := q.pop()
		if !ok {
			select {
			case <-q.wake:
				continue
			case <-stop:
				return
			}
		}
		select {
		case out <- ev:
		case <-stop:
			return
		}
	}
}
