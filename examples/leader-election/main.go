// Command leader-election shows leader election on a lease, with fencing.
//
// Three candidates, each with its own NATS connection as if it were its own
// process, campaign for "leader.example"; an observer prints every change of
// leader. Whoever wins first writes to a fenced resource with its token and
// resigns: the next candidate takes over as soon as the release reaches it,
// with no polling. The second leader writes, checks its lease, then hangs
// before its next write (it stops renewing, as in a long GC pause); the last
// candidate takes over once the server lapses the lease, and writes. When the
// hung leader wakes and makes the write it had checked for, the fence refuses
// its old token.
//
// Usage:
//
//	go run ./examples/leader-election [-nats-url nats://host:4222]
//
// Without -nats-url it starts an embedded JetStream server in a temporary
// directory, removed on exit. It uses the lease bucket "leader-election".
// On a server of your own, a run that was killed leaves its leader's lease
// until the server lapses it (a few seconds): a run started before that
// finds that leader before it campaigns, and says so (exit 1).
//
// The leases are short (D = 1 s) and the store adds no grantor margin, so
// that a lapse takes about a second. In production keep the default grantor
// margin: it absorbs forward steps of the server's clock.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leased/leased/examples/internal/demo"
	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/election"
	"github.com/leased/leased/kvlease/fence"
)

const (
	leaseBucket   = "leader-election"
	electionName  = "leader.example"
	resource      = "schedule"
	leaseD        = time.Second
	writesPerTerm = 3
)

// errEarlierLeader is run's error when the election has a leader before
// any of its candidates campaigned: one an earlier run left.
var errEarlierLeader = errors.New("the election has a leader left by an earlier run")

// The candidates, in no particular order: whoever wins first leads first.
var candidates = []string{"alpha", "bravo", "charlie"}

func main() {
	natsURL := flag.String("nats-url", "", "NATS server URL (default: an embedded server)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := demo.WithServer(*natsURL, func(url string) error { return run(ctx, os.Stdout, url) }); err != nil {
		log.Fatal(err)
	}
}

// connect opens who's own connection and lease store, as if it were its
// own process.
func connect(ctx context.Context, who, natsURL string) (*nats.Conn, *kvlease.Store, error) {
	nc, err := nats.Connect(natsURL, append(kvlease.ConnOptions(), nats.Name(who))...)
	if err != nil {
		return nil, nil, err
	}
	js, _ := jetstream.New(nc) // fails only on a bad option
	st, err := kvlease.Open(ctx, js, kvlease.WithBucket(leaseBucket), kvlease.WithGrantorMargin(0))
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("%s: %w", who, err)
	}
	return nc, st, nil
}

// handOff tells the next leader who left, and when.
type handOff struct {
	from string
	at   time.Time
}

// story is what the participants share: the narrative, the fenced resource,
// and the hand-offs that let each leader report how its term began.
type story struct {
	mu sync.Mutex
	w  io.Writer

	fence    fence.Mem
	schedule []string // the resource: changed only inside fc.Do

	terms          atomic.Int32  // terms won so far; a leader's term decides its part
	resigned       chan handOff  // term 1 → term 2
	hung           chan handOff  // term 2 → term 3
	successorWrote chan struct{} // term 3 → term 2: the new leader has written
	lateWriteTried chan struct{} // term 2 → term 3: the hung leader's write was tried
	// observed carries each leader's token once the observer has printed
	// it. A leader ends its term only after that: the bucket keeps one
	// message per lease, so a tenure that ended before a lagging observer
	// read it would be replaced by the next and never shown.
	observed chan kvlease.Token
}

// waitObserved waits until the observer has shown the leader of token.
func (s *story) waitObserved(ctx context.Context, token kvlease.Token) error {
	for {
		t, err := recv(ctx, s.observed)
		if err != nil || t == token {
			return err
		}
	}
}

func (s *story) say(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintf(s.w, format+"\n", args...)
}

// write appends entry to the resource through the fence, with token.
func (s *story) write(token kvlease.Token, entry string) error {
	return s.fence.Do(resource, token, func() error {
		s.schedule = append(s.schedule, entry)
		return nil
	})
}

