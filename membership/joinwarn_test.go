package membership_test

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/leased/leased/membership"
)

// recorder keeps the records of a slog handler.
type recorder struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec.Clone())
	return nil
}
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *recorder) WithGroup(string) slog.Handler      { return r }

// warnings returns the text of the warnings logged, with their attributes.
func (r *recorder) warnings() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, rec := range r.recs {
		if rec.Level < slog.LevelWarn {
			continue
		}
		s := rec.Message
		rec.Attrs(func(a slog.Attr) bool { s += " " + a.String(); return true })
		out = append(out, s)
	}
	return out
}

// A member whose gossip key is not its seeds' joins no one, but with its
// own address among the seeds (as serve's --gossip-seeds lists every
// grantor, itself included) Join counted it as answered and said nothing:
// a grantor started with another key gossiped alone, its registry judging
// no instance, and neither it nor the others logged a word above debug
// (found by an outside client). Join names each seed that did not answer
// while another did, warning of a key that is not its own.
func TestJoinWarnsOfSeedsThatDidNotAnswer(t *testing.T) {
	key := func(b byte) []byte { return bytes.Repeat([]byte{b}, 32) }
	for _, tc := range []struct {
		name         string
		theirs, mine []byte
	}{
		{"another key", key(7), key(8)},
		{"a key among plain members", nil, key(8)},
		{"no key among keyed members", key(7), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := membership.TestConfig("a")
			c.SecretKey = tc.theirs
			a, err := membership.Start(c)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = a.Shutdown() })
			rec := &recorder{}
			c = membership.TestConfig("b")
			c.SecretKey, c.Logger = tc.mine, slog.New(rec)
			b, err := membership.Start(c)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = b.Shutdown() })
			k, err := b.Join([]string{a.Addr(), b.Addr()})
			if err != nil || k != 1 {
				t.Fatalf("Join(a, itself) = %d, %v; want 1 (itself), nil", k, err)
			}
			ws := rec.warnings()
			if len(ws) != 1 || !strings.Contains(ws[0], a.Addr()) || !strings.Contains(ws[0], "key") {
				t.Errorf("warnings %q: want one naming seed %s and the key", ws, a.Addr())
			}
		})
	}
	// A seed that is down is no warning: a cluster's first member finds its
	// seeds so.
	rec := &recorder{}
	c := membership.TestConfig("c")
	c.Logger = slog.New(rec)
	n, err := membership.Start(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Shutdown() })
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	if k, err := n.Join([]string{closed, n.Addr()}); err != nil || k != 1 {
		t.Fatalf("Join(closed port, itself) = %d, %v", k, err)
	}
	if ws := rec.warnings(); len(ws) != 0 {
		t.Errorf("warnings %q: want none for a seed that is down (the first of a cluster to start finds the others so)", ws)
	}
}
