package readlease_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/election"
	"github.com/leased/leased/kvlease/fence"
	"github.com/leased/leased/kvlease/kvleasetest"
	"github.com/leased/leased/kvlease/readlease"
)

// The test binary doubles as the leader process of the fault test.
func TestMain(m *testing.M) {
	kvleasetest.Main(m, map[string]func(string) error{"read-leader": readLeader})
}

// readLeader leads "leader.read", writes "v1" to the fenced resource and
// keeps it as local state; for every line on stdin it serves a read and
// prints "read <value> <served-from>".
func readLeader(url string) error {
	ctx := context.Background()
	js, st, err := kvleasetest.ChildStore(ctx, url)
	if err != nil {
		return err
	}
	fc, err := fence.OpenKV(ctx, js, "fences")
	if err != nil {
		return err
	}
	e, _ := election.New(st, "leader.read")
	lead, err := e.Campaign(ctx, "first", time.Second)
	if err != nil {
		return err
	}
	if err := fc.Write(ctx, "config", lead.Token(), []byte("v1")); err != nil {
		return err
	}
	local := "v1"
	fmt.Println("leading")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		v, from, err := readlease.Read(ctx, lead.Lease(), 100*time.Millisecond,
			func() (string, error) { return local, nil },
			func(ctx context.Context) (string, error) {
				fv, err := fc.Read(ctx, "config")
				return string(fv.Data), err
			})
		if err != nil {
			return err
		}
		fmt.Printf("read %s %s\n", v, from)
	}
	return nil
}

