package follow_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leased/leased/kvlease/follow"
	"github.com/leased/leased/kvlease/kvleasetest"
)

func newStream(t *testing.T, opts ...nats.Option) (jetstream.JetStream, *kvleasetest.Server) {
	t.Helper()
	srv := kvleasetest.NewServer(t)
	js := kvleasetest.JetStream(t, kvleasetest.Connect(t, srv.ClientURL(), opts...))
	if _, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}}); err != nil {
		t.Fatal(err)
	}
	return js, srv
}

// start follows stream S from where deliver says.
func start(t *testing.T, js jetstream.JetStream, deliver jetstream.DeliverPolicy) *follow.Follower {
	t.Helper()
	f, err := follow.Start(t.Context(), js, follow.Config{Stream: "S", Filter: "s.>", Deliver: deliver, Heartbeat: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Stop)
	return f
}

func publish(t *testing.T, js jetstream.JetStream, from, to int) {
	t.Helper()
	for i := from; i <= to; i++ {
		if _, err := js.Publish(t.Context(), "s.x", fmt.Appendf(nil, "%d", i)); err != nil {
			t.Fatal(err)
		}
	}
}

// next reads messages from f until want, failing on any other first.
func next(t *testing.T, f *follow.Follower, want ...int) {
	t.Helper()
	for _, w := range want {
		got := make(chan string, 1)
		go func() {
			m, err := f.Next()
			if err != nil {
				got <- err.Error()
				return
			}
			got <- string(m.Data())
		}()
		select {
		case g := <-got:
			if g != fmt.Sprint(w) {
				t.Fatalf("next message %q, want %d", g, w)
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("no message %d within 15 s", w)
		}
	}
}

// nextErr calls f.Next and sends its error (nil for a message).
func nextErr(f *follow.Follower) <-chan error {
	ended := make(chan error, 1)
	go func() {
		_, err := f.Next()
		ended <- err
	}()
	return ended
}

// currentConsumer returns the name of the stream's only consumer.
func currentConsumer(t *testing.T, js jetstream.JetStream) string {
	t.Helper()
	all := kvleasetest.ConsumerNames(t, js, "S")
	if len(all) != 1 {
		t.Fatalf("consumers of S: %v, want one", all)
	}
	return all[0]
}

// A consumer deleted under a Follower is made anew from after the last
// message returned: nothing is lost, nothing comes twice.
func TestFollowerResumesAfterItsConsumerIsDeleted(t *testing.T) {
	js, srv := newStream(t)
	publish(t, js, 1, 5)
	f := start(t, js, jetstream.DeliverAllPolicy)
	if got := f.Info().NumPending; got != 5 {
		t.Fatalf("pending at creation %d, want 5", got)
	}
	next(t, f, 1, 2, 3)
	deleted := kvleasetest.ConsumerDeletions(t, kvleasetest.Connect(t, srv.ClientURL()), "S")
	first := currentConsumer(t, js)
	if err := js.DeleteConsumer(t.Context(), "S", first); err != nil {
		t.Fatal(err)
	}
	<-deleted
	publish(t, js, 6, 7)
	next(t, f, 4, 5, 6, 7)
	if now := currentConsumer(t, js); now == first {
		t.Fatalf("still reading through the deleted consumer %s", now)
	}
}

// A Follower that delivers only new messages and loses its consumer before
// any came resumes after what was there at its creation, not after what is
// there when it notices.
func TestFollowerOfNewMessagesLosesNoneToAReplacement(t *testing.T) {
	js, srv := newStream(t)
	publish(t, js, 1, 2)
	f := start(t, js, jetstream.DeliverNewPolicy)
	deleted := kvleasetest.ConsumerDeletions(t, kvleasetest.Connect(t, srv.ClientURL()), "S")
	if err := js.DeleteConsumer(t.Context(), "S", currentConsumer(t, js)); err != nil {
		t.Fatal(err)
	}
	<-deleted
	publish(t, js, 3, 4) // before the Follower can have made its next consumer
	next(t, f, 3, 4)
}

// Stop ends Next and deletes the consumer before it returns.
func TestFollowerStopDeletesItsConsumer(t *testing.T) {
	js, _ := newStream(t)
	f := start(t, js, jetstream.DeliverAllPolicy)
	currentConsumer(t, js)
	ended := nextErr(f)
	f.Stop()
	if err := <-ended; !errors.Is(err, jetstream.ErrMsgIteratorClosed) {
		t.Fatalf("Next after Stop: %v, want ErrMsgIteratorClosed", err)
	}
	if left := kvleasetest.ConsumerNames(t, js, "S"); len(left) != 0 {
		t.Fatalf("consumers after Stop: %v, want none", left)
	}
	if _, err := f.Next(); !errors.Is(err, jetstream.ErrMsgIteratorClosed) {
		t.Fatalf("Next after Stop: %v, want ErrMsgIteratorClosed", err)
	}
}

// slowDeletes is a JetStream whose consumer deletions wait until released.
type slowDeletes struct {
	jetstream.JetStream
	entered  chan struct{}
	released chan struct{}
}

func (s slowDeletes) DeleteConsumer(ctx context.Context, stream, consumer string) error {
	s.entered <- struct{}{}
	<-s.released
	return s.JetStream.DeleteConsumer(ctx, stream, consumer)
}

// A second Stop, such as a watch's own after its context's, returns only
// once the first has deleted the consumer (it returned at once, with the
// deletion still under way).
func TestStopWaitsForTheFirstStop(t *testing.T) {
	js, _ := newStream(t)
	slow := slowDeletes{JetStream: js, entered: make(chan struct{}, 1), released: make(chan struct{})}
	f, err := follow.Start(t.Context(), slow, follow.Config{Stream: "S", Filter: "s.>", Deliver: jetstream.DeliverAllPolicy, Heartbeat: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	go f.Stop()
	<-slow.entered
	var released atomic.Bool
	go func() {
		time.Sleep(100 * time.Millisecond) // the window in which a second Stop that does not wait returns
		released.Store(true)
		close(slow.released)
	}()
	f.Stop()
	if !released.Load() {
		t.Fatal("the second Stop returned while the first was deleting the consumer")
	}
	if left := kvleasetest.ConsumerNames(t, js, "S"); len(left) != 0 {
		t.Fatalf("consumers after Stop: %v, want none", left)
	}
}

// A closed connection ends Next with nats.ErrConnectionClosed (it made
// consumers anew for ever, and a watch on it never ended).
func TestFollowerReportsAClosedConnection(t *testing.T) {
	js, _ := newStream(t)
	f := start(t, js, jetstream.DeliverAllPolicy)
	ended := nextErr(f)
	js.Conn().Close()
	select {
	case err := <-ended:
		if !errors.Is(err, nats.ErrConnectionClosed) {
			t.Fatalf("Next on a closed connection: %v, want nats.ErrConnectionClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Next did not return 10 s after the connection closed")
	}
}

// Reconnects racing Start and Stop (a data race between Start and the
// Follower's reconnect handling, found with -race).
func TestFollowerStartAmidReconnects(t *testing.T) {
	js, _ := newStream(t, nats.ReconnectWait(time.Millisecond))
	nc := js.Conn()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(3 * time.Millisecond): // the reconnects' pace: nothing to wait on
				_ = nc.ForceReconnect()
			}
		}
	}()
	defer func() { close(stop); <-done }()
	started := 0
	deadline := time.Now().Add(20 * time.Second) // each try may take AttemptTimeout
	for i := 0; i < 300 && time.Now().Before(deadline); i++ {
		f, err := follow.Start(t.Context(), js, follow.Config{Stream: "S", Filter: "s.>",
			Deliver: jetstream.DeliverAllPolicy, Heartbeat: time.Second})
		if err != nil {
			continue // made while reconnecting: the caller's to retry
		}
		started++
		f.Stop()
	}
	if started == 0 {
		t.Fatal("no Start succeeded amid the reconnects")
	}
}

// A stream that does not exist is an error at once, not a retry.
func TestStartOnAMissingStream(t *testing.T) {
	js, _ := newStream(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err := follow.Start(ctx, js, follow.Config{Stream: "nope", Filter: "s.>",
		Deliver: jetstream.DeliverAllPolicy, Heartbeat: time.Second})
	if !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("Start on a missing stream: %v, want ErrStreamNotFound", err)
	}
}

// A zero Heartbeat is DefaultHeartbeat (Start refused it: nats.go takes
// heartbeats of 500 ms to 30 s only).
func TestStartWithoutAHeartbeat(t *testing.T) {
	js, _ := newStream(t)
	publish(t, js, 1, 1)
	f, err := follow.Start(t.Context(), js, follow.Config{Stream: "S", Filter: "s.>", Deliver: jetstream.DeliverAllPolicy})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Stop()
	next(t, f, 1)
}

// waitErr waits up to 30 s for Next's error.
func waitErr(t *testing.T, ended <-chan error) error {
	t.Helper()
	select {
	case err := <-ended:
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("Next still making consumers 30 s on")
		return nil
	}
}

// A stream deleted under a Follower ends Next once consumers have been
// refused for it several times in a row.
func TestNextEndsWhenTheStreamIsGone(t *testing.T) {
	js, _ := newStream(t)
	f := start(t, js, jetstream.DeliverAllPolicy)
	ended := nextErr(f)
	if err := js.DeleteStream(t.Context(), "S"); err != nil {
		t.Fatal(err)
	}
	if err := waitErr(t, ended); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("Next on a deleted stream: %v, want ErrStreamNotFound", err)
	}
}

// A stream deleted and made anew (a server restarted on an empty store, a
// bucket recreated) ends Next with ErrStreamReplaced: its sequence numbers
// started again below where the Follower was, which waited for good (a
// lease watch went silent: found by an outside client).
func TestNextEndsWhenTheStreamIsReplaced(t *testing.T) {
	js, _ := newStream(t)
	publish(t, js, 1, 3)
	f := start(t, js, jetstream.DeliverAllPolicy)
	next(t, f, 1, 2, 3)
	ended := nextErr(f)
	if err := js.DeleteStream(t.Context(), "S"); err != nil {
		t.Fatal(err)
	}
	// Made anew at once, the server may still be removing the old one's
	// store: it answers 500, err_code 10049, "error creating store for
	// stream" (CI, once), and takes it a moment later.
	for end := time.Now().Add(10 * time.Second); ; {
		_, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}})
		var apiErr *jetstream.APIError
		if err == nil {
			break
		}
		if !errors.As(err, &apiErr) || apiErr.ErrorCode != 10049 || time.Now().After(end) {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond) // bounded retry of the server's transient refusal
	}
	publish(t, js, 1, 1)
	if err := waitErr(t, ended); !errors.Is(err, follow.ErrStreamReplaced) {
		t.Fatalf("Next on a stream made anew: %v, want ErrStreamReplaced", err)
	}
}