// writeTerm makes a leader's writes, checking its lease before each.
func (s *story) writeTerm(name string, l *election.Leadership) error {
	var entries []string
	for i := 1; i <= writesPerTerm; i++ {
		if err := l.Lease().Check(); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		entry := fmt.Sprintf("%s-%d", name, i)
		if err := s.write(l.Token(), entry); err != nil {
			return fmt.Errorf("%s: write %s: %w", name, entry, err)
		}
		entries = append(entries, entry)
	}
	s.say("%s: wrote %s to %q with token %d", name, strings.Join(entries, ", "), resource, l.Token())
	return nil
}

func recv[T any](ctx context.Context, ch <-chan T) (T, error) {
	select {
	case v := <-ch:
		return v, nil
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

// candidate campaigns until it leads, then plays the part of its term.
func (s *story) candidate(ctx context.Context, name, natsURL string) error {
	nc, st, err := connect(ctx, name, natsURL)
	if err != nil {
		return err
	}
	defer nc.Close()
	e, err := election.New(st, electionName)
	if err != nil {
		return err
	}
	l, err := e.Campaign(ctx, name, leaseD)
	if err != nil {
		return fmt.Errorf("%s: campaign: %w", name, err)
	}
	// On early returns, stop renewing and let the lease lapse. (Campaign's
	// keeper does not end with ctx.) After Resign this does nothing.
	defer l.Orphan()

	switch term := s.terms.Add(1); term {
	case 1: // write, then resign: the next leader takes over at once
		s.say("%s: leads with token %d", name, l.Token())
		if err := s.waitObserved(ctx, l.Token()); err != nil {
			return err
		}
		if err := s.writeTerm(name, l); err != nil {
			return err
		}
		s.say("%s: resigns", name)
		s.resigned <- handOff{name, time.Now()}
		if err := l.Resign(ctx); err != nil {
			return fmt.Errorf("%s: resign: %w", name, err)
		}
		return nil

	case 2: // write, then hang; wake after the next leader has written
		h, err := recv(ctx, s.resigned)
		if err != nil {
			return err
		}
		s.say("%s: leads with token %d, %v after %s resigned",
			name, l.Token(), time.Since(h.at).Round(time.Millisecond), h.from)
		if err := s.waitObserved(ctx, l.Token()); err != nil {
			return err
		}
		if err := s.writeTerm(name, l); err != nil {
			return err
		}
		if err := l.Lease().Check(); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		s.say("%s: lease checked, %v left; hangs before its next write (it stops renewing, as in a long GC pause)",
			name, l.Lease().Remaining().Round(100*time.Millisecond))
		l.Orphan()
		s.hung <- handOff{name, time.Now()}
		if _, err := recv(ctx, s.successorWrote); err != nil {
			return err
		}
		entry := name + "-late"
		s.say("%s: wakes up and writes %s with token %d", name, entry, l.Token())
		err = s.write(l.Token(), entry)
		close(s.lateWriteTried)
		var stale *fence.StaleTokenError
		switch {
		case errors.As(err, &stale):
			s.say("%s: write refused by the fence: token %d is stale, %d already accepted", name, stale.Token, stale.Highest)
		case err == nil:
			return fmt.Errorf("%s: the fence accepted a stale token", name)
		default:
			return fmt.Errorf("%s: late write: %w", name, err)
		}
		if errors.Is(l.Lease().Check(), kvlease.ErrExpired) {
			s.say("%s: (its Check would now fail too, but it had checked before the pause: only the fence could stop it)", name)
		}
		return nil

	case 3: // take over from the hung leader, write, and resign
		h, err := recv(ctx, s.hung)
		if err != nil {
			return err
		}
		s.say("%s: leads with token %d, %v after %s stopped renewing (D = %v)",
			name, l.Token(), time.Since(h.at).Round(time.Millisecond), h.from, leaseD)
		if err := s.waitObserved(ctx, l.Token()); err != nil {
			return err
		}
		if err := s.writeTerm(name, l); err != nil {
			return err
		}
		close(s.successorWrote)
		if _, err := recv(ctx, s.lateWriteTried); err != nil {
			return err
		}
		s.say("%s: resigns", name)
		if err := l.Resign(ctx); err != nil {
			return fmt.Errorf("%s: resign: %w", name, err)
		}
		return nil

	default:
		return fmt.Errorf("%s: unexpected term %d", name, term)
	}
}

// run tells the story against the NATS server at natsURL, writing it to w.
// It returns an error if any step does not go as told, in particular if the
// fence accepts the hung leader's late write.
func run(ctx context.Context, w io.Writer, natsURL string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	s := &story{
		w:              w,
		resigned:       make(chan handOff, 1),
		hung:           make(chan handOff, 1),
		successorWrote: make(chan struct{}),
		lateWriteTried: make(chan struct{}),
		observed:       make(chan kvlease.Token, len(candidates)),
	}

	// The observer watches the election from before the campaigns begin.
	nc, st, err := connect(ctx, "observer", natsURL)
	if err != nil {
		return err
	}
	defer nc.Close()
	e, err := election.New(st, electionName)
	if err != nil {
		return err
	}
	changes, err := e.Observe(ctx)
	if err != nil {
		return err
	}
	// Its first report is the election as it stands, before any campaign:
	// a leader now is one an earlier run left, killed before it resigned.
	select {
	case c, ok := <-changes:
		switch {
		case !ok:
			return fmt.Errorf("observing %q: the watch ended: %w", electionName, ctx.Err())
		case c.Leader != nil:
			return fmt.Errorf("%w: %s (token %d) leads %q before any candidate of this run campaigned; "+
				"its lease lapses within seconds of that run's end: run again then",
				errEarlierLeader, c.Leader.Holder, c.Leader.Token, electionName)
		}
		s.say("observer: no leader")
	case <-ctx.Done():
		return ctx.Err()
	}

	s.say("%s campaign for %q (D = %v)", strings.Join(candidates, ", "), electionName, leaseD)
	errs := make(chan error, len(candidates))
	for _, name := range candidates {
		go func() { errs <- s.candidate(ctx, name, natsURL) }()
	}

	// Print every change until the third leader has left and every
	// candidate is done.
	var leaders []kvlease.Record
	observed := false // the third leader's end was seen
	var firstErr error
	for running := len(candidates); running > 0 || (!observed && firstErr == nil && changes != nil); {
		select {
		case c, ok := <-changes:
			if !ok {
				changes = nil
				continue
			}
			switch {
			case c.Leader != nil:
				leaders = append(leaders, *c.Leader)
				s.say("observer: leader is %s (token %d)", c.Leader.Holder, c.Leader.Token)
				select {
				case s.observed <- c.Leader.Token:
				default: // more leaders than candidates: the checks below say so
				}
			case c.Cause == 0:
				s.say("observer: no leader")
			default:
				s.say("observer: %v", c)
				observed = len(leaders) == len(candidates)
			}
		case err := <-errs:
			running--
			if err != nil && firstErr == nil {
				firstErr = err
				cancel()
			}
		}
	}
	if firstErr != nil {
		return firstErr
	}
	if !observed {
		return fmt.Errorf("the observer saw %d leaders, want %d and a final vacancy: %w", len(leaders), len(candidates), ctx.Err())
	}

	// Three distinct leaders, each with a higher token than the last; the
	// fence took every write but the hung leader's late one.
	seen := map[string]bool{}
	for i, r := range leaders {
		if seen[r.Holder] {
			return fmt.Errorf("%s led twice", r.Holder)
		}
		seen[r.Holder] = true
		if i > 0 && r.Token <= leaders[i-1].Token {
			return fmt.Errorf("token %d of %s is not above %d", r.Token, r.Holder, leaders[i-1].Token)
		}
	}
	last := leaders[len(leaders)-1].Token
	if got := s.fence.Highest(resource); got != last {
		return fmt.Errorf("the fence's highest token is %d, want the last leader's %d", got, last)
	}
	if got := s.fence.Rejected(); got != 1 {
		return fmt.Errorf("the fence refused %d writes, want 1", got)
	}
	s.say("%s = %s (highest token %d; %d write refused)",
		resource, strings.Join(s.schedule, " "), s.fence.Highest(resource), s.fence.Rejected())
	return nil
}