// A leader serves reads from local state while its lease is held; paused
// past its lease while another leader writes, it does not serve its stale
// local state when it resumes.
func TestReadLeaseNotServedStaleAfterPause(t *testing.T) {
	srv, st := kvleasetest.NewStore(t)
	ctx := t.Context()
	js := kvleasetest.JetStream(t, kvleasetest.Connect(t, srv.ClientURL()))
	fc, err := fence.OpenKV(ctx, js, "fences")
	if err != nil {
		t.Fatal(err)
	}
	cmd, stdin, line := kvleasetest.StartChild(t, "read-leader", srv.ClientURL())
	read := func() string {
		t.Helper()
		if _, err := io.WriteString(stdin, "read\n"); err != nil {
			t.Fatal(err)
		}
		return line()
	}
	if l := line(); l != "leading" {
		t.Fatalf("child: %q", l)
	}
	if got := read(); got != "read v1 local" {
		t.Fatalf("read while leading: %q, want local v1", got)
	}
	// Pause the leader; another leads once its lease lapses, and writes.
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	e, _ := election.New(st, "leader.read")
	second, err := e.Campaign(ctx, "second", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Orphan()
	if err := fc.Write(ctx, "config", second.Token(), []byte("v2")); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if got := read(); !strings.HasPrefix(got, "read v2 ") || !strings.HasSuffix(got, string(readlease.ServedAuthoritative)) {
		t.Fatalf("read after the pause: %q, want v2 served authoritatively (not the stale local v1)", got)
	}
}

// Bad input is refused before anything is read: a nil lease or read, a
// negative margin (taken as 0, it was accepted silently; found by an
// outside client), and a margin that the lease never has left, its
// duration less its holder margin or more (every read went to the
// authority, silently).
func TestReadRefusesBadInput(t *testing.T) {
	_, st := kvleasetest.NewStore(t)
	l, err := kvlease.Acquire(t.Context(), st, "read.bad", "h1", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(t.Context())
	reads := 0
	local := func() (int, error) { reads++; return 1, nil }
	auth := func(context.Context) (int, error) { reads++; return 2, nil }
	for _, c := range []struct {
		name   string
		l      *kvlease.Lease
		margin time.Duration
	}{{"nil lease", nil, time.Second}, {"negative margin", l, -time.Second},
		{"margin of the lease's duration", l, 10 * time.Second}, {"margin of its duration less its margin", l, 10*time.Second - l.Margin()}} {
		if _, _, err := readlease.Read(t.Context(), c.l, c.margin, local, auth); !errors.Is(err, kvlease.ErrInvalidOption) {
			t.Errorf("%s: %v, want ErrInvalidOption", c.name, err)
		}
	}
	if reads != 0 {
		t.Errorf("%d reads made for refused input", reads)
	}
	// Just under it is a margin a fresh lease has left.
	if _, from, err := readlease.Read(t.Context(), l, 10*time.Second-l.Margin()-time.Second, local, auth); err != nil || from != readlease.ServedLocal {
		t.Errorf("margin a second under the lease's validity: %v, %v; want served local", from, err)
	}
}

// A new leader's local state is safe to serve only once the resource's
// fence carries the new tenure's token: the old leader, paused past its
// lease with a checked write in hand, can still land that write until a
// newer token reaches the fence, and a new leader that had loaded its
// state before that (and not written yet) served it locally, stale, for
// the rest of its lease (found in review: the package doc said no other
// holder can have written since this one last did). Raised first, the
// fence refuses the late write, and the local state stays the resource's.
func TestReadLeaseLocalStateAfterTheFenceIsRaised(t *testing.T) {
	for _, raise := range []bool{false, true} {
		t.Run(fmt.Sprintf("raised %v", raise), func(t *testing.T) {
			srv, st := kvleasetest.NewStore(t, kvlease.WithGrantorMargin(0))
			ctx := t.Context()
			js := kvleasetest.JetStream(t, kvleasetest.Connect(t, srv.ClientURL()))
			fc, err := fence.OpenKV(ctx, js, "fences")
			if err != nil {
				t.Fatal(err)
			}
			e, err := election.New(st, "leader.read")
			if err != nil {
				t.Fatal(err)
			}
			first, err := e.Campaign(ctx, "first", time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if err := fc.Write(ctx, "config", first.Token(), []byte("v1")); err != nil {
				t.Fatal(err)
			}
			if err := first.Lease().Check(); err != nil { // then paused, its write in hand
				t.Fatal(err)
			}
			first.Orphan()
			second, err := e.Campaign(ctx, "second", 10*time.Second) // once first's lease lapsed
			if err != nil {
				t.Fatal(err)
			}
			defer second.Orphan()
			if raise {
				if err := fc.Raise(ctx, "config", second.Token()); err != nil {
					t.Fatal(err)
				}
			}
			v, err := fc.Read(ctx, "config")
			if err != nil {
				t.Fatal(err)
			}
			local := string(v.Data) // the new leader's state, loaded

			// first wakes and makes its write.
			lateErr := fc.Write(ctx, "config", first.Token(), []byte("v-late"))
			switch {
			case raise && !errors.Is(lateErr, fence.ErrStaleToken):
				t.Fatalf("late write after the raise: %v, want ErrStaleToken", lateErr)
			case !raise && lateErr != nil:
				t.Fatalf("late write before any newer token reached the fence: %v; the fence accepts it", lateErr)
			}
			got, from, err := readlease.Read(ctx, second.Lease(), 100*time.Millisecond,
				func() (string, error) { return local, nil },
				func(ctx context.Context) (string, error) {
					v, err := fc.Read(ctx, "config")
					return string(v.Data), err
				})
			if err != nil || from != readlease.ServedLocal {
				t.Fatalf("read under second's lease: %q %s %v, want served local", got, from, err)
			}
			now, err := fc.Read(ctx, "config")
			if err != nil {
				t.Fatal(err)
			}
			if stale := got != string(now.Data); stale == raise {
				t.Fatalf("raised %v: served %q locally, the resource holds %q", raise, got, now.Data)
			}
		})
	}
}

// A read is no effect: a holder whose lease has ended serves its reads
// authoritatively, and does not count each as an effect attempted after
// its deadline (Lease.LateEffects, the expiries_during_work metric). Read
// checked with CheckFor, which counts, and a demoted leader's every read
// counted as an expiry during work (found by an outside client).
func TestReadAfterTheLeaseEndedIsNoLateEffect(t *testing.T) {
	_, st := kvleasetest.NewStore(t)
	ctx := t.Context()
	l, err := kvlease.Acquire(ctx, st, "read.ended", "h1", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Revoke(ctx, "read.ended", "test", kvlease.FreeNow()); err != nil {
		t.Fatal(err)
	}
	if err := l.Renew(ctx); !errors.Is(err, kvlease.ErrNotFound) {
		t.Fatalf("renewal of a revoked lease: %v; want ErrNotFound", err)
	}
	for range 10 {
		v, from, err := readlease.Read(ctx, l, 0,
			func() (string, error) { return "local", nil },
			func(context.Context) (string, error) { return "authoritative", nil })
		if err != nil || v != "authoritative" || from != readlease.ServedAuthoritative {
			t.Fatalf("read after the lease ended: %q %s %v", v, from, err)
		}
	}
	if n := l.LateEffects(); n != 0 {
		t.Errorf("10 reads after the lease ended counted %d late effects; want 0", n)
	}
	// An effect still counts.
	if err := l.Check(); !errors.Is(err, kvlease.ErrExpired) {
		t.Fatalf("Check after the lease ended: %v", err)
	}
	if n := l.LateEffects(); n != 1 {
		t.Errorf("a Check after the lease ended counted %d late effects; want 1", n)
	}
}