// A refusal that passes, here the stream's limit on consumers taken by
// another for a while, leaves Next waiting, and it goes on once the place
// is free: a watch must not end for good on a limit that frees up.
func TestNextWaitsOutARefusal(t *testing.T) {
	srv := kvleasetest.NewServer(t)
	js := kvleasetest.JetStream(t, kvleasetest.Connect(t, srv.ClientURL()))
	if _, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, MaxConsumers: 1}); err != nil {
		t.Fatal(err)
	}
	publish(t, js, 1, 1)
	f := start(t, js, jetstream.DeliverAllPolicy)
	next(t, f, 1)
	deleted := kvleasetest.ConsumerDeletions(t, kvleasetest.Connect(t, srv.ClientURL()), "S")
	if err := js.DeleteConsumer(t.Context(), "S", currentConsumer(t, js)); err != nil {
		t.Fatal(err)
	}
	<-deleted
	// Race the Follower for the one place; take it back while it holds it.
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := js.CreateConsumer(t.Context(), "S", jetstream.ConsumerConfig{Durable: "other", AckPolicy: jetstream.AckNonePolicy})
		if err == nil {
			break
		}
		if !errors.Is(err, jetstream.ErrMaximumConsumersLimit) || time.Now().After(deadline) {
			t.Fatal(err)
		}
		if c := kvleasetest.ConsumerNames(t, js, "S"); len(c) == 1 && c[0] != "other" {
			if err := js.DeleteConsumer(t.Context(), "S", c[0]); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
				t.Fatal(err)
			}
		}
	}
	ended := nextErr(f)
	publish(t, js, 2, 2)
	select {
	case err := <-ended:
		t.Fatalf("Next ended while the limit was taken: %v", err)
	case <-time.After(8 * time.Second): // past the 8 attempts (4.6 s of waits) after which a missing stream ends it
	}
	if err := js.DeleteConsumer(t.Context(), "S", "other"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-ended:
		if err != nil {
			t.Fatalf("Next once the place was free: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("no message 15 s after the place was freed")
	}
}

// errMetaLeaderless is JetStream's refusal while its meta group has no
// leader (503, err_code 10008).
var errMetaLeaderless = &jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}

// metaGone is a JetStream whose consumer creations, while silent is set,
// go unanswered as in a cluster whose meta group lost its
// majority: the first times out, the rest are refused 503. Until then
// they go to the server. notFound counts the server's answers that the
// stream is missing, unanswered the creations left unanswered.
type metaGone struct {
	jetstream.JetStream
	silent               atomic.Bool
	notFound, unanswered chan struct{}
	timedOut             atomic.Bool
}

func newMetaGone(js jetstream.JetStream) *metaGone {
	return &metaGone{JetStream: js, notFound: make(chan struct{}, 100), unanswered: make(chan struct{}, 100)}
}

func (m *metaGone) CreateConsumer(ctx context.Context, stream string, cfg jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	if m.silent.Load() {
		defer func() { m.unanswered <- struct{}{} }()
		if !m.timedOut.Swap(true) {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		return nil, errMetaLeaderless
	}
	c, err := m.JetStream.CreateConsumer(ctx, stream, cfg)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		m.notFound <- struct{}{}
	}
	return c, err
}

// A stream deleted under a Follower ends Next even when, after a few
// refusals for the missing stream, JetStream stops answering: in a
// cluster whose other nodes stopped on finding their bucket deleted, the
// last node's meta group had no majority, its creations timed out and
// were then refused 503, each beginning the count of missing answers
// again, and its watch (and serve) ran on for good (found deleting the
// bucket under leased dev-cluster: one node in four runs still up a
// minute later).
func TestNextEndsWhenTheStreamIsGoneAndJetStreamFallsSilent(t *testing.T) {
	js, _ := newStream(t)
	m := newMetaGone(js)
	f, err := follow.Start(t.Context(), m, follow.Config{Stream: "S", Filter: "s.>", Deliver: jetstream.DeliverAllPolicy, Heartbeat: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Stop)
	ended := nextErr(f)
	if err := js.DeleteStream(t.Context(), "S"); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		<-m.notFound
	}
	m.silent.Store(true)
	if err := waitErr(t, ended); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("Next on a deleted stream, JetStream silent after 3 refusals: %v, want ErrStreamNotFound", err)
	}
}

// JetStream's silence alone is not a missing stream: a Follower whose
// creations go unanswered, the stream never said missing, waits on, and
// goes on once JetStream answers again.
func TestNextWaitsOutJetStreamsSilence(t *testing.T) {
	js, _ := newStream(t)
	m := newMetaGone(js)
	publish(t, js, 1, 1)
	f, err := follow.Start(t.Context(), m, follow.Config{Stream: "S", Filter: "s.>", Deliver: jetstream.DeliverAllPolicy, Heartbeat: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Stop)
	next(t, f, 1)
	m.silent.Store(true)
	if err := js.DeleteConsumer(t.Context(), "S", currentConsumer(t, js)); err != nil {
		t.Fatal(err)
	}
	ended := nextErr(f)
	for range 10 { // past the 8 attempts after which a missing stream ends it
		select {
		case <-m.unanswered:
		case err := <-ended:
			t.Fatalf("Next ended while JetStream did not answer: %v", err)
		}
	}
	m.silent.Store(false) // answering again
	publish(t, js, 2, 2)
	select {
	case err := <-ended:
		if err != nil {
			t.Fatalf("Next once JetStream answered again: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("no message 15 s after JetStream answered again")
	}
}

// A Follower says when it loses its consumer (OnDrop; Following false
// until Next has made another), as its connection is lost, once (not
// again as it comes back), so that a reader can act while nothing is
// delivered: making the next consumer can take seconds. Stop is no loss.
func TestFollowerSaysWhenItLosesItsConsumer(t *testing.T) {
	js, _ := newStream(t)
	dropped := make(chan struct{}, 2)
	f, err := follow.Start(t.Context(), js, follow.Config{Stream: "S", Filter: "s.>", Deliver: jetstream.DeliverAllPolicy,
		Heartbeat: time.Second, OnDrop: func() { dropped <- struct{}{} }})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Stop()
	if !f.Following() {
		t.Fatal("not following after Start")
	}
	publish(t, js, 1, 1)
	next(t, f, 1)
	if err := js.Conn().ForceReconnect(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-dropped:
	case <-time.After(15 * time.Second):
		t.Fatal("no OnDrop 15 s after a reconnect")
	}
	if f.Following() {
		t.Fatal("following with its consumer dropped")
	}
	publish(t, js, 2, 2)
	next(t, f, 2)
	if !f.Following() {
		t.Fatal("not following after Next made a consumer")
	}
	f.Stop()
	if f.Following() {
		t.Fatal("following once stopped")
	}
	select {
	case <-dropped:
		t.Fatal("OnDrop called twice for one reconnect, or by Stop")
	default:
	}
}
